"""Count the layers an image will have, from the Dockerfile model (pure).

The image built for a target stage holds its base image's own layers plus one layer per
layer-making instruction of the target's lineage: the target, the stage it is FROM, that
stage's base, and so on down to an image (a `FROM ${ARG}` follows the ARG's default,
`ENV_SOURCE=env-chain`). `COPY --from` stages add no layers of their own: the COPY is the one
layer. The slices are the lineage's COPYs of slice files; an environment composed from written
slices (the default, on both paths) has one layer per slice where the env-chain stage has its
COPY and RUN pairs. Which instructions make a layer depends on the builder:

- docker (BuildKit, the local engine): COPY, RUN (and ADD, which the model never writes) and
  WORKDIR, which makes a layer when it creates its directory (the recipe's WORKDIR comes after
  the RUN that makes its directory, `Workdir.exists`, and makes none);
- kaniko (upstream v1.23.2, the pinned executor): the same; a cached RUN that made no files is
  still a layer (an empty one), so every RUN counts but an `uncached_fileless` one (run on
  every build, it writes nothing and so adds no layer; BuildKit's is a layer of `etc/`);
- kaniko-fork (osscontainertools/kaniko): also an empty layer for every ARG, ENV and LABEL,
  for a WORKDIR whose directory exists and for a RUN that writes nothing (the same 30-byte
  blob every time).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from gpurl_tasks.config import Config
from gpurl_tasks.dockerfile.model import (
    Arg,
    ArgImage,
    Copy,
    Dockerfile,
    DockerfileError,
    Env,
    Instruction,
    Label,
    Run,
    Stage,
    Workdir,
)
from gpurl_tasks.dockerfile.recipe import ENV_CHAIN
from gpurl_tasks.plan.layerlimit import LayerCount
from gpurl_tasks.plan.model import Slice

__all__ = ["LAYER_MAKERS", "Builder", "builder_of", "composes", "count_layers", "lineage",
           "makes_layer"]

Builder = Literal["docker", "kaniko", "kaniko-fork"]
LAYER_MAKERS: Mapping[Builder, tuple[type, ...]] = {
    "docker": (Copy, Run, Workdir),
    "kaniko": (Copy, Run, Workdir),
    "kaniko-fork": (Copy, Run, Workdir, Arg, Env, Label),
}
_FORK = "osscontainertools/kaniko"  # the maintained fork's image name (config.py)


def builder_of(config: Config) -> Builder:
    """The builder a profile's image is built by: kaniko on the cluster (the fork when the
    configured executor is its image), the local Docker engine otherwise."""
    if config.backend == "local":
        return "docker"
    return "kaniko-fork" if _FORK in config.cluster.kaniko_executor else "kaniko"


def composes(config: Config) -> bool:
    """The environment is composed from the slice layers gpurl writes (one layer a slice):
    always on the local path, and on the cluster unless `cluster.env-source = "chain"`."""
    return config.backend == "local" or config.cluster.env_source == "composed"


def makes_layer(instruction: Instruction, builder: Builder) -> bool:
    if isinstance(instruction, Run) and instruction.uncached_fileless and builder == "kaniko":
        return False  # upstream runs it every time, and a RUN it runs that writes nothing is no layer
    if isinstance(instruction, Workdir) and instruction.exists and builder == "kaniko":
        return False  # the fork's is an empty layer, as for every file-less instruction, and
        # Docker's a layer of the directory's entry all the same (seen: 32 bytes)
    return isinstance(instruction, LAYER_MAKERS[builder])


def lineage(dockerfile: Dockerfile, target: str,
            args: Mapping[str, str] | None = None) -> tuple[Stage, ...]:
    """The target stage and every stage it builds on, target first, down to the first stage
    FROM an image. A `FROM ${NAME}` takes `args[NAME]`, else the global ARG's default."""
    values = {a.name: a.default or "" for a in dockerfile.global_args} | dict(args or {})
    names = {s.name for s in dockerfile.stages}
    chain: list[Stage] = []
    stage = dockerfile.stage(target)
    while True:
        chain.append(stage)
        base = stage.base
        name = values.get(base.name, "") if isinstance(base, ArgImage) else base
        if not isinstance(name, str) or name not in names:
            return tuple(chain)
        if any(s.name == name for s in chain):
            raise DockerfileError(f"stage {stage.name!r} builds on {name!r}, a cycle",
                                  hint="make each stage build on an earlier one "
                                       "(FROM names an earlier stage)")
        stage = dockerfile.stage(name)


def count_layers(dockerfile: Dockerfile, *, base_layers: int, builder: Builder,
                 target: str = "rl", chain_stage: str = ENV_CHAIN, composed: bool = False,
                 variant: str = "", args: Mapping[str, str] | None = None) -> LayerCount:
    """The layers of the image built for `target`: `base_layers` plus the lineage's
    layer-making instructions, with `chain_stage`'s replaced by one layer per slice when the
    environment is `composed`."""
    if base_layers < 0:
        raise DockerfileError(f"a base image has at least 0 layers, not {base_layers}",
                              hint="set build.base-image-layers to the base image's layer count (0 or more)")
    stages = lineage(dockerfile, target, args)
    instructions = sum(makes_layer(i, builder) for s in stages for i in s.instructions)
    slices = sum(isinstance(i, Copy) and i.from_stage is None
                 and i.dest.startswith(f"{Slice.IMAGE_DIR}/")
                 for s in stages for i in s.instructions)
    chain = sum(makes_layer(i, builder) for s in stages if s.name == chain_stage
                for i in s.instructions)
    per_slice = chain // slices if slices else 0
    if composed and slices:
        instructions, per_slice = instructions - chain + slices, 1
    return LayerCount(variant=variant, base=base_layers, instructions=instructions,
                      slices=slices, per_slice=per_slice, builder=builder)
