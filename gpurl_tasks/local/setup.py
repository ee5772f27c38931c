"""`setup-local`: everything the local path needs, each step idempotent and timed.

Steps, in order: a Docker engine answers; a client that runs BuildKit builds; a registry on
127.0.0.1 at the port of `registry.host`; the base image `build.base-image`; the wheels the
loopback index (`build.index-url`) serves: uv, pip and every pin of the workspace lock (each
from the index the lock names), for each linux machine the lock holds wheels for. Each step
returns what it found or did; `dry_run` reports what it would do and changes nothing.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpurl_tasks import values
from gpurl_tasks.config import Arch, Config
from gpurl_tasks.errors import BuildError, ConfigError, ExitCode
from gpurl_tasks.files import read_text
from gpurl_tasks.local import base_image, download, engine, pyindex, registry_server
from gpurl_tasks.plan.lock import Lock, load_lock
from gpurl_tasks.steps import StepRecord, timed

__all__ = [
    "IMAGE_PIP",
    "IMAGE_SETUPTOOLS",
    "SEED_REQUIREMENTS",
    "LocalSetup",
    "build_requirements",
    "cache_dir",
    "image_tool_pins",
    "index_dir",
    "package_index",
    "setup_local",
]

IMAGE_PIP = "pip==25.1.1"  # served so a Dockerfile may upgrade the base's pip 23.0.1 offline
# Build requirement of a setuptools-built C extension (>= 70.1 builds wheels without `wheel`).
IMAGE_SETUPTOOLS = "setuptools==80.9.0"
# `uv venv --seed` on Python < 3.12 installs pip, setuptools and wheel from the index.
SEED_REQUIREMENTS = ("pip", "setuptools", "wheel")


@dataclass(frozen=True, kw_only=True)
class LocalSetup:
    """The result of `setup_local`: the steps and the BuildKit client later builds use."""

    steps: tuple[StepRecord, ...]
    client: str
    cache: Path

    exit_code = ExitCode.OK

    def human(self) -> str:
        return "\n".join(f"  {s.name:<16} {s.status:<10} {s.seconds:6.1f}s  {s.detail}"
                         for s in self.steps)

    def to_json(self) -> dict[str, object]:
        return {"client": self.client, "cache": str(self.cache),
                "steps": [s.to_json() for s in self.steps]}


def cache_dir(root: Path, env: Mapping[str, str] | None = None) -> Path:
    """Where the local path keeps state: $GPURL_CACHE_DIR, else <repo>/.cache/gpurl."""
    env = os.environ if env is None else env
    explicit = env.get("GPURL_CACHE_DIR")
    return Path(explicit).resolve() if explicit else root / ".cache" / "gpurl"


def index_dir(cache: Path) -> Path:
    """Where the wheels served by the loopback package index live."""
    return cache / "pyindex"


def _timed(name: str, action: Callable[[], tuple[str, str]],
           say: Callable[[str], None] | None = None) -> StepRecord:
    with timed(name, say) as record:
        record.status, detail = action()
        record.detail = f"{record.status}: {detail}" if say else detail  # the end line shows both
    record.detail = detail
    return record


def _engine(cache: Path, dry_run: bool) -> tuple[str, str]:
    for client in ("docker", "/usr/bin/docker"):
        version = engine.engine_answers(client)
        if version:
            return "found", f"Docker engine {version} answers"
    if not engine.can_self_install():
        raise BuildError("no Docker engine answers",
                         hint="install Docker Engine and start it (https://docs.docker.com/engine/"
                              "install/), then run setup-local again")
    missing = not Path("/usr/sbin/dockerd").exists() and shutil.which("dockerd") is None
    log = cache / "dockerd.log"
    if dry_run:
        verb = "would apt-get install docker.io and start" if missing else "would start"
        return "would", f"{verb} dockerd (log {log})"
    if missing:
        engine.apt_install("docker.io")
    version = engine.start_dockerd(log)
    return ("installed" if missing else "started"), f"dockerd {version} (log {log})"


def _client(found: list[str], dry_run: bool) -> tuple[str, str]:
    if dry_run and not engine.engine_answers("docker") and not engine.engine_answers(
            "/usr/bin/docker"):
        found.append("/usr/bin/docker")
        return "would", "would probe docker clients for BuildKit once the engine runs"
    client, rejected = engine.find_buildkit_client()
    found.append(client)
    skipped = f" (skipped {'; '.join(rejected)})" if rejected else ""
    return "found", f"{client} runs BuildKit builds{skipped}"


def _registry(config: Config, cache: Path, dry_run: bool) -> tuple[str, str]:
    port = registry_server.loopback_port(config.registry.host)
    api = registry_server.probe_registry(port)
    if api:
        return "found", f"registry ({api}) answers on 127.0.0.1:{port}"
    paths = registry_server.RegistryPaths(cache, port)
    installed = engine.ensure_program("docker-registry", "docker-registry", dry_run=dry_run)
    done = f"{installed}; " if installed else ""
    if dry_run:
        return "would", (f"{done}would start docker-registry on 127.0.0.1:{port} "
                         f"(storage {paths.storage})")
    pid = registry_server.start_registry(paths, port)
    return "started", (f"{done}docker-registry pid {pid} on 127.0.0.1:{port} "
                       f"(storage {paths.storage})")


def _base(config: Config, client: str, cache: Path, dry_run: bool) -> tuple[str, str]:
    name = config.build.base_image
    found = base_image.image_id(client, name) if engine.engine_answers(client) else None
    if found:
        return "found", f"{name} is present ({found[:19]})"
    mirror = base_image.debian_mirror()
    if dry_run:
        return "would", (f"would pull {name}, else debootstrap bookworm from {mirror} "
                         f"with {','.join(base_image.BASE_PACKAGES)} and docker import it")
    reason = base_image.try_pull(client, name)
    if reason is None:
        return "pulled", f"pulled {name}"
    if not engine.can_self_install():
        raise BuildError(f"cannot pull {name}: {reason}",
                         hint="pull or build the base image yourself, or set build.base-image")
    engine.ensure_program("debootstrap", "debootstrap", dry_run=False)
    image = base_image.debootstrap_import(client, name, mirror=mirror, workdir=cache)
    return "built", (f"pull failed ({reason}); built {name} ({image[:19]}) with debootstrap "
                     f"from {mirror}")


def image_tool_pins() -> tuple[str, ...]:
    """What the image needs besides the lock: uv (the version gpurl runs), pip, setuptools."""
    return (f"uv=={importlib.metadata.version('uv')}", IMAGE_PIP, IMAGE_SETUPTOOLS)


def package_index(config: Config, cache: Path, *, dry_run: bool = False) -> tuple[str, str]:
    """setup-local's package-index step alone (status, detail): the wheels and build
    requirements `build.index-url` must serve, downloaded into the cache's index directory."""
    if not config.build.index_url:
        return "found", "build.index-url is empty: builds install from the public index"
    pyindex.port_of(config.build.index_url)  # validate before downloading anything
    directory = index_dir(cache)
    pins = list(image_tool_pins())
    lock = load_lock(config.lock) if config.lock.is_file() else None
    pins += download.pins_from_lock(lock) if lock else []
    specs = build_requirements(config)
    missing = download.missing_pins(pins, directory)
    loose = download.unsatisfied(specs, directory)
    # a profile with variants of several machines (x86_64 and aarch64): each one's wheels too,
    # for that variant's own target; only the machines the profile builds images for
    targets = {v.target.arch: v.target for v in reversed(config.variants)}

    def other_machines() -> dict[Arch, list[str]]:
        found = download.missing_platform_pins(lock, directory) if lock else {}
        return {m: p for m, p in found.items() if m in targets}

    platforms = other_machines()
    wanted = f"{len(pins)} pins and {len(specs)} build requirements"
    if not missing and not loose and not platforms:
        _check_lock_files(lock, directory)
        return "found", f"{wanted} present in {directory}"
    if dry_run:
        more = {m: [p for p in ps if m != config.target.arch or p not in missing]
                for m, ps in platforms.items()}  # the target's own are counted in `missing`
        other = "".join(f", {len(p)} pins' {m} wheels" for m, p in more.items() if p)
        return "would", (f"would download {len(missing)} of {len(pins)} pins and "
                         f"{len(loose)} of {len(specs)} build requirements{other} into {directory}")
    target = download.DownloadTarget.for_target(python=config.target.python,
                                               glibc=config.target.glibc, arch=config.target.arch)
    indexes = download.pin_indexes(lock, filling=config.build.index_url) if lock else {}
    download.download_pins(missing, directory, target=target, indexes=indexes)
    download.download(loose, directory, target=target, exact=False, with_deps=True)
    for machine, machine_pins in other_machines().items():
        own = targets[machine]
        download.download_pins(machine_pins, directory, indexes=indexes,
                               target=download.DownloadTarget.for_target(
                                   python=own.python, glibc=own.glibc, arch=own.arch))
    still = download.missing_pins(pins, directory) + download.unsatisfied(specs, directory)
    still += [f"{pin} ({machine})" for machine, machine_pins in other_machines().items()
              for pin in machine_pins]
    if still:
        raise BuildError(f"pip download left {len(still)} requirements missing, e.g. {still[0]}",
                         hint="check target.python / target.glibc against the lock")
    _check_lock_files(lock, directory)
    return "downloaded", (f"{len(missing)}/{len(pins)} pins and {len(loose)}/{len(specs)} build "
                          f"requirements into {directory}")


def build_requirements(config: Config) -> list[str]:
    """Things a build fetches from the index outside the lock: the workspace's build backend,
    the wheel-builder stage's requirements (`build.builder-requirements`), the post-installs
    (`build.post-install`), plus uv's venv seeds."""
    specs = list(SEED_REQUIREMENTS)
    pyproject = config.workspace / "pyproject.toml"
    if pyproject.is_file():
        specs += download.build_requires(read_text(pyproject, what="pyproject.toml",
                                                  error=ConfigError))
    specs += list(getattr(config.build, "builder_requirements", ()))
    # the post-installs an index can serve (a git URL is fetched by the build itself)
    specs += [e.requirement for e in config.build.post_installs if " @ " not in e.requirement]
    return sorted(set(specs))


def _check_lock_files(lock: Lock | None, directory: Path) -> None:
    unmatched = download.unmatched_lock_files(lock, directory) if lock else []
    if unmatched:
        raise BuildError(
            f"{len(unmatched)} lock pins have none of their recorded files in {directory}, "
            f"e.g. {unmatched[0]}",
            hint="the lock was resolved for another platform than target.*; align them",
        )


def setup_local(config: Config, *, cache: Path | None = None, dry_run: bool = False,
                say: Callable[[str], None] | None = None) -> LocalSetup:
    """Run (or with `dry_run`, describe) every setup step; raise BuildError on the first failure.
    With `say`, each step says its start, that it is alive, and its end (indented)."""
    registry_server.loopback_port(config.registry.host)  # bad config fails before any side effect
    if config.build.index_url:
        pyindex.port_of(config.build.index_url)
    cache = cache or cache_dir(config.root)
    if not dry_run:
        cache.mkdir(parents=True, exist_ok=True)
    client: list[str] = []
    out = (lambda line: say("  " + line)) if say else None
    steps = [
        _timed("engine", lambda: _engine(cache, dry_run), out),
        _timed("buildkit client", lambda: _client(client, dry_run), out),
        _timed("registry", lambda: _registry(config, cache, dry_run), out),
    ]
    steps.append(_timed("base image", lambda: _base(config, client[0], cache, dry_run), out))
    steps.append(_timed("package index", lambda: package_index(config, cache, dry_run=dry_run), out))
    return LocalSetup(steps=tuple(steps), client=client[0], cache=cache)


@dataclass(frozen=True, kw_only=True)
class IndexFilled:
    """`invoke fill-index`' outcome: what the index directory now holds."""

    files: tuple[Path, ...]
    directory: Path
    exit_code: int = ExitCode.OK

    def human(self) -> str:
        return f"{len(self.files)} files in {self.directory}"

    def to_json(self) -> dict[str, object]:
        return {"directory": str(self.directory), "files": [p.name for p in self.files]}


def fill_index(config: Config, pins: str, *, deps: bool, say: Callable[[str], None]) -> IndexFilled:
    """Download `pins` (comma-separated exact pins) into the loopback index, for the target of
    every variant of the profile (an x86_64 and an aarch64 variant: both machines' wheels)."""
    where = index_dir(cache_dir(config.root))
    targets = list(dict.fromkeys(download.DownloadTarget.for_target(
        python=v.target.python, glibc=v.target.glibc, arch=v.target.arch) for v in config.variants))
    wanted = list(values.comma_list(pins))
    if not wanted:
        raise ConfigError("--pins names no package", hint="e.g. --pins 'rich==13.9.4,attrs==25.3.0'")
    files: list[Path] = []
    with timed(f"fill-index ({len(wanted)} pins, {len(targets)} platform(s))", say):
        for target in targets:
            files += [f for f in download.download(wanted, where, target=target, with_deps=deps)
                      if f not in files]
    return IndexFilled(files=tuple(files), directory=where)


def serve_index(config: Config, directory: str, *, say: Callable[[str], None]) -> None:
    """Serve the loopback index at build.index-url until SIGINT or SIGTERM, which end it as
    every task ends on them (130, 143: the task's handler): the server closes on the way out."""
    port = pyindex.port_of(config.build.index_url)
    where = Path(directory) if directory else index_dir(cache_dir(config.root))
    # Ctrl-C also when started in the background by a shell, which ignores SIGINT there
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with pyindex.serve(where, port=port) as server:
        say(f"serving {where} at {server.url} (Ctrl-C to stop)")
        threading.Event().wait()
