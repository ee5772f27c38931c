"""The registry side: image types parsed from registry documents (`image`), the HTTP client
(`registry`), the scheme it speaks to a host (`scheme`) and its credentials (`auth`), the layer
rules (`verify`), artifacts attached to an image (`referrers`) and its SBOM and provenance
there (`attested`), the launcher edit (`pin`) and the verify-then-pin flow (`release`).

Imports the basics, `plan`, `dockerfile` and `attest`; `image`, `scheme`, `verify` and `pin` are
pure.
"""
