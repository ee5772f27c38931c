"""A typed image-table module shaped like the team's `cloud/iris/gpu_rl_images.py` (its
facts: enums for the architecture and the trainer, a frozen dataclass per image, module-level
source and harbor commits, a cluster map), written here for the tests, with the odd spacing
and comments a hand-kept file has. `evaluate` runs it in a scratch namespace: what the
launcher would read."""

from __future__ import annotations

import sys
import types
from typing import Any

__all__ = ["ARCHES", "FLAVORS", "HARBOR", "KEYS", "SOURCE", "evaluate", "key_of", "old_digest",
           "table_module"]

SOURCE = "5d41402abc4b2a76b9719d911017c592a1b2c3d4"
HARBOR = "7c4a8d09ca3762af61e59520943dc26494f8941b"
ARCHES = ("AMD64", "ARM64")
FLAVORS = ("STANDARD", "MEGATRON")
KEYS = tuple((arch, flavor) for arch in ARCHES for flavor in FLAVORS)
_SUFFIX = {"AMD64": "", "ARM64": "-arm64"}
_PREFIX = {"STANDARD": "gpu-rl", "MEGATRON": "gpu-rl-megatron"}


def key_of(arch: str, flavor: str) -> str:
    """The entry's key as `ast.unparse` spells it (what launcher.table-key resolves to)."""
    return f"(ImageArchitecture.{arch}, ImageVariant.{flavor})"


def _entry(arch: str, flavor: str, digest: str) -> str:
    return (f"    (ImageArchitecture.{arch}, ImageVariant.{flavor}): GpuRlImage(\n"
            f"        architecture=ImageArchitecture.{arch},\n"
            f"        variant=ImageVariant.{flavor},\n"
            f'        digest="{digest}",\n'
            f'        tag=f"{_PREFIX[flavor]}-{{SOURCE_COMMIT}}{_SUFFIX[arch]}",\n'
            f"        source_commit=SOURCE_COMMIT,\n"
            f"        harbor_commit=HARBOR_COMMIT,\n"
            f"    ),\n")


def old_digest(key: tuple[str, str]) -> str:
    """The digest the fixture gives the entry of `key` (each entry its own)."""
    return "sha256:" + f"{KEYS.index(key) + 1:x}" * 64


def table_module(source: str = SOURCE, keys: tuple[tuple[str, str], ...] = KEYS) -> str:
    """The module's text with the entries of `keys`, built from commit `source`."""
    entries = "".join(_entry(arch, flavor, old_digest((arch, flavor))) for arch, flavor in keys)
    return f'''"""The GPU RL images the launcher runs, one per machine architecture and trainer."""

from __future__ import annotations

import dataclasses
from enum import StrEnum

IMAGE_REPOSITORY = "ghcr.io/example-org/example-agent"


class ImageArchitecture(StrEnum):
    AMD64 = "amd64"
    ARM64 = "arm64"


class ImageVariant(StrEnum):
    STANDARD = "standard"
    MEGATRON = "megatron"


@dataclasses.dataclass(frozen=True)
class GpuRlImage:
    architecture: ImageArchitecture
    variant: ImageVariant
    digest: str
    tag: str
    source_commit: str
    harbor_commit: str

    @property
    def reference(self) -> str:
        return f"{{IMAGE_REPOSITORY}}:{{self.tag}}@{{self.digest}}"


# the commit all four images were built from (bump together)
SOURCE_COMMIT = "{source}"
HARBOR_COMMIT = '{HARBOR}'  # harbor is installed at this commit

GPU_RL_IMAGES = {{
{entries}}}

CLUSTER_ARCHITECTURES = {{
    "cw-rno2a": ImageArchitecture.AMD64,
    "cw-us-east-02a": ImageArchitecture.AMD64,
    "cw-us-east-08a": ImageArchitecture.ARM64,
}}


def image_for_cluster(cluster: str, strategy: str) -> GpuRlImage:
    variant = ImageVariant.MEGATRON if strategy == "megatron" else ImageVariant.STANDARD
    return GPU_RL_IMAGES[(CLUSTER_ARCHITECTURES[cluster], variant)]
'''


def evaluate(text: str) -> dict[tuple[str, str], dict[str, Any]]:
    """Run the module in a scratch namespace and read its table: (ARCH, FLAVOR) -> fields."""
    module = types.ModuleType("scratch_gpu_rl_images")
    sys.modules[module.__name__] = module  # dataclasses looks its module up while it runs
    try:
        exec(compile(text, "gpu_rl_images.py", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    return {(k[0].name, k[1].name): {"digest": v.digest, "tag": v.tag,
                                     "source_commit": v.source_commit,
                                     "harbor_commit": v.harbor_commit}
            for k, v in module.GPU_RL_IMAGES.items()}
