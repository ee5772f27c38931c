"""Demo launcher: holds the images the demo's jobs run, pinned by `invoke pin --profile demo`."""

__all__ = ["DEFAULT_RL_DOCKER_IMAGE", "DEFAULT_RL_EXTRA_DOCKER_IMAGE", "RL_PYTHON"]

# Not pinned yet: the first local build + `invoke pin --profile demo` replaces this tag with the
# immutable 127.0.0.1:5005/gpurl/demo@sha256:<digest> of the demo-<gitsha> tag.
DEFAULT_RL_DOCKER_IMAGE = "127.0.0.1:5005/gpurl/demo:demo"

# The `extra` variant (`invoke build --backend local --profile demo --variant extra`); not
# pinned yet: `invoke pin --profile demo --variant extra` replaces this tag with the immutable
# digest of the demo-extra-<gitsha> tag.
DEFAULT_RL_EXTRA_DOCKER_IMAGE = "127.0.0.1:5005/gpurl/demo:demo-extra"

# The environment's python in the image (build.venv): `invoke generate` and `invoke pin` refuse
# an image whose environment is elsewhere.
RL_PYTHON = "/opt/demo/envs/rl/bin/python"
