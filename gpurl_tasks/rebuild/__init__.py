"""Does a change need a new image? The fingerprint of the baked inputs and the decision
(`fingerprint`, pure), reading them at a commit and in the working tree (`inputs`), and the
prebuilt wheels read where they are (`wheelhouse`).

Imports the basics, `plan`, `dockerfile` and `oci`.
"""
