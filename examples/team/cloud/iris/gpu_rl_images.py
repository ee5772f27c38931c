"""The pinned GPU RL training images, one per (architecture, variant).

The launcher picks its image here by the cluster it runs on and the trainer's strategy. Every
entry names its image by digest; the tag and the commits say what it was built from. Entries
built from one commit share the module-level commits below.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

IMAGE_REPOSITORY = "ghcr.io/team-example/teamrl"

SOURCE_COMMIT = "0000000000000000000000000000000000000000"
HARBOR_COMMIT = "1111111111111111111111111111111111111111"


class ImageArchitecture(StrEnum):
    AMD64 = "amd64"
    ARM64 = "arm64"


class ImageVariant(StrEnum):
    STANDARD = "standard"
    MEGATRON = "megatron"


@dataclass(frozen=True)
class GpuRlImage:
    architecture: ImageArchitecture
    variant: ImageVariant
    digest: str
    tag: str
    source_commit: str
    harbor_commit: str

    @property
    def reference(self) -> str:
        return f"{IMAGE_REPOSITORY}@{self.digest}"


GPU_RL_IMAGES: dict[tuple[ImageArchitecture, ImageVariant], GpuRlImage] = {
    (ImageArchitecture.AMD64, ImageVariant.STANDARD): GpuRlImage(
        architecture=ImageArchitecture.AMD64,
        variant=ImageVariant.STANDARD,
        digest="sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        tag=f"gpu-rl-{SOURCE_COMMIT}",
        source_commit=SOURCE_COMMIT,
        harbor_commit=HARBOR_COMMIT,
    ),
    (ImageArchitecture.AMD64, ImageVariant.MEGATRON): GpuRlImage(
        architecture=ImageArchitecture.AMD64,
        variant=ImageVariant.MEGATRON,
        digest="sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
        tag=f"gpu-rl-megatron-{SOURCE_COMMIT}",
        source_commit=SOURCE_COMMIT,
        harbor_commit=HARBOR_COMMIT,
    ),
    (ImageArchitecture.ARM64, ImageVariant.STANDARD): GpuRlImage(
        architecture=ImageArchitecture.ARM64,
        variant=ImageVariant.STANDARD,
        digest="sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc",
        tag=f"gpu-rl-{SOURCE_COMMIT}-arm64",
        source_commit=SOURCE_COMMIT,
        harbor_commit=HARBOR_COMMIT,
    ),
    (ImageArchitecture.ARM64, ImageVariant.MEGATRON): GpuRlImage(
        architecture=ImageArchitecture.ARM64,
        variant=ImageVariant.MEGATRON,
        digest="sha256:dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd",
        tag=f"gpu-rl-megatron-{SOURCE_COMMIT}-arm64",
        source_commit=SOURCE_COMMIT,
        harbor_commit=HARBOR_COMMIT,
    ),
}

# Which machines each cluster runs: the H100 clusters are amd64, the GB200 cluster arm64.
CLUSTER_ARCHITECTURES: dict[str, ImageArchitecture] = {
    "cw-rno2a": ImageArchitecture.AMD64,
    "cw-us-east-02a": ImageArchitecture.AMD64,
    "cw-us-east-08a": ImageArchitecture.ARM64,
}


def image_for_cluster(cluster: str, strategy: str) -> GpuRlImage:
    """The image a job on `cluster` runs: the megatron variant for the megatron strategy."""
    try:
        architecture = CLUSTER_ARCHITECTURES[cluster]
    except KeyError:
        raise ValueError(f"unknown cluster {cluster!r}: add it to CLUSTER_ARCHITECTURES") from None
    variant = ImageVariant.MEGATRON if strategy == "megatron" else ImageVariant.STANDARD
    return GPU_RL_IMAGES[(architecture, variant)]
