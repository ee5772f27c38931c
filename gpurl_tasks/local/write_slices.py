"""`invoke write-slices`: a variant's slice layers written on this machine, for its own
platform or another one, and checked.

A slice is files. For a variant of another machine (an aarch64 variant on this x86_64
builder), uv stages the target's wheels with `--python-platform` in an x86_64 container
holding the same Python at the same venv path: the env-base of the profile's sibling variant
of this machine (same target.python and build.venv), built from its own Dockerfile. The
slice's bytes depend only on its wheels, the Python version and the venv path (the layout and
the shebangs), uv and the writer's zlib, so no emulation is needed. Each written layer is then
checked (writer/check.py): every ELF object of the target's machine, every entry point naming
the image's Python. A slice uv would build from an sdist is left to a native build: it must
compile on the target.
"""

from __future__ import annotations

import dataclasses
import platform as host
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpurl_tasks.config import Config, Variant
from gpurl_tasks.dockerfile.generate import check_committed, fitted_plan
from gpurl_tasks.dockerfile.recipe import ENV_BASE_STAGE, wheel_source_arg
from gpurl_tasks.errors import BuildError, ExitCode
from gpurl_tasks.files import read_text
from gpurl_tasks.local import builder
from gpurl_tasks.local.actions import log_dir
from gpurl_tasks.local.compose_env import stage_builds, staging_platform
from gpurl_tasks.local.engine import find_buildkit_client
from gpurl_tasks.local.setup import cache_dir, index_dir
from gpurl_tasks.local.stage import StageBuild, probe_base, stage_command, stage_slice
from gpurl_tasks.plan.model import Layer, Plan
from gpurl_tasks.steps import DryRun
from gpurl_tasks.writer.blob import Blob, LayerError, compressor
from gpurl_tasks.writer.check import LayerCheck, check_layer
from gpurl_tasks.writer.records import Probe, slice_key, written_history

__all__ = ["SlicesWritten", "WrittenSlice", "native_only", "staging_variant", "write_slices"]

Say = Callable[[str], None]


def staging_variant(config: Config, machine: str) -> Variant:
    """The variant whose env-base stages `config`'s slices on `machine`: its own when it is
    of this machine, else a sibling of this machine with the same target.python and
    build.venv (its slices' files and shebangs are the ones the target's own env-base
    gives). BuildError when the profile has none."""
    if config.target.arch == machine:
        return config.variant
    for variant in config.variants:
        if (variant.target.arch == machine and variant.target.python == config.target.python
                and variant.build.venv == config.build.venv):
            return variant
    raise BuildError(
        f"variant {config.variant.name!r} ({config.target.arch}) cannot be staged on this "
        f"{machine} machine: profile {config.profile!r} has no {machine} variant with python "
        f"{config.target.python} and venv {config.build.venv}",
        hint=f"add such a variant, or write the slices on an {config.target.arch} builder")


def native_only(plan: Plan) -> tuple[str, ...]:
    """The slices a build of another machine cannot stage: uv would build a package of them
    (an sdist, a git source), or they build against the slices below (plan/buildenv.py)."""
    built = set(plan.native_slices) | {b.name for b in plan.builds}
    return tuple(layer.name for layer in plan.layers if layer.name in built)


@dataclasses.dataclass(frozen=True, kw_only=True)
class WrittenSlice:
    """One slice layer written and checked."""

    name: str
    path: Path
    blob: Blob
    key: str  # its cache tag, the one a native build of the variant computes
    check: LayerCheck
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"slice": self.name, "path": str(self.path), **self.blob.to_json(),
                "cache_tag": self.key, **self.check.to_json(),
                "seconds": round(self.seconds, 1)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class SlicesWritten:
    """`invoke write-slices`' outcome."""

    profile: str
    variant: str
    arch: str
    staged_on: str  # the variant whose env-base staged them
    platform: str | None  # uv's --python-platform, None for a native staging
    slices: tuple[WrittenSlice, ...]
    native: tuple[str, ...]  # left to a build on the target's machine
    seconds: float
    exit_code: int = ExitCode.OK

    def human(self) -> str:
        how = (f"--python-platform {self.platform} in {self.staged_on}'s env-base"
               if self.platform else f"natively in {self.staged_on}'s env-base")
        lines = [f"{self.profile}/{self.variant} ({self.arch}): {len(self.slices)} slice(s) "
                 f"written {how}, checked, in {self.seconds:.1f}s"]
        lines += [f"  {s.name}  {s.blob.digest}  {s.blob.size:>11,} bytes  {s.check.files} "
                  f"files, {s.check.elf} {self.arch} ELF, {s.check.scripts} scripts  {s.path}"
                  for s in self.slices]
        if self.native:
            lines.append(f"left to a native {self.arch} build (uv must build a package of "
                         f"them): {', '.join(self.native)}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"profile": self.profile, "variant": self.variant, "arch": self.arch,
                "staged_on": self.staged_on, "python_platform": self.platform,
                "seconds": round(self.seconds, 1), "native_slices": list(self.native),
                "slices": [s.to_json() for s in self.slices]}


def _env_base_build(client: str, config: Config, staging: Variant, iidfile: Path) -> list[str]:
    """The build of the staging variant's env-base stage, from its own Dockerfile."""
    own = config.for_variant(staging)
    return builder.build_command(
        client, dockerfile=own.build.dockerfile, context=config.root,
        build_args=wheel_source_arg(own), target=ENV_BASE_STAGE,
        iidfile=iidfile)


def _default_output(config: Config) -> Path:
    return cache_dir(config.root) / "slices" / config.profile / config.variant.name


def _left_out(config: Config, plan: Plan, machine: str) -> tuple[str, ...]:
    """The slices not written here: the native ones of another machine's image (none of an
    image of this machine)."""
    return native_only(plan) if config.target.arch != machine else ()


def _wanted(plan: Plan, left_out: tuple[str, ...]) -> list[Layer]:
    return [layer for layer in plan.layers if layer.name not in left_out]


def _dry_run(config: Config, plan: Plan, staging: Variant, out: Path, machine: str) -> DryRun:
    """The real run's commands: the same slices, each staged as the real run stages it."""
    cross = staging_platform(config, machine)  # what the staging image's probe will say
    builds = stage_builds(config, plan)
    commands = [_env_base_build("docker", config, staging, Path("<env-base.iid>"))]
    commands += [stage_command("docker", image="<env-base id>",
                               slice_file=layer.slice.path(config.variant),
                               dest=layer.slice.image_path, out_dir=out,
                               output=f"{layer.name}.tar.gz", venv=config.build.venv,
                               level=config.layers.slice_gzip_level, platform=cross,
                               build=builds.get(layer.name), hashed=layer.hashed)
                 for layer in _wanted(plan, _left_out(config, plan, machine))]
    return DryRun(tuple(tuple(argv) for argv in commands))


def write_slices(config: Config, *, output: Path | None, dry_run: bool, say: Say
                 ) -> SlicesWritten | DryRun:
    """Write each of the variant's slice layers into `output` and check them; a slice whose
    layer fails a check fails the task, naming the file."""
    check_committed(config)
    start = time.monotonic()
    machine = host.machine()
    plan = fitted_plan(config)
    staging = staging_variant(config, machine)
    out = (output or _default_output(config)).resolve()
    if dry_run:
        return _dry_run(config, plan, staging, out, machine)
    native = _left_out(config, plan, machine)
    if native:
        say(f"left to a native {config.target.arch} build: {', '.join(native)}")
    wanted = _wanted(plan, native)
    out.mkdir(parents=True, exist_ok=True)
    client = find_buildkit_client()[0]
    logs = log_dir(config) / f"write-slices-{config.profile}-{config.variant.name}"
    venv, level = config.build.venv, config.layers.slice_gzip_level
    builds = stage_builds(config, plan)
    written = []
    # the index serves env-base's uv and the slices' wheels
    with builder.serving_index(config.build.index_url, index_dir(cache_dir(config.root)),
                               on_wait=say), \
            tempfile.TemporaryDirectory(prefix="gpurl-write-slices-") as tmp:
        iidfile = Path(tmp) / "env-base.iid"
        say(f"building {staging.name}'s env-base (the staging image, {machine})")
        logs.mkdir(parents=True, exist_ok=True)
        builder.run_build(_env_base_build(client, config, staging, iidfile), None,
                          logs / "env-base.log")
        base_id = iidfile.read_text().strip()
        probe = probe_base(client, base_id, venv)
        if probe.machine != machine:
            raise BuildError(f"the staging image {base_id[:19]} is {probe.machine}, not this "
                             f"{machine} machine's",
                             hint="stage on a machine of the staging image's architecture, "
                                  "or set the variant's target.arch")
        cross = staging_platform(config, probe.machine)
        for layer in wanted:
            written.append(_write_one(config, layer, client=client, image=base_id, out=out,
                                      probe=probe, platform=cross, level=level,
                                      build=builds.get(layer.name)))
            w = written[-1]
            say(f"  {w.name}  {w.blob.digest}  {w.blob.size:,} bytes  ({w.check.elf} ELF, "
                f"{w.check.scripts} scripts)  {w.seconds:.1f}s")
    return SlicesWritten(profile=config.profile, variant=config.variant.name,
                         arch=config.target.arch, staged_on=staging.name, platform=cross,
                         slices=tuple(written), native=native,
                         seconds=time.monotonic() - start)


def _write_one(config: Config, layer: Layer, *, client: str, image: str, out: Path,
               probe: Probe, platform: str | None, level: int, build: StageBuild | None
               ) -> WrittenSlice:
    """Stage and write one slice, then check its layer and compute its cache tag."""
    path = layer.slice.path(config.variant)
    venv = config.build.venv
    done = stage_slice(client, image=image, slice_file=path, dest=layer.slice.image_path,
                       out_dir=out, name=layer.name, venv=venv, level=level, platform=platform,
                       build=build, hashed=layer.hashed)
    try:
        checked = check_layer(done.path, arch=config.target.arch, venv=venv)
    except LayerError as exc:
        raise BuildError(f"slice {layer.name} failed its check: {exc}",
                         hint=f"the layer is kept at {done.path}") from None
    text = read_text(path, what="slice file", error=BuildError).encode()
    key = slice_key(label=layer.label, slice_text=text,
                    created_by=written_history(layer.slice.image_path, venv, hashed=layer.hashed),
                    python=probe.python, venv=venv, uv=probe.uv,
                    compressor=compressor(level, probe.zlib), arch=config.target.arch)
    return WrittenSlice(name=layer.name, path=done.path, blob=done.blob, key=key,
                        check=checked, seconds=done.seconds)
