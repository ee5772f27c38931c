"""The RL launcher's image pin: jobs run exactly this image digest.

`invoke pin` rewrites the assignment below after a verified build; never pin the floating
:gpu-rl tag (it stale-caches on nodes under imagePullPolicy: IfNotPresent).
"""

__all__ = ["DEFAULT_RL_DOCKER_IMAGE", "DEFAULT_RL_MEGATRON_DOCKER_IMAGE", "RL_PYTHON"]

# gpu-rl-e03896b7 (harbor f4a6b1a0; 48 layers, max 3.46 GB; build asserts green), the last
# known-good image from the hand-run runbook.
DEFAULT_RL_DOCKER_IMAGE = "ghcr.io/open-thoughts/openthoughts-agent@sha256:e8b48241b548da570a319ff421e72787692ee87dae2408c99a2d0c6794186177"  # noqa: E501 (a digest pin is one token)

# The megatron variant (`invoke build --variant megatron`); not pinned yet: `invoke pin --variant
# megatron` replaces this tag with the digest of a verified gpu-rl-megatron-<gitsha> image.
DEFAULT_RL_MEGATRON_DOCKER_IMAGE = "ghcr.io/open-thoughts/openthoughts-agent:gpu-rl-megatron"

# The environment's python in the image (build.venv): `invoke generate` and `invoke pin` refuse
# an image whose environment is elsewhere.
RL_PYTHON = "/opt/openthoughts/envs/rl/bin/python"
