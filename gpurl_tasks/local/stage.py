"""One slice's layer, written in a container of env-base: the staging install, then gpurl's
layer writer with env-base's own python3 (so the zlib that compresses is env-base's, the
same on every builder).

In the container (`--network host`, for the loopback package index env-base names):
  uv pip install --no-deps --require-hashes --no-installer-metadata \
      --prefix /stage --python <build.venv>/bin/python -r /tmp/gpurl-layers/<slice file>
lays the slice's files out as they sit in the venv (`lib/python3.X/site-packages/`, `bin/`
with `#!<build.venv>/bin/python` entry points, no INSTALLER, REQUESTED or direct_url.json);
then `python3 -m gpurl_tasks.writer.tool write /stage ... --prefix <build.venv>` (gpurl_tasks
mounted read-only; it leaves uv's `.lock` out) writes the blob into the mounted output
directory. A slice whose sdists build against the slices below (the lock's build settings,
plan/buildenv.py) first installs those slices' files into a scratch prefix on PYTHONPATH.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import time
from collections.abc import Sequence
from pathlib import Path

from gpurl_tasks import proc
from gpurl_tasks.errors import BuildError
from gpurl_tasks.writer.blob import Blob
from gpurl_tasks.writer.compiled import COMPILED_SLOT, WHEELS_TMP
from gpurl_tasks.writer.orchestration import StagedSlice
from gpurl_tasks.writer.records import Probe
from gpurl_tasks.writer.staging import build_env_script, install_command, no_isolation_args

__all__ = ["StageBuild", "StagedSlice", "compiled_command", "probe_base", "stage_command",
           "stage_compiled", "stage_script", "stage_slice"]

PACKAGE = Path(__file__).resolve().parent.parent  # gpurl_tasks, mounted read-only
_MOUNT = "/gpurl"  # gpurl_tasks is at /gpurl/gpurl_tasks in the container
_STAGE = "/stage"
_OUT = "/gpurl-out"
_BUILD = "/gpurl-build"  # the build environment of a slice staged on the slices below


def probe_base(client: str, image: str, venv: str) -> Probe:
    """Ask env-base what a slice's bytes depend on (one container running the layer tool's
    probe, the cluster job's own)."""
    argv = [*_tool_run(client, image), "python3", "-B", "-m", "gpurl_tasks.writer.tool", "probe",
            "--venv", venv]
    done = proc.run_quiet(argv, check=False, timeout=120)
    try:
        said = json.loads(done.stdout.strip().splitlines()[-1])
        return Probe(python=str(said["python"]), zlib=str(said["zlib"]), uv=str(said["uv"]),
                     machine=str(said["machine"]))
    except (ValueError, KeyError, IndexError):
        raise BuildError(f"env-base ({image[:19]}) did not say what its slices depend on: "
                         f"{proc.tail(done.stderr or done.stdout, 3)}",
                         hint="its output is in the message; "
                              "run the task again to rebuild env-base") from None


def _volume(host: Path, at: str, mode: str = "") -> list[str]:
    """`-v HOST:AT[:ro]`; a host path with a colon or a line break would be read as another
    mount spec by docker, so it is refused in one line."""
    if any(c in str(host) for c in ":\n\r"):
        raise BuildError(f"{str(host)!r} cannot be mounted into a container: docker reads a "
                         "colon or a line break in it as part of the mount spec",
                         hint="use a directory whose path has neither (e.g. --output /tmp/slices)")
    return ["-v", f"{host}:{at}{mode}"]


def _tool_run(client: str, image: str, *mounts: str) -> list[str]:
    """`docker run` of env-base with gpurl_tasks mounted read-only, for the layer tool."""
    return [client, "run", "--rm", "--network", "host",
            *_volume(PACKAGE, f"{_MOUNT}/gpurl_tasks", ":ro"), *mounts, "-w", _MOUNT,
            "-e", "PYTHONDONTWRITEBYTECODE=1", image]


@dataclasses.dataclass(frozen=True, kw_only=True)
class StageBuild:
    """A slice staged on the slices below it (plan/buildenv.py): their files (host path,
    where it is mounted) and the packages built without isolation."""

    lower: tuple[tuple[Path, str], ...]
    no_isolation: tuple[str, ...]


def stage_script(*, venv: str, slice_file: str, stage: str, build: StageBuild | None = None,
                 build_prefix: str = _BUILD, platform: str | None = None,
                 hashed: bool = True) -> str:
    """The shell that stages one slice into `stage`: the install, on the build environment
    of the slices below when `build` says so, for uv's `platform` when it is another
    machine's (pure; the test runs it on the host)."""
    install = install_command(prefix=stage, venv=venv, slice_file=slice_file,
                              build_args=no_isolation_args(build.no_isolation) if build else (),
                              platform=platform, hashed=hashed)
    steps = ["set -eu"]
    if build and build.lower:
        steps.append(build_env_script(prefix=build_prefix, venv=venv,
                                      files=shlex.join(dest for _, dest in build.lower)))
    return " && ".join([*steps, shlex.join(install) + " >&2"])


def stage_command(client: str, *, image: str, slice_file: Path, dest: str, out_dir: Path,
                  output: str, venv: str, level: int, build: StageBuild | None = None,
                  platform: str | None = None, hashed: bool = True) -> list[str]:
    """The `docker run` that stages one slice and writes its layer (pure, for tests);
    `hashed`: the slice's `Layer.hashed`."""
    write = ["python3", "-B", "-m", "gpurl_tasks.writer.tool", "write", _STAGE, f"{_OUT}/{output}",
             "--prefix", venv.strip("/"), "--level", str(level)]
    script = " && ".join([
        stage_script(venv=venv, slice_file=dest, stage=_STAGE, build=build, platform=platform,
                     hashed=hashed),
        shlex.join(write), f"chown {os.getuid()}:{os.getgid()} {_OUT}/{output}"])
    mounts = [w for path, at in (build.lower if build else ())
              for w in _volume(path.resolve(), at, ":ro")]
    return [*_tool_run(client, image, *_volume(slice_file, dest, ":ro"), *mounts,
                       *_volume(out_dir, _OUT)),
            "sh", "-c", script]


def stage_slice(client: str, *, image: str, slice_file: Path, dest: str, out_dir: Path,
                name: str, venv: str, level: int, build: StageBuild | None = None,
                platform: str | None = None, hashed: bool = True) -> StagedSlice:
    """Stage one slice in a container of env-base and write its layer into `out_dir`
    (`platform`: uv's --python-platform, for a slice of another machine)."""
    start = time.monotonic()
    output = f"{name}.tar.gz"
    done = proc.run_quiet(stage_command(client, image=image, slice_file=slice_file.resolve(),
                                        dest=dest, out_dir=out_dir.resolve(), output=output,
                                        venv=venv, level=level, build=build,
                                        platform=platform, hashed=hashed),
                          check=False, timeout=3600)
    if done.returncode != 0:
        raise BuildError(f"staging slice {name} failed: {proc.tail(done.stderr, 6)}",
                         hint="the package index must serve the slice's wheels; an sdist that builds "
                              "against another package needs it named in [tool.uv] "
                              "no-build-isolation-package or extra-build-dependencies")
    return _staged(done, f"slice {name}", out_dir / output, start)


def compiled_command(client: str, *, image: str, wheelhouse: Path, wheels: Sequence[str],
                     out_dir: Path, venv: str, level: int) -> list[str]:
    """The `docker run` that writes the compiled wheels' layer (the layer tool's `compiled`,
    the cluster job's own install) into `out_dir/compiled-wheels.tar.gz` (pure, for tests)."""
    write = ["python3", "-B", "-m", "gpurl_tasks.writer.tool", "compiled", WHEELS_TMP, _OUT,
             *(w for wheel in wheels for w in ("--wheel", wheel)), "--venv", venv,
             "--level", str(level)]
    script = " && ".join([shlex.join(write),
                          f"chown {os.getuid()}:{os.getgid()} {_OUT}/{COMPILED_SLOT}.tar.gz"])
    return [*_tool_run(client, image, *_volume(wheelhouse, WHEELS_TMP, ":ro"),
                       *_volume(out_dir, _OUT)), "sh", "-c", script]


def stage_compiled(client: str, *, image: str, wheelhouse: Path, wheels: Sequence[str],
                   out_dir: Path, venv: str, level: int) -> StagedSlice:
    """Write the compiled wheels' layer in a container of env-base, into `out_dir`."""
    start = time.monotonic()
    done = proc.run_quiet(compiled_command(client, image=image, wheelhouse=wheelhouse.resolve(),
                                           wheels=wheels, out_dir=out_dir.resolve(), venv=venv,
                                           level=level), check=False, timeout=3600)
    if done.returncode != 0:
        raise BuildError(f"writing the compiled wheels' layer failed: "
                         f"{proc.tail(done.stderr, 6)}",
                         hint="the wheels must install into env-base's venv "
                              "(`invoke check-wheels` checks them against the pins)")
    return _staged(done, "the compiled wheels", out_dir / f"{COMPILED_SLOT}.tar.gz", start)


def _staged(done: proc.Completed, what: str, path: Path,
            start: float) -> StagedSlice:
    """The layer the writer wrote at `path`, from the Blob it printed last."""
    try:
        said = json.loads(done.stdout.strip().splitlines()[-1])
        blob = Blob(digest=said["digest"], diff_id=said["diff_id"], size=int(said["size"]))
    except (ValueError, KeyError, IndexError):
        raise BuildError(f"the layer writer for {what} printed no blob: "
                         f"{proc.tail(done.stdout, 3)}",
                         hint="the log says why the writer failed; "
                              "fix it and write the layers again") from None
    return StagedSlice(path=path, blob=blob, seconds=time.monotonic() - start, log=done.stderr)
