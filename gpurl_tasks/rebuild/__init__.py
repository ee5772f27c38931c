"""Does a change need a new image? The fingerprint of the baked inputs and the decision
(`fingerprint`, pure), reading them at a commit and in the working tree (`inputs`), the
prebuilt wheels read where they are (`wheelhouse`), and what changed between two pushed images
(`diff`).

Imports the basics, `plan`, `dockerfile` and `oci`.
"""
