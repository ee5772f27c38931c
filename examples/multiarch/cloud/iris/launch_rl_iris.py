"""Multi-platform launcher: one pin for the H100 (amd64) and GB200 (arm64) clusters, and one per
platform for a launcher that wants it; pinned by `invoke pin --profile multiarch`."""

__all__ = ["DEFAULT_RL_AMD64_DOCKER_IMAGE", "DEFAULT_RL_ARM64_DOCKER_IMAGE",
           "DEFAULT_RL_DOCKER_IMAGE", "RL_PYTHON"]

# Not pinned yet: `invoke pin --profile multiarch` replaces this tag with the immutable digest of
# the image index holding both platforms' images (containerd picks the node's platform).
DEFAULT_RL_DOCKER_IMAGE = "127.0.0.1:5005/gpurl/multiarch:multiarch"

# Each platform's own image, for a launcher that names the platform itself.
DEFAULT_RL_AMD64_DOCKER_IMAGE = "127.0.0.1:5005/gpurl/multiarch:multiarch"
DEFAULT_RL_ARM64_DOCKER_IMAGE = "127.0.0.1:5005/gpurl/multiarch:multiarch-gb200"

# The environment's python in the image (build.venv): `invoke generate` and `invoke pin` refuse
# an image whose environment is elsewhere.
RL_PYTHON = "/opt/multiarch/envs/rl/bin/python"
