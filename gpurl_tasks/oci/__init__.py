"""The registry side: image types parsed from registry documents (`image`), the HTTP client
(`registry`), when it and the cluster job retry a request (`retry`), the scheme it speaks to a
host (`scheme`), its credentials (`auth`) and the client for a reference's host (`connect`),
what an immutable tag already holds (`tags`), and artifacts attached to an image
(`referrers`).

Imports the basics, `plan`, `dockerfile` and `attest`; `image`, `scheme` and `retry` are pure.
"""
