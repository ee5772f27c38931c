SFT_IMAGE = "registry.example.test/team/images:sft-0000000"
SANDBOX_IMAGE = "sandbox-registry.example.test/team/images:sandbox-0000000"
