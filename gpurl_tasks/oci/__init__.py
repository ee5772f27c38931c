"""The registry side: image types parsed from registry documents (`image`), the HTTP client
(`registry`; when it retries a request is writer/retry.py's), the scheme it speaks to a host
(`scheme`), its credentials (`auth`) and the client for a reference's host (`connect`), that an
immutable tag is never moved (`tags`), artifacts attached to an image (`referrers`), and the
client as the composition's registry (`composing`).

Takes plain values (references, tags, settings, media types, bytes): the config, git and the
attestation documents stay with the callers (release/configured.py maps a config to them).
Imports the basics and `writer` (writer/ocispec.py's media types and artifacts, writer/retry.py's
rules); `image` and `scheme` are pure.
"""
