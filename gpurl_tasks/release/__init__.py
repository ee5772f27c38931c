"""The release of a pushed image: the layer rules and their rendering (`verify`, pure), its SBOM
and provenance attached and checked there (`attested`), what changed between two pushed images
(`diff`), the launcher edit (`pin`, pure), the image index of variants of several platforms
sharing one launcher variable (`index`, pure), the GPU verdict attached to an image and
pin's rule for it (`gpu`), the verify-then-pin flow behind `verify-layers` and `pin`
(`flow`), an image of the same inputs found and tagged instead of built (`reuse`), and the
registry as a config names it, in oci's plain values (`configured`: the
client settings, this tree's immutable tag, the index's tag, the layer cache).

Imports the basics, `plan`, `dockerfile`, `attest`, `oci` and `rebuild`.
"""
