"""The registry side: image types parsed from registry documents (`image`), the HTTP client
(`registry`), the scheme it speaks to a host (`scheme`) and its credentials (`auth`), the layer
rules (`verify`), the launcher edit (`pin`) and the verify-then-pin flow (`release`).

Imports the basics, `plan` and `dockerfile`; `image`, `scheme`, `verify` and `pin` are pure.
"""
