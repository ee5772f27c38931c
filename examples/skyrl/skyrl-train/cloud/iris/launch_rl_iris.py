"""The skyrl fixture's launcher: jobs run exactly the image digests below.

`invoke pin --profile skyrl` rewrites an assignment after a verified build; never pin a floating
tag (it stale-caches on nodes under imagePullPolicy: IfNotPresent).
"""

__all__ = ["DEFAULT_RL_DOCKER_IMAGE", "DEFAULT_RL_MEGATRON_DOCKER_IMAGE"]

# Not pinned yet: `invoke pin --profile skyrl` replaces each tag with a verified image's digest.
DEFAULT_RL_DOCKER_IMAGE = "ghcr.io/open-thoughts/openthoughts-agent:skyrl"
DEFAULT_RL_MEGATRON_DOCKER_IMAGE = "ghcr.io/open-thoughts/openthoughts-agent:skyrl-megatron"
