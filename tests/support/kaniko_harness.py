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
stand-in bytes named after the script's own list. It renders the chain script
(`cluster.env-source = "chain"`) unless told otherwise: the stand-in executor builds no
env-base for the composed script to write slices on (tests/test_kaniko_e2e.py runs that one
with the real executor).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpurl_tasks.cluster.kaniko import (
    ROOT_ENV,
    job_files,
    prebuilt_wheel_names,
    render_script,
)
from gpurl_tasks.config import Config, environment_variable, load_config
from gpurl_tasks.dockerfile.wheels import ABI_KEY_PREFIX, abi_key, pins_from_args
from tests.conftest import REPO_ROOT
from tests.support.rangeserver import serve_files

# Another profile configured as a cluster profile: the iris backend, a registry user the
# script's auth needs, and where its prebuilt wheels are published.
AS_CLUSTER: dict[str, Any] = {"backend": "iris", "registry.user": "alice",
                              "build.wheel-base-url": "https://wheels.example/prebuilt"}


def _logged(name: str) -> str:
    """A stand-in's opening: strict mode, and its name and argv appended to the log."""
    return ("#!/usr/bin/env bash\nset -eu\nlog=\"${STANDIN_LOG:-@LOG@}\"\n"
            f"printf '{name}' >>\"$log\"\nprintf ' %q' \"$@\" >>\"$log\"\n"
            "printf '\\n' >>\"$log\"\n")


# The stand-in executor: records argv, whether the auth file existed and what it held.
EXECUTOR = _logged("executor") + r"""if [ -f "$DOCKER_CONFIG/config.json" ]; then
  cp "$DOCKER_CONFIG/config.json" "${STANDIN_AUTH_SEEN:-@AUTH_SEEN@}"
fi
printf 'token-in-env=%s\n' "${DOCKER_TOKEN:+yes}" >>"$log"
printf 'iris-job-env=%s\n' "${IRIS_JOB_ENV:+yes}" >>"$log"
@TAIL@
while [ $# -gt 0 ]; do
  if [ "$1" = --digest-file ]; then printf '%s' @DIGEST@ >"$2"; fi
  shift
done
"""

# The stand-in crane: `crane export IMAGE -` writes a tar of kaniko's tree to stdout,
# including the image's own /kaniko/.docker/config.json that the overlay would clobber;
# `crane digest REF` answers as the registry would (absent tag: MANIFEST_UNKNOWN); the
# script's retry wrapper runs crane with -v, which the stand-in ignores.
CRANE = _logged("crane") + r"""if [ "$1" = -v ]; then shift; fi
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
def rig(tmp: Path, *, crane_sha256: str | None = None, executor_tail: str = "",
        profile: str | None = None, variant: str | None = None,
        overrides: Mapping[str, Any] | None = None,
        wheels: Sequence[Path] | None = None, project: Path = REPO_ROOT) -> Iterator[Rig]:
    """Serve wheels + MANIFEST + a crane tarball and render the script against them
    (`project`: the repository whose config renders it, gpurl's own by default)."""
    served = tmp / "served"
    served.mkdir()
    root = tmp / "root"
    (root / "app" / "docker" / "wheelhouse").mkdir(parents=True)
    baked = {"@LOG@": str(tmp / "standin.log"), "@AUTH_SEEN@": str(tmp / "auth-seen.json"),
             "@KANIKO_TAR@": str(tmp / "kaniko.tar"), "@TAIL@": executor_tail,
             "@MANIFEST@": STANDIN_MANIFEST, "@DIGEST@": STANDIN_DIGEST}

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
        config = load_config(project, profile=profile, variant=variant, env={},
                             overrides={"cluster.env-source": "chain", **(overrides or {}),
                                        **pins})
        names = prebuilt_wheel_names(config)
        (served / "wheels").mkdir()
        for i, name in enumerate(names if wheels is None else ()):
            (served / "wheels" / name).write_bytes(f"wheel {i} {name}".encode() * 100)
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
        script = tmp / "build.sh"
        script.write_text(render_script(config))
        yield Rig(tmp=tmp, root=root, served=served, base_url=url, config=config, script=script,
                  log=tmp / "standin.log", auth_seen=tmp / "auth-seen.json", wheels=names,
                  pins=pins)
