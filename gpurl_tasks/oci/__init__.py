"""The registry side: image types parsed from registry documents (`image`), the HTTP client
(`registry`) and its credentials (`auth`), the layer rules (`verify`), the launcher edit
(`pin`) and the verify-then-pin flow (`release`).

Imports the basics, `plan` and `dockerfile`; `image`, `verify` and `pin` are pure.
"""
