"""What a pushed image carries about itself: an exact SBOM (`sbom`, CycloneDX 1.6 JSON, built
from the lock, the compiled wheels' MANIFEST, the declared post-installs and the apt set read in
the image), its build provenance (`provenance`, an in-toto statement with a SLSA v1 predicate),
what they list for a variant (`collect`: the lock's closure and the declared installs, read the
same way when written and when checked), the one writer of both documents on either build
path (`documents`), the cluster job's attestation step (`tool`: both written and attached,
shipped in the job's zipapp, cluster/jobapp.py), verify-layers' rules for them (`check`),
the GPU check's verdict as an in-toto SLSA Verification Summary (`verification`, what `invoke
verify-gpu` attaches and `pin` reads back), and the statement a build of unchanged inputs
attaches when it tags an image built from another commit (`sameinputs`, read by `check`'s
caller). They travel as writer/ocispec.py's OCI 1.1 artifacts, attached at the registry by
oci/referrers.py (the referrers API, or the `sha256-<digest>` tag schema where a registry lacks
it, as ghcr.io does).

`sbom`, `provenance`, `documents`, `check`, `verification` and `sameinputs` are pure; `sbom`,
`provenance`, `documents` and `sameinputs` import the stdlib, each other and writer/ocispec.py
only, `tool` those and writer/crane.py (its registry calls; the job has no gpurl). Imports the
basics, `writer`, `plan` and `gpu` (the check's result document); `release` and `cluster` read
it.
"""
