"""The registry side: image types parsed from registry documents (`image`), the HTTP client
(`registry`), when it and the cluster job retry a request (`retry`), the scheme it speaks to a
host (`scheme`), its credentials (`auth`) and the client for a reference's host (`connect`),
that an immutable tag is never moved (`tags`), and artifacts attached to an image
(`referrers`).

Takes plain values (references, tags, settings, media types, bytes): the config, git and the
attestation documents stay with the callers (release/configured.py maps a config to them).
Imports the basics and `writer` (writer/ocispec.py's media types and artifacts); `image`,
`scheme` and `retry` are pure.
"""
