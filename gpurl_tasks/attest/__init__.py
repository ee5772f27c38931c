"""What a pushed image carries about itself: an exact SBOM (`sbom`, CycloneDX 1.6 JSON, built
from the lock, the compiled wheels' MANIFEST, the declared post-installs and the apt set read in
the image), its build provenance (`provenance`, an in-toto statement with a SLSA v1 predicate),
what they list for a variant (`collect`: the lock's closure and the declared installs, read the
same way when written and when checked) and verify-layers' rules for them (`check`). They are
attached at the registry by oci/referrers.py (the referrers API, or the `sha256-<digest>` tag
schema where a registry lacks it, as ghcr.io does).

`sbom`, `provenance` and `check` are pure. Imports the basics and `plan`; `oci` reads it.
"""
