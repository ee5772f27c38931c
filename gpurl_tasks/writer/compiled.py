"""The compiled wheels as one more layer gpurl writes on the composed environment (stdlib
only: the cluster job runs it in env-base's python3).

Built by the Dockerfile, the compiled tree sits on the environment: every lock bump gives a
new environment and so a new compiled layer, pushed again although the wheels are the same
(several hundred MB at the gpu-rl image's shape). Written by gpurl, the layer is keyed by
what it holds (the wheels' MANIFEST, which records each wheel's sha256 and the ABI key, and
the wheels' names) like a slice is, so a bump reuses it. The layer is what the Dockerfile's
compiled stage lays out: the wheels installed into the venv (no wheel file) and the MANIFEST.

Both paths write it when the wheels are prebuilt: the cluster job after fetching them
(`start admit`), the local path from build.wheelhouse in a container of env-base (the layer
tool's `compiled`, local/stage.py), each through writer/job.py's write_compiled_layer. Wheels
compiled by the build itself (WHEEL_SOURCE=wheel-builder) exist only inside it, and the
Dockerfile's stage installs them as before. The final build takes the composed environment
with `COMPILED_SOURCE=env`: the rl stage is then FROM it, not FROM the stage that copies the
tree (dockerfile/recipe.py).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from gpurl_tasks.writer.blob import WRITER_VERSION

__all__ = ["COMPILED_ARG", "COMPILED_IN_ENV", "COMPILED_SLOT", "ENV_ARG", "WHEELS_MANIFEST", "WHEELS_TMP",
           "compiled_build_args", "compiled_history", "composed_build_args", "lay_out_manifest",
           "wheels_install_command"]

COMPILED_SLOT = "compiled-wheels"  # its name in the job's log, and its cache tag's label
WHEELS_MANIFEST = "/etc/gpurl/provenance/wheels.MANIFEST"  # the MANIFEST, in the image
WHEELS_TMP = "/tmp/wheels"  # where the Dockerfile's compiled stage has the wheel files
ENV_ARG = "ENV_SOURCE"  # the final build's environment: a stage, or the composed image
COMPILED_ARG = "COMPILED_SOURCE"  # what the rl stage is FROM: the copied tree, or env itself
COMPILED_IN_ENV = "env"  # COMPILED_ARG when the composed environment holds the compiled layer


def wheels_install_command(*, prefix: str, venv: str, wheels: Sequence[str]) -> list[str]:
    """The install of the compiled wheel files, laid out as they sit in `venv`, under `prefix`
    (no dependency: the lock's slices hold them; no installer metadata, as for a slice)."""
    return ["uv", "pip", "install", "--no-deps", "--no-installer-metadata", "--prefix", prefix,
            "--python", f"{venv}/bin/python", *wheels]


def compiled_history(wheels: Sequence[str], venv: str) -> str:
    """The compiled layer's history entry: what ran to write it (never a slice's: it names
    no slice file, so `records.slice_of` reads it as no slice)."""
    return (f"gpurl {WRITER_VERSION}: uv pip install --no-deps --no-installer-metadata "
            f"--prefix {venv} {' '.join(f'{WHEELS_TMP}/{w}' for w in wheels)} "
            f"&& cp {WHEELS_TMP}/MANIFEST {WHEELS_MANIFEST}")


def lay_out_manifest(manifest: Path, tree: Path) -> None:
    """Put the wheels' MANIFEST where the image keeps it, in the layer's tree (`tree` is the
    image's root): the build asserts and the attestation read it there."""
    target = tree / WHEELS_MANIFEST.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(manifest, target)


def composed_build_args(environment: str, *, compiled: bool) -> dict[str, str]:
    """The final build's args for a composed environment: the environment, and when it holds
    the compiled layer, the rl stage FROM it (both paths)."""
    return {ENV_ARG: environment, **({COMPILED_ARG: COMPILED_IN_ENV} if compiled else {})}


def compiled_build_args(environment: str, *, compiled: bool) -> list[str]:
    """composed_build_args as `NAME=value` lines of the job's env-args file."""
    return [f"{name}={value}"
            for name, value in composed_build_args(environment, compiled=compiled).items()]
