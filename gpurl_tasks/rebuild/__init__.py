"""Does a change need a new image? The fingerprint of the baked inputs and the decision
(`fingerprint`, pure), reading them at a commit and in the working tree (`inputs`), the key a
build's inputs record its pushed image under (`inputs_key`, pure), and the prebuilt wheels read
where they are (`wheelhouse`).

Imports the basics, `plan`, `dockerfile` and `oci`.
"""
