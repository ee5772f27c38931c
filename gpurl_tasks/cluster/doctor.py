"""`invoke doctor`: every prerequisite of the configured build, each checked alone in seconds.

One small function per prerequisite, each returning a `Check` (ok, problem with its fix, or
skipped with why), so `invoke doctor` runs them all and `invoke build` runs the ones it
refuses on (`require`) before it composes the job: one implementation of each check. The
runbook's ops preamble is the list: KUBECONFIG naming the cluster, the cw-capable iris, the
ghcr token and its push scope, the prebuilt wheels, current generated files (and a
hand-written Dockerfile's build args declared, its COPY sources in the context), a free
immutable tag, an executor pin holding the variant's platform and a resolvable crane pin.
Network checks ask with HEAD (or the token endpoint) or read a manifest, and download nothing
large; no check prints a secret.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

from gpurl_tasks import git
from gpurl_tasks.cluster import kaniko
from gpurl_tasks.cluster.iris_release import IRIS_CONTRACT_PINS, find_iris, install_hint, iris_program
from gpurl_tasks.config import Config
from gpurl_tasks.dockerfile import handwritten
from gpurl_tasks.dockerfile.context import ignored_paths
from gpurl_tasks.dockerfile.generate import check_committed, fitted_plan
from gpurl_tasks.dockerfile.wheels import check_abi_key, pins_from_args
from gpurl_tasks.errors import BuildError, ExitCode, GpurlError, Unreachable, unreachable_hint
from gpurl_tasks.files import read_text
from gpurl_tasks.imageref import ImageRef, parse_reference
from gpurl_tasks.oci.connect import open_client
from gpurl_tasks.oci.image import (
    INDEX_TYPES,
    parse_index,
    parse_manifest,
    platform_name,
    same_platform,
)
from gpurl_tasks.oci.registry import ManifestUnknown, RegistryClient
from gpurl_tasks.proc import CommandFailed, ProgramNotFound, run
from gpurl_tasks.rebuild.wheelhouse import read_manifest_keyed, redact_url
from gpurl_tasks.redact import TOKEN_ENVS, Secret, TokenSource, looks_like_docker_hub, redact
from gpurl_tasks.release.configured import cache_repository, client_settings, existing_digest
from gpurl_tasks.values import build_arg_map, parse_size

__all__ = [
    "FAR_ABOVE",
    "MEASURED_ENV_BYTES",
    "MEASURED_PEAK_BYTES",
    "MIN_MEMORY",
    "Check",
    "DoctorReport",
    "crane_url",
    "executor_pin",
    "generated_files",
    "gpu_settings",
    "hand_written",
    "immutable_tag",
    "iris_controller",
    "iris_install",
    "job_memory",
    "kubeconfig",
    "kubeconfig_cluster",
    "kubeconfig_names",
    "memory_need",
    "memory_warning",
    "parse_iris_probe",
    "prebuilt_wheels",
    "push_scope",
    "registry_token",
    "registry_user",
    "require",
    "required_token",
    "run_doctor",
    "snapshots_environment",
]

MIN_MEMORY = "512GB"  # the runbook's, when kaniko snapshots the environment (256GB died)
# The composed job's measured need (benchmarks/kaniko_scale.py, `nox -s bench-kaniko`; the
# "Real kaniko" section of benchmarks/REPORT.md): the heavy profile built cold, warm and after
# a bump on both executors; the highest peak of the job container's memory cgroup (the
# kernel's high-water mark, page cache included: upstream's cold build), and the installed
# bytes of the environment it was measured on.
MEASURED_PEAK_BYTES = 12_798_095_360  # upstream composed cold, 2026-12-04 22:47 (cgroup peak)
MEASURED_ENV_BYTES = 5_747_067_749  # the heavy plan's slices, installed
FAR_ABOVE = 4  # doctor says so when cluster.memory is more than this many times the need
Status = Literal["ok", "problem", "skipped"]
_TIMEOUT = 15.0
_WHY_KUBECONFIG = ("every CoreWeave call needs KUBECONFIG in the same shell; the default "
                   "kubeconfig points at a different cluster and gives misleading "
                   "'0 pods / not found'")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Check:
    """One prerequisite's answer: `detail` says what holds (ok) or what is wrong (problem)."""

    name: str
    status: Status
    detail: str
    fix: str | None = None
    # the error a build raises for this problem (its own type and exit code), when one exists
    cause: GpurlError | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def failed(self) -> bool:
        return self.status == "problem"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail,
                "fix": self.fix}


def _ok(name: str, detail: str) -> Check:
    return Check(name=name, status="ok", detail=detail)


def _skip(name: str, why: str) -> Check:
    return Check(name=name, status="skipped", detail=why)


def _problem(name: str, detail: str, fix: str | None = None,
             cause: GpurlError | None = None) -> Check:
    return Check(name=name, status="problem", detail=detail, fix=fix, cause=cause)


def _from_error(name: str, exc: GpurlError) -> Check:
    return _problem(name, exc.message, exc.hint, exc)


def require(check: Check) -> Check:
    """`check`, or raise its problem as the build's refusal (its original error when it has
    one, else a BuildError with the fix as hint)."""
    if check.failed:
        raise check.cause or BuildError(check.detail, hint=check.fix)
    return check


# --- the cluster: kubeconfig and iris ------------------------------------------------------


def _kubeconfig_paths(env: Mapping[str, str]) -> list[Path]:
    return [Path(p).expanduser() for p in env.get("KUBECONFIG", "").split(":") if p]


def kubeconfig(env: Mapping[str, str]) -> Check:
    """KUBECONFIG is set and every file it names exists."""
    paths = _kubeconfig_paths(env)
    if not paths:
        return _problem("kubeconfig", "KUBECONFIG is not set: " + _WHY_KUBECONFIG,
                        "export KUBECONFIG=~/.kube/<the cluster's kubeconfig>")
    missing = [p for p in paths if not p.is_file()]
    if missing:
        return _problem("kubeconfig", f"KUBECONFIG points at {missing[0]}, which does not "
                        "exist: " + _WHY_KUBECONFIG,
                        "export KUBECONFIG=<the path of the cluster's kubeconfig>")
    return _ok("kubeconfig", f"KUBECONFIG={':'.join(map(str, paths))}")


def kubeconfig_names(text: str) -> frozenset[str]:
    """The context and cluster names a kubeconfig defines (and the clusters its contexts use).

    JSON, or block-style YAML as kubectl writes it, read minimally: under the top-level
    `clusters:` and `contexts:` lists, the `name:` of each entry and a context's `cluster:`."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            doc = json.loads(stripped)
        except ValueError:
            return frozenset()
        found = set()
        for section in ("clusters", "contexts"):
            for entry in doc.get(section) or () if isinstance(doc, dict) else ():
                if isinstance(entry, dict):
                    found.add(str(entry.get("name", "")))
                    inner = entry.get("context")
                    if section == "contexts" and isinstance(inner, dict):
                        found.add(str(inner.get("cluster", "")))
        return frozenset(found - {""})
    found = set()
    section = ""
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line[0].isspace() and not line.startswith("-"):
            section = line.split(":", 1)[0].strip()
            continue
        key, sep, value = line.strip().lstrip("- ").partition(":")
        value = value.strip().strip("'\"")
        if sep and value and section in ("clusters", "contexts") and (
                key == "name" or (section == "contexts" and key == "cluster")):
            found.add(value)
    return frozenset(found)


def kubeconfig_cluster(env: Mapping[str, str], cluster: str) -> Check:
    """The kubeconfig names the configured cluster (a context or cluster called cluster.name)."""
    paths = [p for p in _kubeconfig_paths(env) if p.is_file()]
    if not paths:
        return _skip("kubeconfig-cluster", "no kubeconfig to read (see kubeconfig)")
    names: set[str] = set()
    for path in paths:
        try:
            names |= kubeconfig_names(path.read_text(errors="replace"))
        except OSError as exc:
            return _problem("kubeconfig-cluster", f"cannot read {path}: {exc.strerror}")
    if cluster in names:
        return _ok("kubeconfig-cluster", f"the kubeconfig names cluster {cluster!r}")
    listed = ", ".join(sorted(names)[:5]) or "nothing"
    return _problem("kubeconfig-cluster",
                    f"KUBECONFIG names no context or cluster {cluster!r} (it names {listed}): "
                    "iris would talk to another cluster",
                    f"export KUBECONFIG=<the kubeconfig of {cluster}>, or set cluster.name")


# The snippet the iris program's own interpreter runs: its distributions' versions and
# whether the CLI and the kubernetes client (what iris's CoreWeave platform imports) import.
_PROBE = """\
import importlib, importlib.metadata as m, json, sys
out = {"versions": {}, "imports": {}}
for name in sys.argv[1:]:
    try:
        out["versions"][name] = m.version(name)
    except m.PackageNotFoundError:
        out["versions"][name] = None
for module in ("iris.cli", "kubernetes.client", "kubernetes.dynamic"):
    try:
        importlib.import_module(module)
        out["imports"][module] = ""
    except Exception as exc:
        out["imports"][module] = (type(exc).__name__ + ": " + str(exc))[:200]
print(json.dumps(out))
"""


def _pinned() -> dict[str, str]:
    return dict(pin.split("==", 1) for pin in IRIS_CONTRACT_PINS)


def parse_iris_probe(text: str, program: str) -> Check:
    """The probe's JSON (recorded or live) -> the iris check (pure)."""
    try:
        data = json.loads(text.strip().splitlines()[-1])
        versions, imports = data["versions"], data["imports"]
    except (ValueError, IndexError, KeyError, TypeError):
        return _problem("iris", f"{program}: its interpreter did not report its packages",
                        install_hint("GPURL_IRIS"))
    wrong = [f"{name} {versions.get(name) or 'missing'} (pinned {want})"
             for name, want in _pinned().items() if versions.get(name) != want]
    if wrong:
        return _problem("iris", f"{program} is not the pinned release: {', '.join(wrong)}",
                        install_hint("GPURL_IRIS"))
    broken = {m: why for m, why in imports.items() if why}
    if "iris.cli" in broken:
        return _problem("iris", f"{program} does not import: {broken['iris.cli']}",
                        install_hint("GPURL_IRIS"))
    if broken:
        module, why = next(iter(broken.items()))
        return _problem("iris", f"{program} cannot import its kubernetes client ({module}: "
                        f"{why}), so it cannot drive CoreWeave",
                        "use the cw-capable iris (marin-iris[controller], kubernetes>=31,<36) "
                        "and set GPURL_IRIS to it")
    return _ok("iris", f"{program}: marin-iris {versions['marin-iris']} (pinned), imports "
                       "its kubernetes client")


def _interpreter(program: str) -> str | None:
    """The Python a console-script `iris` runs on, from its `#!` line."""
    try:
        with open(program, "rb") as handle:
            first = handle.readline(4096).decode(errors="replace")
    except OSError:
        return None
    return first[2:].strip().split()[0] if first.startswith("#!") and first[2:].strip() else None


def iris_install(env: Mapping[str, str]) -> Check:
    """The iris found ($GPURL_IRIS, else PATH) is the pinned release and imports its
    kubernetes client: its own interpreter is asked (no cluster needed)."""
    try:
        program = find_iris(iris_program(env), env)
    except ProgramNotFound as exc:
        return _from_error("iris", exc)
    python = _interpreter(program)
    if python is None or "python" not in Path(python).name:
        return _problem("iris", f"{program} is not a Python console script, so its release "
                        "cannot be read", install_hint("GPURL_IRIS"))
    try:
        done = run([python, "-c", _PROBE, *_pinned()], echo=None, timeout=120, env=dict(env))
    except (CommandFailed, ProgramNotFound) as exc:
        return _problem("iris", f"{program}: its interpreter {python} failed: {exc.message}",
                        install_hint("GPURL_IRIS"))
    return parse_iris_probe(done.stdout, program)


def iris_controller(url: str) -> Check:
    """The controller at cluster.controller-url answers HTTP (skipped when it is unset: the
    cluster is then reached by name, through the kubeconfig)."""
    if not url:
        return _skip("iris-controller", "cluster.controller-url is unset: iris reaches the "
                                        "cluster by name")
    try:
        answer = httpx.get(url, timeout=_TIMEOUT)
    except httpx.HTTPError as exc:
        return _problem("iris-controller", f"the iris controller at {redact_url(url)} does not "
                        f"answer ({type(exc).__name__})",
                        "start the controller or its tunnel, or fix cluster.controller-url")
    return _ok("iris-controller", f"the iris controller at {redact_url(url)} answers "
                                  f"(HTTP {answer.status_code})")


def memory_need(env_bytes: int) -> int:
    """The composed job's memory need for an environment of `env_bytes` installed bytes: the
    measured peak in proportion to the environment, never below it. One size was measured, so
    the job's fixed part (the executor, crane, Python) is scaled too: an upper bound."""
    scaled = -(-MEASURED_PEAK_BYTES * max(env_bytes, 0) // MEASURED_ENV_BYTES)
    return max(MEASURED_PEAK_BYTES, scaled)


def memory_warning(memory: str, env_bytes: int) -> str | None:
    """One line when `memory` asks for more than FAR_ABOVE times the composed job's need for
    this environment (a request that large holds most of a node for the build), else None."""
    need = memory_need(env_bytes)
    wanted = parse_size(memory, binary_gb=True)
    if wanted <= FAR_ABOVE * need:
        return None
    return (f"cluster.memory {memory} is {wanted / need:.0f}x the job's measured need "
            f"({need / 2**30:.1f} GiB for {env_bytes / 10**9:.2f} GB of environment: "
            f"{MEASURED_PEAK_BYTES / 2**30:.1f} GiB peak measured on "
            f"{MEASURED_ENV_BYTES / 10**9:.2f} GB, benchmarks/REPORT.md); "
            f"{-(-2 * need // 2**30)}GB would do")


def job_memory(memory: str, *, force: bool = False, snapshots_environment: bool = True,
               env_bytes: int | None = None) -> Check:
    """The build job's memory covers its need: MIN_MEMORY when kaniko snapshots the
    environment itself (env-source chain, or wheels compiled in the job: 256GB died silently
    there), else the composed job's measured peak. Far above the need for `env_bytes` (when
    the plan is known) it passes and says so (`memory_warning`)."""
    try:
        wanted = parse_size(memory, binary_gb=True)
    except ValueError as exc:
        return _problem("memory", f"--memory: {exc}")
    if snapshots_environment and wanted < parse_size(MIN_MEMORY, binary_gb=True) and not force:
        return _problem(
            "memory", f"--memory {memory} is below {MIN_MEMORY}: a 256GB build dies silently "
            "(pod reaped, no error log) at the wheel-packaging / snapshot step",
            f"use --memory {MIN_MEMORY}, or --force if you know this build is smaller")
    if not snapshots_environment and wanted < MEASURED_PEAK_BYTES and not force:
        return _problem(
            "memory", f"--memory {memory} is below the composed job's measured peak "
            f"({MEASURED_PEAK_BYTES / 2**30:.1f} GiB, benchmarks/REPORT.md)",
            f"use --memory {-(-MEASURED_PEAK_BYTES // 2**30)}GB or more, or --force")
    warning = None if env_bytes is None or snapshots_environment \
        else memory_warning(memory, env_bytes)
    return _ok("memory", warning or f"the build job asks for {memory}")


def snapshots_environment(config: Config) -> bool:
    """kaniko itself snapshots a whole environment in this build: the env-chain stage, or
    wheels compiled in the job (the runbook's 512GB is for those)."""
    return (config.cluster.env_source == "chain"
            or config.build.wheel_source == "wheel-builder")


def _environment_bytes(config: Config) -> int | None:
    """The installed bytes of the variant's planned slices (None: no plan; the memory check
    then compares with the measured peak alone)."""
    try:
        return sum(layer.installed_bytes for layer in fitted_plan(config).layers)
    except GpurlError:
        return None


# GPUs on one node, by the GPU iris names, and the platform that node runs: a GPU check
# asking for more than one node holds never starts, and an image of another platform never runs
_NODE_GPUS = {"GB200": (4, "aarch64"), "GH200": (1, "aarch64"), "H100": (8, "x86_64"),
              "H200": (8, "x86_64"), "B200": (8, "x86_64"), "A100": (8, "x86_64")}
_MOST_GPUS = 8


def gpu_settings(config: Config) -> Check:
    """The GPU check's job (`invoke verify-gpu`) can be scheduled: at most one node's GPUs of
    its type, a type of the variant's platform, positive timeouts and CPUs, a memory size."""
    cluster, name = config.cluster, "gpu-job"
    if config.verify.gpu == "off":
        return _skip(name, "verify.gpu = off: no GPU check runs")
    most, arch = _NODE_GPUS.get(cluster.gpu_type.upper(), (_MOST_GPUS, config.target.arch))
    where = cluster.gpu_cluster or cluster.controller_url or cluster.name
    if cluster.gpus > most:
        return _problem(name, f"cluster.gpus = {cluster.gpus}: a {cluster.gpu_type or 'GPU'} "
                              f"node holds at most {most}; the job would never start",
                        f"set cluster.gpus to at most {most} (the GPUs of one node)")
    if arch != config.target.arch:
        return _problem(name, f"cluster.gpu-type {cluster.gpu_type} nodes are {arch}; the "
                              f"variant's image is {config.target.arch}",
                        "set the variant's cluster.gpu-type (and gpu-cluster) to its platform's")
    for key, value in (("gpu-timeout", cluster.gpu_timeout),
                       ("gpu-start-timeout", cluster.gpu_start_timeout),
                       ("gpu-cpu", cluster.gpu_cpu)):
        if value <= 0:
            return _problem(name, f"cluster.{key} = {value} is not positive",
                            f"set cluster.{key} to a positive number")
    try:
        parse_size(cluster.gpu_memory, binary_gb=True)
    except ValueError as exc:
        return _problem(name, f"cluster.gpu-memory: {exc}", "set it like 128GB")
    return _ok(name, f"the GPU check asks {where} for {cluster.gpus} "
                     f"{cluster.gpu_type or 'GPU'}(s) of one node, for {cluster.gpu_timeout}s")


# --- the registry ---------------------------------------------------------------------------


def _token_kind(token: Secret) -> str:
    value = token.reveal()
    if value.startswith(("ghp_", "github_pat_", "gho_", "ghs_")):
        return "a GitHub token"
    return "a Docker Hub token" if looks_like_docker_hub(token) else "a token"


def registry_token(found: TokenSource | None, host: str) -> Check:
    """A registry token is set, of the kind the host takes (ghcr.io refuses Docker Hub's)."""
    if found is None:
        return _problem(
            "registry-token", f"no registry token for {host}: the push is the build's last "
            "step and fails after the whole build without one",
            "set GPURL_REGISTRY_TOKEN or GHCR_TOKEN, or log in with `gh auth login`")
    if host == "ghcr.io" and looks_like_docker_hub(found.token):
        return _problem(
            "registry-token", f"the token from {found.source} looks like a Docker Hub token "
            "(dckr_pat_...), which ghcr.io rejects at push time",
            "use a GitHub token with write:packages, e.g. GHCR_TOKEN=$(gh auth token)")
    return _ok("registry-token", f"{_token_kind(found.token)} from {found.source} for {host}")


def required_token(found: TokenSource | None, host: str) -> TokenSource:
    """The token a build pushes with, or the registry-token check's refusal."""
    require(check := registry_token(found, host))
    if found is None:  # registry_token refuses a missing token; this narrows the type
        raise BuildError(check.detail, hint=check.fix)
    return found


def registry_user(config: Config) -> Check:
    """The push authenticates as USER:TOKEN, so registry.user must be set."""
    if not config.registry.user:
        return _problem("registry-user", "no registry user: the push authenticates as "
                        "USER:TOKEN", "set [tool.gpurl.registry] user or GPURL_REGISTRY_USER")
    return _ok("registry-user", f"pushes as {config.registry.user!r}")


_HOW = {"anonymous": "the registry asks for no credentials",
        "basic": "the registry accepts the credentials (Basic auth)",
        "bearer": "the token service grants push",
        "upload": "a blob upload was accepted (and cancelled)"}


def push_scope(config: Config, repository: str, env: Mapping[str, str], *, what: str,
               on_retry: Callable[[str], None] | None = None) -> Check:
    """The credentials may push to `repository` (host/name): the token endpoint is asked for
    push scope, or a Basic registry's /v2/ checks the credentials; nothing is pushed.
    `on_retry` hears each retry (registry.retries bounds them)."""
    name = f"push-{what}"
    try:
        ref = parse_reference(f"{repository}:doctor", default_host=config.registry.host)
        with open_client(client_settings(config), ref, env, on_retry=on_retry) as client:
            how = client.push_access(ref)
    except GpurlError as exc:
        return _problem(name, f"cannot push to {repository}: {exc.message}",
                        exc.hint or "use credentials that may write to the repository",
                        exc)
    return _ok(name, f"{repository}: {_HOW[how]}")


def immutable_tag(config: Config, env: Mapping[str, str],
                  source: Callable[[Path, Sequence[str]], git.Source | None] = git.source,
                  lookup: Callable[[str], str | None] | None = None) -> Check:
    """The immutable tag PREFIX-<source id> of the working tree is free in the registry."""
    tree = source(config.root, ignored_paths(config))
    if tree is None:
        return _problem("immutable-tag", "cannot resolve GITSHA from git: the image is pushed "
                        "as the immutable tag PREFIX-GITSHA",
                        f"run from a git checkout with at least one commit ({config.root})")
    tag = config.registry.immutable_reference(tree.id, prefix=config.registry.tag_prefix)
    try:
        held = (lookup or (lambda ref: existing_digest(config, ref, env)))(tag)
    except GpurlError as exc:
        return _problem("immutable-tag", f"cannot look up {tag}: {exc.message}", exc.hint)
    if held is not None:
        return _problem("immutable-tag", f"{tag} already exists as {held}: an immutable tag "
                        "is never moved", "commit the change (a new commit is a new tag), pin "
                        "the existing digest, or build with --force to overwrite it knowingly")
    return _ok("immutable-tag", f"{tag} is free")


# --- the build's inputs ---------------------------------------------------------------------


def generated_files(config: Config) -> Check:
    """The committed generated files (generate.py's one list) are what the config renders."""
    try:
        check_committed(config)
    except GpurlError as exc:
        return _from_error("generated-files", exc)
    if not config.build.generate:
        return _ok("generated-files", "the committed generated files are current (the "
                                      "Dockerfile is hand-written)")
    return _ok("generated-files", "the committed Dockerfile, slices and generated files are current")


def hand_written(config: Config) -> Check:
    """A hand-written Dockerfile (build.generate = false) is there and builds what the config
    says: every build arg declared, every COPY/ADD of its image's stages taking a file of the
    context the job bundles (.dockerignore applied)."""
    build = config.build
    if build.generate:
        return _skip("hand-written", "the Dockerfile is generated (build.generate = true)")
    path = build.dockerfile.relative_to(config.root).as_posix()
    try:
        text = read_text(build.dockerfile, what="hand-written Dockerfile",
                         missing_hint="commit it, or correct build.dockerfile")
        context = build.context.relative_to(config.root).as_posix()
        ignore = build.context / ".dockerignore"
        bundled = [f for f in git.ls_bundle_files(config.root)  # a deleted file is not in it
                   if (config.root / f).is_file() or (config.root / f).is_symlink()]
        found = handwritten.problems(
            text, build_arg_map(build.build_args), bundled, context,
            read_text(ignore, what=".dockerignore") if ignore.is_file() else "")
    except GpurlError as exc:
        return _from_error("hand-written", exc)
    if found:
        return _problem("hand-written", f"{path}: " + "; ".join(found),
                        "correct the Dockerfile or build.build-args / build.context")
    return _ok("hand-written", f"{path}: every build arg declared, every COPY/ADD takes files "
                               "of the context")


def _head(url: str) -> int | str:
    """The HTTP status of a HEAD request (redirects followed), or the transport failure."""
    try:
        return httpx.head(url, timeout=_TIMEOUT, follow_redirects=True).status_code
    except httpx.HTTPError as exc:
        return type(exc).__name__


def prebuilt_wheels(config: Config) -> Check:
    """Every compiled wheel the build fetches answers HEAD at build.wheel-base-url, and the
    MANIFEST there (the one GET) lists each by the name the pins derive."""
    if config.build.wheel_source != "prebuilt-wheelhouse":
        return _skip("prebuilt-wheels", f"build.wheel-source is {config.build.wheel_source}: "
                                        "the wheels are compiled in the build")
    try:
        names = kaniko.prebuilt_wheel_names(config)
    except GpurlError as exc:
        return _from_error("prebuilt-wheels", exc)
    if not names:
        return _skip("prebuilt-wheels", "the profile has no compiled wheels")
    base = config.build.wheel_base_url.rstrip("/")
    shown = redact_url(base)
    try:
        found, key = read_manifest_keyed(f"{base}/MANIFEST", timeout=_TIMEOUT)
    except Unreachable as exc:  # nothing is known about the wheels: not "publish them"
        return _from_error("prebuilt-wheels", exc)
    except GpurlError as exc:
        return _problem("prebuilt-wheels", f"no MANIFEST at {shown}: {exc.message}",
                        "publish the wheels with a MANIFEST (sha256sum *.whl > MANIFEST)")
    listed = {w.filename for w in found}
    abi = check_abi_key(pins_from_args({}, config.build, config.target), key)
    if abi is not None:
        return _problem("prebuilt-wheels", f"the MANIFEST at {shown} records another ABI key: "
                        f"expected {abi.expected!r}, found {abi.found!r} (the build would fail)",
                        "rebuild the wheels for these pins (`invoke build-wheels`) and upload "
                        "them with their MANIFEST")
    unlisted = [n for n in names if n not in listed]
    absent = [f"{n} ({status})" for n in names if (status := _head(f"{base}/{n}")) != 200]
    if unlisted or absent:
        parts = ([f"MANIFEST lacks {', '.join(unlisted)}"] if unlisted else []) + (
            [f"missing: {', '.join(absent)}"] if absent else [])
        return _problem("prebuilt-wheels", f"prebuilt wheels at {shown}: {'; '.join(parts)} "
                        "(the build would fail, never compile)",
                        "build them (`invoke build-wheels`) and upload them with the MANIFEST, "
                        "or build with WHEEL_SOURCE=wheel-builder (~3 h)")
    return _ok("prebuilt-wheels", f"{len(names)} wheel(s) at {shown}, listed in its MANIFEST: "
                                  f"{', '.join(names)}")


def _platforms_of(client: RegistryClient, ref: ImageRef) -> tuple[str, ...] | None:
    """The platforms `ref` holds: its index's entries, or a single image's config `os/arch`
    (None: the registry has no such manifest)."""
    try:
        digest, media_type, document = client.manifest(ref)
    except ManifestUnknown:
        return None
    where = f"manifest {digest} of {ref}"
    if media_type in INDEX_TYPES:
        return tuple(e.platform or "?" for e in parse_index(document, where))
    config = client.blob_json(ref, parse_manifest(document, where).config_digest)
    return (platform_name(config.get("os"), config.get("architecture")) or "?",)


def executor_pin(config: Config, env: Mapping[str, str]) -> Check:
    """cluster.kaniko-executor is a digest reference its registry holds, with an image for the
    variant's platform: the job's `crane export --platform` takes that one (crane exports a
    single image whatever its platform), so an amd64-only pin fails an aarch64 job late."""
    platform = config.target.platform
    try:
        image = kaniko.pinned_executor(config.cluster.kaniko_executor)
        ref = parse_reference(image, default_host="docker.io")
        with open_client(client_settings(config), ref, env) as client:
            held = _platforms_of(client, ref)
    except GpurlError as exc:
        return _from_error("executor-pin", exc)
    if held is None:
        return _problem("executor-pin", f"{image} is not in its registry",
                        "pin a digest that exists: `crane digest IMAGE:TAG`")
    # an index entry `linux/arm64/v8` is a linux/arm64 image (as crane's --platform matches)
    if not any(same_platform(p, platform) for p in held):
        return _problem("executor-pin", f"{image} has no {platform} image (it holds "
                        f"{', '.join(held) or 'nothing'}): the job of profile {config.profile!r}"
                        f"{config.variant.note} exports the executor for {platform}",
                        f"pin the digest of an image index that holds {platform}: "
                        "`crane digest IMAGE:TAG` of a multi-platform tag")
    return _ok("executor-pin", f"{image} resolves in its registry and holds {platform}")


def crane_url(url: str) -> Check:
    """cluster.crane-url answers HEAD (its sha256 is checked in the job)."""
    status = _head(url)
    if isinstance(status, str):  # a transport failure: the archive was not checked
        host = urlsplit(url).hostname or url
        return _problem("crane-url", f"cannot reach {host} from this machine to check "
                        f"cluster.crane-url {redact_url(url)} ({status})", unreachable_hint(host))
    if status != 200:
        return _problem("crane-url", f"cluster.crane-url {redact_url(url)} answers {status}",
                        "point cluster.crane-url (and crane-sha256) at a go-containerregistry "
                        "release archive")
    return _ok("crane-url", f"{redact_url(url)} answers HEAD")


# --- all of them ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class DoctorReport:
    """Every check's line; exit 0 only when none is a problem."""

    profile: str
    variant: str
    checks: tuple[Check, ...]

    @property
    def problems(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.failed)

    @property
    def exit_code(self) -> int:
        return ExitCode.CHECK_FAILED if self.problems else ExitCode.OK

    @property
    def failure(self) -> str | None:
        if not self.problems:
            return None
        return (f"doctor: {len(self.problems)} of {len(self.checks)} checks found a problem "
                f"({', '.join(c.name for c in self.problems)})")

    def human(self) -> str:
        width = max((len(c.name) for c in self.checks), default=0)
        lines = [f"doctor: profile {self.profile!r}" + (f" variant {self.variant!r}"
                                                       if self.variant else "")]
        for c in self.checks:
            mark = {"ok": "ok     ", "problem": "PROBLEM", "skipped": "skip   "}[c.status]
            lines.append(f"{mark} {c.name:<{width}}  {c.detail}")
            if c.failed and c.fix:
                lines.append(f"        {'':<{width}}  fix: {c.fix}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"ok": not self.problems, "profile": self.profile, "variant": self.variant,
                "checks": [c.to_json() for c in self.checks]}


def _redacted(checks: Iterable[Check], secrets: Sequence[Secret]) -> tuple[Check, ...]:
    return tuple(dataclasses.replace(c, detail=redact(c.detail, secrets),
                                     fix=redact(c.fix, secrets) if c.fix else c.fix)
                 for c in checks)


def run_doctor(config: Config, env: Mapping[str, str], *,
               token: Callable[[], TokenSource | None],
               source: Callable[[Path, Sequence[str]], git.Source | None] = git.source,
               say: Callable[[str], None] = lambda _: None) -> DoctorReport:
    """Run every check for `config`'s backend (the cluster's only for iris) and report all.
    A registry that does not answer is retried once, in push-image, each retry said on
    `say`; the checks after it that need the same registry say it did not answer, so the
    run is bounded by one check's retries (registry.retries, registry.retry-max-wait)."""
    found = token()
    if found is not None and not any(env.get(name, "").strip() for name in TOKEN_ENVS):
        env = {**env, TOKEN_ENVS[0]: found.token.reveal()}  # from `gh`: the registry reads use it
    cluster = config.backend == "iris"
    not_cluster = f"backend {config.backend}: not a cluster build"
    checks = [
        kubeconfig(env) if cluster else _skip("kubeconfig", not_cluster),
        kubeconfig_cluster(env, config.cluster.name) if cluster
        else _skip("kubeconfig-cluster", not_cluster),
        iris_install(env) if cluster else _skip("iris", not_cluster),
        iris_controller(config.cluster.controller_url) if cluster
        else _skip("iris-controller", not_cluster),
        job_memory(config.cluster.memory, snapshots_environment=snapshots_environment(config),
                   env_bytes=_environment_bytes(config))
        if cluster else _skip("memory", not_cluster),
    ]
    if cluster or found is not None:
        checks.append(registry_token(found, config.registry.host))
    if cluster:
        checks.append(registry_user(config))
    token_failed = next((c for c in checks if c.name == "registry-token" and c.failed), None)
    host = config.registry.host
    down: list[str] = []  # the registry did not answer push-image: its other checks say so

    def retrying(line: str) -> None:
        say(f"doctor: the registry {host} did not answer: {line} (registry.retries bounds it)")

    def unless_down(name: str, check: Callable[[], Check]) -> Check:
        return _skip(name, f"not checked: {host} did not answer (see push-image)") if down \
            else check()

    if token_failed is None:
        image = push_scope(config, config.registry.image, env, what="image", on_retry=retrying)
        if isinstance(image.cause, Unreachable):
            down.append(host)
        checks += [image, unless_down("push-cache", lambda: push_scope(
            config, cache_repository(config), env, what="cache", on_retry=retrying))]
    else:  # listed, not left out: the push checks could not run
        checks += [_skip(f"push-{what}", f"not checked: no usable registry token (see "
                         f"registry-token); {repository}")
                   for what, repository in (("image", config.registry.image),
                                            ("cache", cache_repository(config)))]
    checks += [prebuilt_wheels(config) if cluster else _skip("prebuilt-wheels", not_cluster),
               generated_files(config),
               *([] if config.build.generate else [hand_written(config)]),
               unless_down("immutable-tag", lambda: immutable_tag(config, env, source))]
    if cluster:
        checks += [executor_pin(config, env), crane_url(config.variant.crane_archive[0]),
                   gpu_settings(config)]
    secrets = (found.token,) if found else ()
    return DoctorReport(profile=config.profile, variant=config.variant.shown,
                        checks=_redacted(checks, secrets))
