"""The local backend: build with BuildKit on this machine's engine, push, return the digest.

Same rules as the cluster path where they apply: the image is tagged with the immutable
`REGISTRY/REPO:PREFIX-GITSHA`, never squashed into a single snapshot, and the floating tag
is pushed only when asked. The build runs with `--network host` so RUN steps reach the
loopback package index (served here for the duration of the build when `build.index-url`
points at 127.0.0.1) and the loopback registry.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from gpurl_tasks import proc
from gpurl_tasks.config import Config
from gpurl_tasks.errors import BuildError, ConfigError
from gpurl_tasks.files import read_text, write_atomic
from gpurl_tasks.imageref import parse_reference
from gpurl_tasks.local import pyindex
from gpurl_tasks.local.build_log import BuildStep, parse_plain_progress, stages_run, vertex_output
from gpurl_tasks.local.composed import ComposedEnv
from gpurl_tasks.local.engine import BUILDKIT_ENV, find_buildkit_client
from gpurl_tasks.local.setup import cache_dir, index_dir
from gpurl_tasks.oci import tags
from gpurl_tasks.oci.connect import registry_client
from gpurl_tasks.release.configured import client_settings, existing_image
from gpurl_tasks.values import SOURCE_ID_PATTERN

__all__ = [
    "EXPORT_STAGE",
    "BuildResult",
    "WheelsResult",
    "build_and_push",
    "build_command",
    "build_wheels",
    "check_build_args",
    "export_dockerfile",
    "final_build",
    "image_reference",
    "push_command",
    "push_image",
    "run_build",
    "serving_index",
]

_SHA_RE = re.compile(rf"^{SOURCE_ID_PATTERN}$")
_PUSH_DIGEST = re.compile(r"digest: (sha256:[0-9a-f]{64})")
_TRUE = {"1", "true", "yes", "on"}
LineSink = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class BuildResult:
    """A pushed image: its immutable tag, the registry's digest, and what the build did."""

    reference: str  # REGISTRY/REPO:PREFIX-GITSHA
    digest: str  # sha256:..., as the registry reports it
    log: str  # the plain-progress build log
    steps: tuple[BuildStep, ...]
    cached_steps: int  # instructions (FROM excluded) whose result came from the build cache
    stages: frozenset[str]  # every stage the build graph touched (ran or came from cache)
    stages_run: frozenset[str]  # stages in which some instruction really executed
    floating: str | None  # the floating reference when it was pushed too
    seconds: float
    build_seconds: float = 0.0  # of `seconds`: the docker build
    push_seconds: float = 0.0  # of `seconds`: the push(es) and the registry cross-check
    pushed: bool = True  # False: the registry already held this exact image under the tag
    log_file: Path | None = None  # the whole build log, when it was written to a file
    environment: ComposedEnv | None = None  # the composed environment it was built FROM

    @property
    def pinned(self) -> str:
        """`REGISTRY/REPO@sha256:...`: what a launcher pins."""
        return f"{parse_reference(self.reference, default_host='').name}@{self.digest}"


@dataclass(frozen=True, kw_only=True)
class WheelsResult:
    """Wheels (and MANIFEST) exported from the wheel-builder stage into the wheelhouse."""

    files: tuple[Path, ...]
    log: str
    steps: tuple[BuildStep, ...]
    seconds: float


def image_reference(config: Config, git_sha: str) -> str:
    """`REGISTRY/REPO:PREFIX-GITSHA`; the git sha must be a real (short or full) hex sha."""
    if not _SHA_RE.match(git_sha):
        raise ConfigError(f"git sha {git_sha!r} is not 7-40 lowercase hex digits "
                          "(optionally -dirty-<12 hex>)", hint="pass `git rev-parse --short HEAD`")
    return config.registry.immutable_reference(git_sha)


def check_build_args(build_args: Mapping[str, str]) -> None:
    """Refuse build args that would defeat the layer plan (a single-snapshot image)."""
    if str(build_args.get("SINGLE_SNAPSHOT", "0")).lower() in _TRUE:
        raise BuildError(
            "SINGLE_SNAPSHOT would collapse the image into one layer that cannot be pulled",
            hint="drop SINGLE_SNAPSHOT; the layer plan keeps every layer under the cap",
        )


def build_command(
    client: str,
    *,
    dockerfile: Path,
    context: Path,
    build_args: Mapping[str, str],
    target: str | None,
    tags: Sequence[str] = (),
    output: str | None = None,
    progress: str = "plain",
    no_cache: bool = False,
    iidfile: Path | None = None,
) -> list[str]:
    """The `docker build` argv (run with DOCKER_BUILDKIT=1); pure, so tests can read it."""
    argv = [client, "build", "--network", "host", "--progress", progress, "-f", str(dockerfile)]
    if no_cache:
        argv.append("--no-cache")
    for key in sorted(build_args):
        argv += ["--build-arg", f"{key}={build_args[key]}"]
    if target:
        argv += ["--target", target]
    for tag in tags:
        argv += ["--tag", tag]
    if output:
        argv += ["--output", output]
    if iidfile:
        argv += ["--iidfile", str(iidfile)]
    return [*argv, str(context)]


def _index_answers(url: str) -> bool:
    try:
        return httpx.get(url.rstrip("/") + "/", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def serving_index(index_url: str, directory: Path,
                  on_wait: Callable[[str], None] | None = None) -> Iterator[str | None]:
    """Serve `directory` at the loopback `index_url` unless an index already answers there,
    shared with every other build on this machine (pyindex.shared).

    Yields the URL being served, or None when `index_url` is empty (the build uses PyPI).
    """
    if not index_url:
        yield None
        return
    with pyindex.shared(directory, port=pyindex.port_of(index_url),
                        answers=lambda: _index_answers(index_url), on_wait=on_wait):
        yield index_url


def run_build(argv: list[str], on_line: LineSink | None, log_file: Path | None,
               ) -> tuple[str, list[BuildStep]]:
    code, log = proc.stream(argv, env={**os.environ, **BUILDKIT_ENV}, on_line=on_line,
                            log_file=log_file)
    steps = parse_plain_progress(log)
    if code != 0:
        failed = [s for s in steps if s.status == "error"]
        if failed:
            step = failed[0]
            where = f" at [{step.stage} {step.index}/{step.total}] {step.instruction[:80]}"
            said = vertex_output(log, step.vertex)
        else:
            where, said = "", proc.tail(log, 3)
        raise BuildError(f"docker build failed{where}:\n{proc.tail(said, 6)}",
                         hint=f"full log: {log_file}" if log_file else "the failed step's output is above")
    return log, steps


def push_command(client: str, reference: str) -> list[str]:
    """The `docker push` argv (pure: a dry run shows it)."""
    return [client, "push", reference]


def final_build(config: Config, *, client: str, git_sha: str, build_args: Mapping[str, str],
                target: str | None = None, progress: str = "plain", push_floating: bool = False,
                context: Path | None = None, dockerfile: Path | None = None,
                no_cache: bool = False) -> tuple[list[str], str, str | None]:
    """The image build `build_and_push` runs: its argv, the immutable reference and the
    floating one (None unless `push_floating`). Pure, so a dry run shows the very argv."""
    check_build_args(build_args)
    reference = image_reference(config, git_sha)
    floating = f"{config.registry.image}:{config.registry.floating_tag}" if push_floating else None
    argv = build_command(client, dockerfile=dockerfile or config.build.dockerfile,
                         context=context or config.root, build_args=build_args, target=target,
                         tags=[reference, *([floating] if floating else [])], progress=progress,
                         no_cache=no_cache)
    return argv, reference, floating


def push_image(client: str, reference: str) -> str:
    done = proc.run_quiet(push_command(client, reference), timeout=3600)
    found = _PUSH_DIGEST.search(done.stdout)
    if not found:
        raise BuildError(f"`docker push {reference}` printed no digest",
                         hint=f"run `docker push {reference}` by hand to see what it prints")
    return found.group(1)


def build_and_push(
    config: Config,
    *,
    git_sha: str,
    build_args: Mapping[str, str] | None = None,
    target: str | None = None,
    progress: str = "plain",
    push_floating: bool = False,
    client: str | None = None,
    context: Path | None = None,
    dockerfile: Path | None = None,
    cache: Path | None = None,
    on_line: LineSink | None = None,
    log_file: Path | None = None,
    no_cache: bool = False,
    force: bool = False,
    say: LineSink | None = None,
) -> BuildResult:
    """Build `dockerfile` (default `build.dockerfile`) with BuildKit, push, return the digest.

    The digest is the one `docker push` reports, cross-checked against the registry's
    `Docker-Content-Digest` for the tag; a mismatch is an error, not a warning. The immutable
    tag is never moved: when the registry already holds it, the built image must be that same
    image (same config digest: nothing is pushed, the registry's digest is kept), or `force`.
    """
    client = client or find_buildkit_client()[0]
    served_from = index_dir(cache or cache_dir(config.root))
    argv, reference, floating = final_build(
        config, client=client, git_sha=git_sha, build_args=dict(build_args or {}),
        target=target, progress=progress, push_floating=push_floating, context=context,
        dockerfile=dockerfile, no_cache=no_cache)
    start = time.monotonic()
    existing = existing_image(config, reference)
    with serving_index(config.build.index_url, served_from, on_wait=say or on_line):
        log, steps = run_build(argv, on_line, log_file)
        built = time.monotonic()  # before any wait for other builds sharing the index
    if existing:
        image_id = proc.run_quiet([client, "image", "inspect", "--format", "{{.Id}}",
                                   reference]).stdout.strip()
        if image_id == existing[1]:
            if floating:
                push_image(client, floating)
            return _result(reference, existing[0], log, steps, floating, start, built,
                           pushed=False, log_file=log_file)
        tags.refuse_to_move(reference, existing[0], force=force,
                            why=f"this build is a different image (config {image_id[:19]}, "
                                f"the registry's {existing[1][:19]})")
    digest = push_image(client, reference)
    ref = parse_reference(reference, default_host=config.registry.host)
    with registry_client(client_settings(config), ref.host) as registry:
        registry_digest = registry.resolve(ref)
    if registry_digest != digest:
        raise BuildError(f"pushed {reference} as {digest} but the registry serves "
                         f"{registry_digest}", hint="another push raced this one; rebuild")
    if floating:
        push_image(client, floating)
    return _result(reference, digest, log, steps, floating, start, built, pushed=True,
                   log_file=log_file)


def _result(reference: str, digest: str, log: str, steps: list[BuildStep], floating: str | None,
            start: float, built: float, *, pushed: bool, log_file: Path | None) -> BuildResult:
    return BuildResult(
        reference=reference, digest=digest, log=log, steps=tuple(steps),
        cached_steps=sum(1 for s in steps if s.status == "cached" and not s.is_from),
        stages=frozenset(s.stage for s in steps), stages_run=frozenset(stages_run(steps)),
        floating=floating, seconds=time.monotonic() - start, pushed=pushed, log_file=log_file,
        build_seconds=built - start, push_seconds=time.monotonic() - built,
    )


EXPORT_STAGE = "gpurl-wheel-export"


def export_dockerfile(text: str, target: str, source: str) -> str:
    """`text` plus a scratch stage holding only `target`'s `source` directory.

    Exporting the wheel-builder stage itself with `--output type=local` copies its whole root
    filesystem out of the engine (430 MB for the demo base; a base with device nodes in /dev
    stalled the 20.10 engine's export outright); the scratch stage exports just the wheels.
    """
    return (f"{text.rstrip()}\n\nFROM scratch AS {EXPORT_STAGE}\n"
            f"COPY --from={target} /{source.strip('/')}/ /\n")


def build_wheels(
    config: Config,
    *,
    build_args: Mapping[str, str] | None = None,
    target: str = "wheel-builder",
    source: str = "wheels",
    client: str | None = None,
    context: Path | None = None,
    dockerfile: Path | None = None,
    cache: Path | None = None,
    on_line: LineSink | None = None,
) -> WheelsResult:
    """Build `target`, export its `/source` dir's wheels + MANIFEST with `--output type=local`
    into `build.wheelhouse` (replacing the wheels there, each file written via temp + rename).
    """
    args = dict(build_args or {})
    check_build_args(args)
    client = client or find_buildkit_client()[0]
    base = cache or cache_dir(config.root)
    base.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    source_file = dockerfile or config.build.dockerfile
    with tempfile.TemporaryDirectory(prefix="gpurl-wheels-", dir=base) as tmp:
        export_file = Path(tmp) / "Dockerfile.export"
        write_atomic(export_file, export_dockerfile(
            read_text(source_file, what="Dockerfile", error=BuildError), target, source))
        argv = build_command(client, dockerfile=export_file, context=context or config.root,
                             build_args=args, target=EXPORT_STAGE,
                             output=f"type=local,dest={tmp}/out")
        log_file = base / "logs" / f"wheels-{target}.log"
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with serving_index(config.build.index_url, index_dir(base), on_wait=on_line):
            log, steps = run_build(argv, on_line, log_file)
        exported = Path(tmp) / "out"
        found = sorted(p for p in exported.iterdir() if p.is_file()
                       and (p.suffix == ".whl" or p.name.startswith("MANIFEST")))
        if not any(p.suffix == ".whl" for p in found):
            raise BuildError(f"target {target!r} left no wheels in /{source.strip('/')}",
                             hint="the wheel-builder stage must write its wheels and MANIFEST "
                                  f"to /{source.strip('/')}")
        wheelhouse = config.build.wheelhouse
        wheelhouse.mkdir(parents=True, exist_ok=True)
        for old in wheelhouse.glob("*.whl"):
            old.unlink()
        copied = []
        for path in found:
            partial = wheelhouse / f".{path.name}.partial"
            shutil.copyfile(path, partial)
            partial.replace(wheelhouse / path.name)
            copied.append(wheelhouse / path.name)
    return WheelsResult(files=tuple(copied), log=log, steps=tuple(steps),
                        seconds=time.monotonic() - start)
