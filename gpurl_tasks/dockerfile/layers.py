"""Count the layers an image will have, from the Dockerfile model (pure).

The image built for a target stage holds its base image's own layers plus one layer per
layer-making instruction of the target's lineage: the target, the stage it is FROM, that
stage's base, and so on down to an image (a `FROM ${ARG}` follows the ARG's default, so the
cluster's `ENV_SOURCE=env-chain` counts every slice). `COPY --from` stages add no layers of
their own: the COPY is the one layer. Which instructions make a layer depends on the builder:

- docker (BuildKit, the local engine): COPY and RUN (and ADD, which the model never writes);
- kaniko (upstream v1.23.2, the pinned executor): also WORKDIR; a cached RUN that made no files
  is still a layer (an empty one), so every RUN counts;
- kaniko-fork (osscontainertools/kaniko): also an empty layer for every ARG, ENV and LABEL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
from gpurl_tasks.layerlimit import LayerCount

__all__ = ["LAYER_MAKERS", "Builder", "builder_of", "count_layers", "lineage", "makes_layer"]

Builder = Literal["docker", "kaniko", "kaniko-fork"]
LAYER_MAKERS: Mapping[Builder, tuple[type, ...]] = {
    "docker": (Copy, Run),
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


def makes_layer(instruction: Instruction, builder: Builder) -> bool:
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
            raise DockerfileError(f"stage {stage.name!r} builds on {name!r}, a cycle")
        stage = dockerfile.stage(name)


def count_layers(dockerfile: Dockerfile, *, base_layers: int, builder: Builder,
                 target: str = "rl", slice_stages: Sequence[str] = (), variant: str = "",
                 args: Mapping[str, str] | None = None) -> LayerCount:
    """The layers of the image built for `target`: `base_layers` plus the lineage's
    layer-making instructions. `slice_stages`: the stages that each install one slice alone;
    the lineage's COPYs of their slice files count as slices, and the first one's layers are
    what one slice costs."""
    if base_layers < 0:
        raise DockerfileError(f"a base image has at least 0 layers, not {base_layers}")
    stages = lineage(dockerfile, target, args)
    instructions = sum(makes_layer(i, builder) for s in stages for i in s.instructions)
    alone = [dockerfile.stage(name) for name in slice_stages]
    files = {i.dest for s in alone for i in s.instructions if isinstance(i, Copy)}
    slices = sum(isinstance(i, Copy) and i.from_stage is None and i.dest in files
                 for s in stages for i in s.instructions)
    per_slice = sum(makes_layer(i, builder) for i in alone[0].instructions) if alone else 0
    return LayerCount(variant=variant, base=base_layers, instructions=instructions,
                      slices=slices, per_slice=per_slice, builder=builder)
