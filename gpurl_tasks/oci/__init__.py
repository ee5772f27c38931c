"""The registry side: image types parsed from registry documents (`image`), the HTTP client
(`registry`; when it retries a request is writer/retry.py's), the scheme it speaks to a host
(`scheme`), its credentials (`auth`) and the client for a reference's host (`connect`), what
an immutable tag already holds (`tags`), artifacts attached to an image (`referrers`), and the
client as the composition's registry (`composing`).

Imports the basics, `plan`, `dockerfile` and `attest`; `image` and `scheme` are pure.
"""
