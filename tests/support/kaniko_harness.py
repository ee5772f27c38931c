"""A harness that runs the generated kaniko script for real under bash.

What cannot run here is replaced by stand-ins: `crane` (served as a checksum-pinned
tarball, like the real release asset) and the kaniko executor (delivered by the
stand-in's `crane export`, as the real overlay does). Both record their argv. Wheels,
MANIFEST and the crane tarball come from a real HTTP server on 127.0.0.1.

The stand-ins find their log files through STANDIN_* variables, defaulting to this rig's
own paths (baked in), so they also work inside an iris job whose environment the test
does not set. `executor_tail` appends shell lines to the stand-in executor (sleep, fail, ...).

The node the job runs on is this machine, unless `Rig.on_node(arch)` puts a stand-in `uname`
first on PATH that reports another machine (an aarch64 script's platform check passes there,
as on a GB200 node; this machine has no aarch64 emulation to run one for real).

The script is rendered for the default profile, or for `profile` (and `variant`) with config
`overrides` (another profile configured for the cluster); `wheels` serves real wheel files instead of
stand-in bytes named after the script's own list.

It renders the composed script, as every cluster profile runs it, given `ComposeParts`
(`compose_parts`): the real parts of the composed path that can run here. Then
- the stand-in executor's `--target env-base` build pushes a small real base image (one layer,
  a config) to the cache repository, on a real registry on 127.0.0.1, with real crane, and
  writes its digest file as kaniko does;
- its composing build (`compose-env.Dockerfile`: `FROM env-base`, `RUN ["/bin/bash",
  ".../compose-env.sh"]`) runs that RUN on this machine, not in env-base's filesystem: the
  job's own `compose-env` (the staged zipapp) stages each slice with real uv against a venv
  made here (`build.venv` points at it), writes it, and pushes the records and the composed
  image with real crane;
- the stand-in crane hands every call that names that registry to real crane (the registry
  is real: only ghcr.io, which cannot be reached here, is answered by the stand-in).
The profile's own slices name packages (torch, ...) that cannot be installed offline: the
rig's slice index names two wheels made here, the second staged on the first. `chain=True`
renders `cluster.env-source = "chain"` instead (only a test about the chain path asks for it).
tests/test_kaniko_e2e.py runs the composed script with the real executor.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpurl_tasks.cluster.kaniko import (
    ROOT_ENV,
    SLICE_INDEX,
    composes,
    job_files,
    prebuilt_wheel_names,
    render_script,
)
from gpurl_tasks.config import Config, environment_variable, load_config
from gpurl_tasks.dockerfile.wheels import ABI_KEY_PREFIX, abi_key, pins_from_args
from gpurl_tasks.writer.blob import write_layer
from gpurl_tasks.writer.ocispec import canonical_json
from gpurl_tasks.writer.records import IndexLine, write_layout, written_history
from tests.conftest import REPO_ROOT
from tests.support.local_parts import named_wheel, need, pure_wheel, python312, real_crane
from tests.support.rangeserver import serve_files
from tests.support.registry_server import running_registry

# Another profile configured as a cluster profile: the iris backend, a registry user the
# script's auth needs, and where its prebuilt wheels are published.
AS_CLUSTER: dict[str, Any] = {"backend": "iris", "registry.user": "alice",
                              "build.wheel-base-url": "https://wheels.example/prebuilt"}


def _logged(name: str, first: str = "") -> str:
    """A stand-in's opening: strict mode, `first`, and its name and argv appended to the log."""
    return ("#!/usr/bin/env bash\nset -eu\n" + first + "log=\"${STANDIN_LOG:-@LOG@}\"\n"
            f"printf '{name}' >>\"$log\"\nprintf ' %q' \"$@\" >>\"$log\"\n"
            "printf '\\n' >>\"$log\"\n")


# The stand-in executor: records argv, whether the auth file existed and what it held.
EXECUTOR = _logged("executor") + r"""if [ -f "$DOCKER_CONFIG/config.json" ]; then
  cp "$DOCKER_CONFIG/config.json" "${STANDIN_AUTH_SEEN:-@AUTH_SEEN@}"
fi
printf 'token-in-env=%s\n' "${DOCKER_TOKEN:+yes}" >>"$log"
printf 'iris-job-env=%s\n' "${IRIS_JOB_ENV:+yes}" >>"$log"
@TAIL@
target="" dockerfile="" digest_file="" destination=""
while [ $# -gt 0 ]; do
  case "$1" in
    --target) target="$2" ;;
    --dockerfile) dockerfile="$2" ;;
    --digest-file) digest_file="$2" ;;
    --destination) destination="${destination:-$2}" ;;
  esac
  shift
done
if [ "$target" = env-base ]; then
  # env-base: the rig's small real base image, pushed by real crane (it prints REF@DIGEST)
  pushed="$("${STANDIN_REAL_CRANE:-@REAL_CRANE@}" push "${STANDIN_ENV_BASE:-@ENV_BASE@}" \
    "$destination")"
  printf '%s' "${pushed##*@}" >"$digest_file"
elif [ "${dockerfile##*/}" = compose-env.Dockerfile ]; then
  # the composing build: its one RUN, run here
  run="$(sed -n 's|^RUN \["/bin/bash", "\(.*\)"\]$|\1|p' "$dockerfile")"
  [ -n "$run" ] || { echo "executor: no RUN [\"/bin/bash\", ...] in $dockerfile" >&2; exit 66; }
  /bin/bash "$run"
elif [ -n "$digest_file" ]; then
  printf '%s' @DIGEST@ >"$digest_file"
fi
"""

# The stand-in crane: `crane export IMAGE -` writes a tar of kaniko's tree to stdout,
# including the image's own /kaniko/.docker/config.json that the overlay would clobber;
# `crane digest REF` answers as the registry would (absent tag: MANIFEST_UNKNOWN); the
# script's retry wrapper runs crane with -v, which the stand-in ignores.
# Every call naming the rig's registry (a real one) goes to real crane, unlogged.
_TO_REAL_CRANE = r"""registry="${STANDIN_REGISTRY:-@REGISTRY@}"
if [ -n "$registry" ]; then
  for arg in "$@"; do
    case "$arg" in "$registry"/*) exec "${STANDIN_REAL_CRANE:-@REAL_CRANE@}" "$@" ;; esac
  done
fi
"""
CRANE = _logged("crane", _TO_REAL_CRANE) + r"""if [ "$1" = -v ]; then shift; fi
if [ "$1" = digest ]; then
  # the registry lookup: STANDIN_EXISTING_DIGEST says the tag exists, STANDIN_CRANE_ERROR fails
  if [ -n "${STANDIN_CRANE_ERROR:-}" ]; then echo "$STANDIN_CRANE_ERROR" >&2; exit 1; fi
  if [ -n "${STANDIN_EXISTING_DIGEST:-}" ]; then echo "$STANDIN_EXISTING_DIGEST"; exit 0; fi
  echo "Error: GET https://registry.invalid/v2/x/manifests/t: MANIFEST_UNKNOWN: manifest unknown" >&2
  exit 1
fi
case "$1" in
  # after the push: the pushed manifest and config, the attestation artifacts, the referrers
  # tag (unknown: as a registry with the referrers API, where crane writes none)
  manifest)
    case "$2" in
      *:sha256-*) echo "Error: GET $2: MANIFEST_UNKNOWN: manifest unknown" >&2; exit 1 ;;
      *) printf '%s' '@MANIFEST@' ;;
    esac ;;
  config) printf '%s' '{"config":{"Labels":{}}}' ;;
  push) [ -f "$2/index.json" ] || exit 65 ;;
  export)
    if [ "${*: -1}" = - ]; then cat "${STANDIN_KANIKO_TAR:-@KANIKO_TAR@}"
    else cp "${STANDIN_KANIKO_TAR:-@KANIKO_TAR@}" "${*: -1}"; fi ;;
  *) exit 64 ;;
esac
"""
# What the stand-in executor "pushed": the manifest the stand-in crane serves, by its digest.
STANDIN_MANIFEST = ('{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",'
                    '"config":{"mediaType":"application/vnd.oci.image.config.v1+json",'
                    '"digest":"sha256:' + "0" * 64 + '","size":2},"layers":[]}')
STANDIN_DIGEST = "sha256:" + hashlib.sha256(STANDIN_MANIFEST.encode()).hexdigest()


def _tar(entries: dict[str, tuple[bytes, int]], gz: bool) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w") as tar:
        for name, (data, mode) in sorted(entries.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@dataclasses.dataclass(frozen=True)
class ComposeParts:
    """The real parts a composed run uses here, made once per module (`compose_parts`)."""

    registry: str  # host:port of a registry on 127.0.0.1 (no auth: the job's is for ghcr.io)
    crane: Path  # real crane
    venv: Path  # env-base's venv, made with uv: the slices are installed against its python
    wheels: tuple[Path, ...]  # one per slice
    env_base: Path  # an OCI layout of env-base, which the stand-in executor pushes

    def venv_for(self, python: str) -> Path:
        """env-base's venv on the profile's Python (`target.python`): the composing job
        installs the profile's compiled wheels into it, whose tags name that Python. The
        3.12 one is made on first use (skipped, saying why, where there is no 3.12)."""
        if python == f"{sys.version_info[0]}.{sys.version_info[1]}":
            return self.venv
        venv = self.venv.with_name(f"venv-{python}")
        if not venv.exists():
            need(python == "3.12", f"no venv of Python {python} is made here")
            subprocess.run(["uv", "venv", "-q", "--python", python312(), str(venv)], check=True)
        return venv


def _env_base_layout(directory: Path) -> Path:
    """env-base as an OCI layout: one layer holding a file under the venv, and a config."""
    tree = directory / "env-base-tree"
    (tree / "bin").mkdir(parents=True)
    (tree / "bin" / "env-base").write_text("env-base\n")
    blob = write_layer(tree, directory / "env-base.tar.gz", prefix="opt/venv", level=1)
    config = canonical_json({"architecture": "amd64", "os": "linux",
                             "config": {"Env": ["PATH=/opt/venv/bin:/usr/bin"]},
                             "rootfs": {"type": "layers", "diff_ids": [blob.diff_id]},
                             "history": [{"created_by": "RUN uv venv /opt/venv"}]})
    manifest = canonical_json({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": "sha256:" + hashlib.sha256(config).hexdigest(), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": blob.digest, "size": blob.size}]})
    layout = directory / "env-base"
    write_layout(layout, manifest, config, moved=(blob, directory / "env-base.tar.gz"))
    return layout


@contextmanager
def compose_parts(directory: Path) -> Iterator[ComposeParts]:
    """A registry on 127.0.0.1, real crane, a venv and two wheels (skipped, saying why, or
    failed under CI, where the registry or crane cannot be had)."""
    need(shutil.which("uv"), "uv is needed to stage the slices")
    crane = real_crane(directory / "crane")
    venv = directory / "venv"
    subprocess.run(["uv", "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    wheels = (directory / "wheels")
    wheels.mkdir()
    made = tuple(pure_wheel(wheels, name) for name in ("alpha", "beta"))
    env_base = _env_base_layout(directory)
    with running_registry(directory / "registry") as server:
        yield ComposeParts(registry=server.host, crane=crane, venv=venv, wheels=made,
                           env_base=env_base)


def _slices(bundle: Path, parts: ComposeParts, venv: Path) -> None:
    """The rig's slice index in the bundle, over the slice files of `parts`' wheels: each
    slice one wheel by its path, the second staged on the first (`lower`)."""
    lines = []
    for n, wheel in enumerate(parts.wheels):
        name = f"{n + 1:02d}-{wheel.name.split('-')[0]}"
        file = f".gpurl/rig-slices/{name}.txt"
        (bundle / file).parent.mkdir(parents=True, exist_ok=True)
        (bundle / file).write_text(f"{wheel}\n")
        lines.append(IndexLine(name=name, label=name.split("-", 1)[1], file=file,
                               created_by=written_history(f"/tmp/gpurl-layers/{name}.txt",
                                                          str(venv), hashed=False),
                               build="lower" if n else "").to_line() + "\n")
    (bundle / SLICE_INDEX).write_text("".join(lines))


@dataclasses.dataclass
class Rig:
    """One prepared run: the temp root, served files, the rendered script and its inputs."""

    tmp: Path
    root: Path
    served: Path
    base_url: str
    config: Config
    script: Path
    log: Path
    auth_seen: Path
    wheels: tuple[str, ...]
    pins: dict[str, str]  # the config keys that point the script at the stand-ins
    parts: ComposeParts | None  # None: the chain script (or a hand-written Dockerfile's)

    @property
    def pin_env(self) -> dict[str, str]:
        """`pins` as the GPURL_* variables a user's shell would set."""
        return {environment_variable(key): value for key, value in self.pins.items()}

    def run(self, env: dict[str, str], *, trace: bool = False) -> subprocess.CompletedProcess[str]:
        base = {"PATH": os.environ["PATH"], "HOME": str(self.tmp), ROOT_ENV: str(self.root),
                "STANDIN_LOG": str(self.log), "STANDIN_AUTH_SEEN": str(self.auth_seen),
                "STANDIN_KANIKO_TAR": str(self.tmp / "kaniko.tar"), "TMPDIR": str(self.tmp)}
        argv = ["bash", "-x", str(self.script)] if trace else ["bash", str(self.script)]
        return subprocess.run(argv, env={**base, **env}, capture_output=True, text=True,
                              timeout=120, check=False)

    def on_node(self, arch: str) -> dict[str, str]:
        """The environment of a run on a node whose `uname -m` is `arch`: a stand-in `uname`
        first on PATH (it answers `-m` only: the script asks nothing else)."""
        bin_dir = self.tmp / f"node-{arch}"
        bin_dir.mkdir(exist_ok=True)
        uname = bin_dir / "uname"
        uname.write_text(f'#!/bin/sh\n[ "$1" = -m ] && echo {arch} && exit 0\nexit 64\n')
        uname.chmod(0o755)
        return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}

    def calls(self, program: str) -> list[str]:
        if not self.log.exists():
            return []
        return [line for line in self.log.read_text().splitlines() if line.startswith(program)]


@contextmanager
def rig(tmp: Path, parts: ComposeParts | None, *, chain: bool = False, own_cache: bool = False,
        crane_sha256: str | None = None, executor_tail: str = "",
        profile: str | None = None, variant: str | None = None,
        overrides: Mapping[str, Any] | None = None,
        wheels: Sequence[Path] | None = None, project: Path = REPO_ROOT) -> Iterator[Rig]:
    """Serve wheels + MANIFEST + a crane tarball and render the script against them
    (`project`: the repository whose config renders it, gpurl's own by default). A script
    that composes needs `parts`; `chain` renders the chain script instead. The composed
    script's cache repository is shared by every rig of `parts`, as every build shares the
    cluster's (a later run finds the slices cached); `own_cache` gives it an empty one."""
    served = tmp / "served"
    served.mkdir()
    root = tmp / "root"
    (root / "app" / "docker" / "wheelhouse").mkdir(parents=True)
    baked = {"@LOG@": str(tmp / "standin.log"), "@AUTH_SEEN@": str(tmp / "auth-seen.json"),
             "@KANIKO_TAR@": str(tmp / "kaniko.tar"), "@TAIL@": executor_tail,
             "@MANIFEST@": STANDIN_MANIFEST, "@DIGEST@": STANDIN_DIGEST,
             "@REGISTRY@": parts.registry if parts else "",
             "@REAL_CRANE@": str(parts.crane) if parts else "",
             "@ENV_BASE@": str(parts.env_base) if parts else ""}

    def bake(template: str) -> bytes:
        for key, value in baked.items():
            template = template.replace(key, value)
        return template.encode()

    crane_tgz = _tar({"crane": (bake(CRANE), 0o755)}, gz=True)
    (served / "crane.tgz").write_bytes(crane_tgz)
    (tmp / "kaniko.tar").write_bytes(_tar({
        "kaniko/executor": (bake(EXECUTOR), 0o755),
        "kaniko/.docker/config.json": (b"{}\n", 0o644),
    }, gz=False))
    with serve_files(served) as url:
        pins = {"cluster.crane-url": f"{url}/crane.tgz",
                "cluster.crane-sha256": crane_sha256 or hashlib.sha256(crane_tgz).hexdigest(),
                "cluster.kaniko-executor": "registry.invalid/kaniko/executor@sha256:" + "ab" * 32,
                "build.wheel-base-url": url + "/wheels"}
        composed: dict[str, Any] = {"cluster.env-source": "chain"} if chain else {}
        if parts and not chain:  # the module's cache repository, or an empty one of its own
            repository = hashlib.sha256(bytes(tmp)).hexdigest()[:12] if own_cache else "shared"
            python = load_config(project, profile=profile, variant=variant, env={},
                                 overrides={**(overrides or {}), **pins}).target.python
            composed = {"build.venv": str(parts.venv_for(python)),
                        "cluster.cache-repo": f"{parts.registry}/rig/{repository}/cache"}
        config = load_config(project, profile=profile, variant=variant, env={},
                             overrides={**composed, **(overrides or {}), **pins})
        if composes(config) and parts is None:
            raise TypeError("the composed script needs ComposeParts (or chain=True)")
        names = prebuilt_wheel_names(config)
        (served / "wheels").mkdir()
        for name in names if wheels is None else ():  # the composing job installs them
            named_wheel(served / "wheels", name)
        for path in wheels or ():
            shutil.copy(path, served / "wheels" / path.name)
        lines = [f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.name}"
                 for path in sorted((served / "wheels").iterdir())]
        # what a wheel-builder writes: its ABI key line first (wheels.abi_key of the pins)
        key = abi_key(pins_from_args({}, config.build, config.target))
        (served / "wheels" / "MANIFEST").write_text(
            f"{ABI_KEY_PREFIX}{key}\n" + "".join(f"{line}\n" for line in lines))
        # the job's own files, as `invoke build` stages them in the bundle
        bundle = root / "app"
        for name, data in job_files(config).items():
            (bundle / name).parent.mkdir(parents=True, exist_ok=True)
            (bundle / name).write_bytes(data)
        if composes(config):
            assert parts is not None
            _slices(bundle, parts, Path(config.build.venv))
        script = tmp / "build.sh"
        script.write_text(render_script(config))
        yield Rig(tmp=tmp, root=root, served=served, base_url=url, config=config, script=script,
                  log=tmp / "standin.log", auth_seen=tmp / "auth-seen.json", wheels=names,
                  pins=pins, parts=parts if composes(config) else None)
