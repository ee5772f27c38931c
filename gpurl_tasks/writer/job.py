"""The cluster job's composition (the layer tool's `compose-env`), run in env-base's own
filesystem by the composing kaniko build: each slice the cache lacks is installed with uv
into a scratch tree there (writer/staging.py's words, as the local path's staging container
runs them) and written by writer/blob.py, and the prebuilt compiled wheels, when the job
fetched them, as one more layer (writer/compiled.py); writer/orchestration.py does the rest
through crane (writer/crane.py). Its log is the job's: one line per slice, then the
environment's.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from gpurl_tasks.writer.blob import LayerError, compressor, write_layer
from gpurl_tasks.writer.compiled import (
    COMPILED_SLOT,
    compiled_build_args,
    compiled_history,
    lay_out_manifest,
    wheels_install_command,
)
from gpurl_tasks.writer.crane import Crane
from gpurl_tasks.writer.orchestration import (
    ComposeError,
    Outcome,
    SliceFailures,
    Slot,
    StagedSlice,
    compose_env,
    read_base,
)
from gpurl_tasks.writer.probe import probe
from gpurl_tasks.writer.records import IndexLine, Probe, read_index, slice_key, slice_keys
from gpurl_tasks.writer.retry import RetryRules
from gpurl_tasks.writer.staging import build_env_command, build_env_path, install_command

__all__ = ["CompiledWheels", "JobInputs", "compiled_wheels_slot", "compose_in_job", "outcome_line",
           "run_compose_env", "stager", "write_compiled_layer"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class CompiledWheels:
    """The prebuilt compiled wheels `start admit` fetched and checked against their MANIFEST
    (each wheel's sha256, the ABI key): the files the layer installs."""

    wheelhouse: Path  # holds MANIFEST and each wheel
    wheels: tuple[str, ...]  # file names, as the profile's config names them


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobInputs:
    """What the job script hands the composition (its compose-env.vars, and the config's
    venv, compression level and retry bounds)."""

    cache_repo: str
    env_base: str  # CACHE_REPO@sha256:...
    work: Path  # crane is $WORK/crane; the slices are staged under $WORK/slices
    context: Path
    slice_index: Path
    venv: str
    level: int
    rules: RetryRules
    compiled: CompiledWheels | None = None  # None: the Dockerfile installs them (or none)


def outcome_line(outcome: Outcome) -> str:
    """The job's log line for one slice."""
    if outcome.state == "cached":
        return f"    {outcome.name}: cached ({outcome.tag})"
    if outcome.state == "lost":
        return (f"    {outcome.name}: its record {outcome.tag} names blob {outcome.blob.digest}, "
                "which the registry no longer holds: written again")
    return f"    {outcome.name}: written {json.dumps(outcome.blob.to_json())}"


def _tail(log: Path, lines: int) -> str:
    """The log's last lines, each followed by a space (as `tail | tr '\\n' ' '` shows them)."""
    said = log.read_text(errors="replace").splitlines()[-lines:]
    return "".join(f"{line} " for line in said)


def _run(argv: list[str], log: Path, env: dict[str, str] | None = None) -> bool:
    with log.open("a") as out:
        return subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                              check=False).returncode == 0


def _written(tree: Path, output: Path, what: str, *, prefix: str, level: int, start: float,
             log: Path) -> StagedSlice:
    """The staged tree written as one layer blob at `output` (placed under `prefix`), its
    staging directory (the tree's parent) removed."""
    try:
        blob = write_layer(tree, output, prefix=prefix, level=level)
    except LayerError as exc:
        raise ComposeError(f"writing {what} failed: {exc}") from None
    shutil.rmtree(tree.parent)
    return StagedSlice(path=output, blob=blob, seconds=time.monotonic() - start,
                       log=log.read_text(errors="replace"))


def stager(inputs: JobInputs, lines: dict[str, IndexLine], slices: Path
            ) -> Callable[[Slot], StagedSlice]:
    """Stage one slice: a slice whose index line ends in `lower [uv flags]` (the lock's build
    settings) is staged on the slices below it, their files installed into a scratch build
    prefix put on PYTHONPATH; the install runs --require-hashes where its history entry says
    so (a git source, an index that serves no hash, is staged without)."""
    order = list(lines)

    def stage(slot: Slot) -> StagedSlice:
        start = time.monotonic()
        line = lines[slot.name]
        scratch = slices / slot.name
        log = slices / f"{slot.name}.log"
        log.write_text("")
        lower = line.build.split()[:1] == ["lower"]
        build_args = line.build.split()[1:] if lower else []
        below = [lines[n].file for n in order[:order.index(slot.name)]] if lower else []
        env = None
        if below:
            build = scratch / "build"
            if not all(_run(build_env_command(prefix=str(build), venv=inputs.venv,
                                              slice_file=str(inputs.context / f)), log)
                       for f in below):
                raise ComposeError(f"installing the slices below slice {slot.name} failed: "
                                   f"{_tail(log, 5)}")
            site = sorted(glob.glob(build_env_path(str(build))))
            env = {**os.environ, "PYTHONPATH": " ".join(site) or build_env_path(str(build))}
        tree = scratch / "tree"
        if not _run(install_command(prefix=str(tree), venv=inputs.venv,
                                    slice_file=str(inputs.context / line.file),
                                    build_args=build_args,
                                    hashed=" --require-hashes " in line.created_by), log, env):
            raise ComposeError(f"installing slice {slot.name} ({line.file}) failed: "
                               f"{_tail(log, 5)}")
        return _written(tree, slices / f"{slot.name}.tar.gz", f"slice {slot.name}",
                        prefix=inputs.venv.removeprefix("/"), level=inputs.level,
                        start=start, log=log)

    return stage


def compiled_wheels_slot(wheelhouse: Path, wheels: Sequence[str], *, venv: str, level: int,
                         found: Probe) -> Slot:
    """The compiled layer's slot, on either path: its key is a slice's, over the MANIFEST's
    bytes (each wheel's sha256 and the ABI key) and the install naming each wheel."""
    created_by = compiled_history(wheels, venv)
    try:
        manifest = (wheelhouse / "MANIFEST").read_bytes()
    except OSError as exc:
        raise ComposeError(f"the compiled wheels' MANIFEST cannot be read: {exc}") from None
    tag = slice_key(label=COMPILED_SLOT, slice_text=manifest, created_by=created_by,
                    python=found.python, venv=venv, uv=found.uv,
                    compressor=compressor(level, found.zlib), arch=found.machine)
    return Slot(name=COMPILED_SLOT, tag=tag, created_by=created_by)


def write_compiled_layer(wheelhouse: Path, wheels: Sequence[str], *, venv: str, work: Path,
                         name: str, level: int) -> StagedSlice:
    """The compiled layer, on either path (the job; the local path's staging container, through
    the layer tool): the wheels installed into the venv's place in a tree laid out as the
    image's root, their MANIFEST beside, written as one layer `work/<name>.tar.gz`."""
    start = time.monotonic()
    log = work / f"{name}.log"
    log.write_text("")
    tree = work / name / "tree"
    venv_tree = tree / venv.strip("/")
    paths = [str(wheelhouse / wheel) for wheel in wheels]
    if not _run(wheels_install_command(prefix=str(venv_tree), venv=venv, wheels=paths), log):
        raise ComposeError(f"installing the compiled wheels failed: {_tail(log, 5)}")
    (venv_tree / ".lock").unlink(missing_ok=True)  # uv's lock of the prefix
    lay_out_manifest(wheelhouse / "MANIFEST", tree)
    return _written(tree, work / f"{name}.tar.gz", "the compiled layer", prefix="",
                    level=level, start=start, log=log)


def compose_in_job(inputs: JobInputs, say: Callable[[str], None]) -> str:
    """Compose the environment as the job does -> its reference (`CACHE_REPO@digest`)."""
    slices = inputs.work / "slices"
    shutil.rmtree(slices, ignore_errors=True)
    slices.mkdir(parents=True)
    crane = Crane(binary=inputs.work / "crane", repository=inputs.cache_repo, scratch=slices,
                  rules=inputs.rules)
    base = read_base(crane, inputs.env_base.rpartition("@")[2])
    index = read_index(inputs.slice_index.read_text(encoding="utf-8"), str(inputs.slice_index))
    lines = {line.name: line for line in index}
    found = probe(inputs.venv)
    tags = dict(slice_keys(inputs.slice_index, inputs.context, venv=inputs.venv,
                           level=inputs.level, found=found))
    wanted = [Slot(name=line.name, tag=tags[line.name], created_by=line.created_by)
              for line in index]
    stage_slice = stager(inputs, lines, slices)
    stages: dict[str, Callable[[Slot], StagedSlice]] = {}
    if inputs.compiled is not None:
        prebuilt = inputs.compiled
        wanted.append(compiled_wheels_slot(prebuilt.wheelhouse, prebuilt.wheels,
                                           venv=inputs.venv, level=inputs.level, found=found))
        stages[COMPILED_SLOT] = lambda slot: write_compiled_layer(
            prebuilt.wheelhouse, prebuilt.wheels, venv=inputs.venv, work=slices, name=slot.name,
            level=inputs.level)
    composed = compose_env(crane, base=base, wanted=wanted,
                           stage=lambda slot: stages.get(slot.name, stage_slice)(slot),
                           report=lambda outcome: say(outcome_line(outcome)))
    shutil.rmtree(slices, ignore_errors=True)
    (inputs.work / "env-image").write_text(composed.reference + "\n")
    (inputs.work / "env-args").write_text("".join(
        f"{arg}\n" for arg in compiled_build_args(composed.reference,
                                                  compiled=inputs.compiled is not None)))
    outcomes = [s for s in composed.slices if s.name != COMPILED_SLOT]
    written = [s for s in outcomes if s.state == "written"]
    compiled = next((s for s in composed.slices if s.name == COMPILED_SLOT), None)
    say(f"==> environment {composed.reference} ({len(written)} slice(s) written, "
        f"{sum(s.rewritten for s in written)} of them as their record's blob was gone; "
        f"{len(outcomes) - len(written)} cached"
        + (f"; the compiled wheels' layer {compiled.state}" if compiled else "") + ")")
    return composed.reference


def run_compose_env(inputs: JobInputs) -> int:
    """`compose-env`: the log on stdout, one `compose-env: error:` line and status 1 when the
    environment cannot be composed (each failed slice's reason on its own line first)."""
    def say(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    try:
        compose_in_job(inputs, say)
    except SliceFailures as failed:
        for reason in failed.failures.values():
            say(str(reason))
        sys.stderr.write(f"compose-env: error: {failed}\n")
        return 1
    except (LayerError, OSError) as exc:
        hint = getattr(exc, "hint", "")
        sys.stderr.write(f"compose-env: error: {exc}{f' ({hint})' if hint else ''}\n")
        return 1
    return 0
