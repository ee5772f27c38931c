"""The gpu-rl recipe: the Dockerfile model built from the config and the layer plan.

Every gotcha of the hand-run runbook is written here, so no edit of a generated file can
forget one (runbook sections 2, 4, 5, 6):

- wheel-builder: `--index-strategy unsafe-best-match` on the uv install that mixes the CUDA
  index with PyPI, `python -m pip wheel --no-cache-dir --no-build-isolation` (uv has no wheel
  subcommand), `MAX_JOBS` as an ARG;
- `FROM ${WHEEL_SOURCE} AS wheels` so exactly one wheel source is used; a profile without
  compiled wheels (no build.wheel-specs or wheel-globs) has none of these stages, ARGs or
  MANIFEST checks: its lock is the whole truth;
- the rl stage's apt set always includes the InfiniBand verbs userspace (NCCL over IB);
- the slices: per planned layer a COPY of its slice file and `uv pip install --no-deps
  --require-hashes -r` it, then one final `uv sync --frozen` with the profile's selection; no
  uv cache in a layer, no bytecode (it would break the size model);
- the compiled wheels survive the final sync because that sync is `--inexact` (an exact sync
  would uninstall them) and excludes the packages the compiled wheels provide; they are
  installed in a stage of their own and the rl stage copies what they installed (and their
  MANIFEST), so no wheel file is in the image;
- a rebuild with nothing changed is no new layer blob: env-base's RUN makes the workspace
  directory before its WORKDIR (a WORKDIR that makes it is a layer kaniko stamps anew), every
  RUN and COPY comes from kaniko's cache (the job caches COPY layers: their key hashes the
  files' bytes and modes, not their times), and a last RUN under the job's BUILD_ID, never
  cached and writing nothing, keeps kaniko unpacking the last stage for the attestation step;
- the MANIFEST's ABI key is compared before any wheel installs; every apt-get and uv/pip
  download waits a bounded time (build.apt-* and build.http-*);
- after the lock: `build.post-install`, then the proof that the environment is the lock's set
  plus them and their dependencies, and the `uv pip check` gate (docker/gpurl-envcheck.py);
- the build asserts are one RUN that writes a record (a file-less RUN is an empty layer when
  kaniko takes it from its cache); provenance LABELs come last so a new git sha does not
  invalidate the cache of any layer.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

import gpurl_tasks
from gpurl_tasks.config import Config, config_fingerprint
from gpurl_tasks.dockerfile import provenance
from gpurl_tasks.dockerfile.checks import LocalCopy
from gpurl_tasks.dockerfile.model import (
    Arg,
    ArgImage,
    Command,
    Comment,
    Copy,
    Dockerfile,
    DockerfileError,
    Env,
    Instruction,
    Label,
    Run,
    Shell,
    Stage,
    Workdir,
    image,
)
from gpurl_tasks.dockerfile.wheels import (
    ABI_FIELDS,
    ABI_KEY_PREFIX,
    WheelPins,
    abi_key,
    pins_from_args,
)
from gpurl_tasks.errors import BUG_HINT
from gpurl_tasks.plan.model import Layer, Plan, Slice, SliceBuild
from gpurl_tasks.values import ARG_REF, format_bytes, inside_repository
from gpurl_tasks.writer.compiled import (
    COMPILED_ARG,
    COMPILED_IN_ENV,
    ENV_ARG,
    WHEELS_MANIFEST,
    WHEELS_TMP,
)

__all__ = [
    "ASSERTS_RECORD",
    "BOOTSTRAP_APT",
    "BUILD_ID",
    "COMPILED_STAGE",
    "ENV_BASE_STAGE",
    "ENV_CHAIN",
    "IB_VERBS_APT",
    "WORKDIR",
    "apt_options",
    "render_recipe",
    "slice_run",
    "wheel_source_arg",
]

BOOTSTRAP_APT = ("ca-certificates", "python3", "python3-venv")  # what installing uv needs
IB_VERBS_APT = ("ibverbs-providers", "ibverbs-utils", "libibverbs1", "librdmacm1", "rdma-core")
# The image's workspace: never /app, which iris mounts over the job's workdir (an emptyDir
# its init container fills with the bundle). kaniko builds in the job's own root filesystem
# and keeps mount points out of its snapshots, so whatever the build writes under a mount
# misses the image (and writes into the job's bundle); see docs/build.md.
WORKDIR = "/opt/workspace"
# The compiled wheels are installed in a stage of their own into this tree, laid out as the
# image's root (the venv's files under the venv's path, the MANIFEST under PROVENANCE_DIR): the
# rl stage copies the tree onto / in one layer, so the image holds the installed files and
# never the wheel files beside them.
COMPILED_STAGE = "compiled-wheels"
_COMPILED_ROOT = "/tmp/gpurl-compiled"
# The environment with that tree copied on: COMPILED_SOURCE's default. A cluster job that
# composes the environment and fetched prebuilt wheels writes the tree as a layer of the
# composed environment itself, keyed by the wheels (writer/compiled.py), and builds the rl
# stage FROM env (COMPILED_SOURCE=env): a lock bump then leaves the compiled layer as it was.
ENV_COMPILED = "env-compiled"
ENV_BASE_STAGE = "env-base"  # every slice image's base: the rl stage's apt set and `uv venv`
ENV_CHAIN = "env-chain"  # ENV_SOURCE's default: every slice in one layer chain


def _args(config: Config) -> dict[str, str]:
    """Every build ARG the recipe may use, with its default from the config."""
    b = config.build
    args = {
        "BASE_IMAGE": b.base_image,
        "UV_VERSION": b.uv_version,
        "TORCH_VERSION": b.torch_version,
        "FLASH_ATTN_VERSION": b.flash_attn_version,
        "VLLM_FORK_REPO": b.vllm_fork_repo,
        "VLLM_FORK_COMMIT": b.vllm_fork_commit,
        **({"WHEEL_SOURCE": b.wheel_source} if b.compiled_wheels else {}),
        ENV_ARG: ENV_CHAIN,
        **({COMPILED_ARG: ENV_COMPILED} if b.wheel_globs else {}),
        "MAX_JOBS": str(b.max_jobs),
        "GITSHA": "unknown",
    }
    if b.index_url:
        args["INDEX_URL"] = b.index_url
    if b.cuda_arch_list:
        args["TORCH_CUDA_ARCH_LIST"] = b.cuda_arch_list
    return args


def wheel_source_arg(config: Config, chosen: str | None = None) -> dict[str, str]:
    """The WHEEL_SOURCE build arg (`chosen`, else build.wheel-source); none for a profile
    without compiled wheels, whose Dockerfile declares no such ARG."""
    return {"WHEEL_SOURCE": chosen or config.build.wheel_source} if config.build.compiled_wheels \
        else {}


def _pins(config: Config) -> WheelPins:
    """What the compiled wheels are built for: the config's pins (the ARG defaults)."""
    return pins_from_args({}, config.build, config.target)


def _manifest_run(config: Config) -> Run:
    """The MANIFEST: the ABI key line (written from the ARGs the compile was given, so an
    overridden ARG shows in it), then one `sha256sum` line per wheel."""
    known = _args(config)
    refs = {field: f"${{{arg}}}" for _word, field, arg in ABI_FIELDS
            if arg is not None and known.get(arg)}
    key = abi_key(_pins(config), refs=refs)
    return Run(commands=(Shell(text=f'{{ echo "{ABI_KEY_PREFIX}{key}"; sha256sum -- *.whl; }} '
                                    "> MANIFEST"),))


def _abi_check(config: Config) -> Shell:
    """Fail before any wheel installs when the wheels' MANIFEST records another ABI key,
    showing both keys."""
    return Shell(text=(
        f"expected={shlex.quote(abi_key(_pins(config)))}; "
        f"found=\"$(sed -n 's/^{ABI_KEY_PREFIX}//p' {WHEELS_TMP}/MANIFEST)\"; "
        '[ "$found" = "$expected" ] || { echo "error: the compiled wheels\' MANIFEST ABI key '
        "differs: expected '$expected', found '${found:-none}'\" >&2; exit 1; }"))


def _refs(instructions: Iterable[Instruction]) -> list[str]:
    """ARG names referenced as ${NAME}, in order of first use."""
    names: list[str] = []
    for ins in instructions:
        for name in ARG_REF.findall(ins.render()):
            if name not in names:
                names.append(name)
    return names


def _with_args(body: list[Instruction], known: dict[str, str]) -> tuple[Instruction, ...]:
    """Declare each build ARG a stage uses right before its first use in that stage.

    A global ARG is visible only in FROM lines: without `ARG NAME` inside the stage the value
    is silently empty. Declaring it late matters too: every RUN after an ARG sees it, so an ARG
    declared at the top would tie every slice layer's cache to, say, VLLM_FORK_COMMIT.
    """
    out: list[Instruction] = []
    declared: set[str] = set()
    for ins in body:
        if isinstance(ins, Arg):
            declared.add(ins.name)
        else:
            for name in _refs((ins,)):
                if name in known and name not in declared:
                    out.append(Arg(name=name))
                    declared.add(name)
        out.append(ins)
    return tuple(out)


def apt_options(config: Config) -> tuple[tuple[str, str], ...]:
    """Bounded waits for every apt-get: retries, and a timeout per HTTP(S) request."""
    b = config.build
    return (("-o", f"Acquire::Retries={b.apt_retries}"),
            ("-o", f"Acquire::http::Timeout={b.apt_timeout}"),
            ("-o", f"Acquire::https::Timeout={b.apt_timeout}"))


def _apt(config: Config, packages: Iterable[str]) -> Run:
    bounded = apt_options(config)
    return Run(commands=(
        Command(head=("apt-get", "update"), groups=bounded),
        Command(head=("DEBIAN_FRONTEND=noninteractive", "apt-get", "install"),
                groups=(*bounded, ("-y", "--no-install-recommends")), unordered=tuple(packages)),
        Command(head=("rm", "-rf", "/var/lib/apt/lists/*")),
    ))


def _base_stage(config: Config) -> Stage:
    b = config.build
    env = [
        ("UV_COMPILE_BYTECODE", "0"),
        ("UV_LINK_MODE", "copy"),
        ("UV_NO_CACHE", "1"),
        ("UV_PYTHON", config.target.python),
        ("UV_PYTHON_DOWNLOADS", b.python_downloads),
        ("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
        # bounded network waits in every stage (each stage but the scratch wheelhouse is FROM base)
        ("UV_HTTP_TIMEOUT", str(b.http_timeout)),
        ("UV_HTTP_RETRIES", str(b.http_retries)),
        ("PIP_DEFAULT_TIMEOUT", str(b.http_timeout)),
        ("PIP_RETRIES", str(b.http_retries)),
    ]
    if b.index_url:
        env += [("PIP_INDEX_URL", "${INDEX_URL}"), ("UV_DEFAULT_INDEX", "${INDEX_URL}")]
    if b.python_downloads != "never":
        env.append(("UV_PYTHON_INSTALL_DIR", "/opt/uv-python"))
    body: list[Instruction] = [
        Comment(text="No uv cache in any layer (no cache mounts under kaniko), no .pyc: the layer "
                "planner predicts"),
        Comment(text="each layer's size as the sum of its wheels, and bytecode would add "
                "unplanned bytes."),
        Env(pairs=tuple(env)),
        _apt(config, BOOTSTRAP_APT),
        Comment(text="uv from the package index (no image is pulled for it), pinned."),
        Run(commands=(
            Command(head=("python3", "-m", "venv", "/opt/uv")),
            Command(head=("/opt/uv/bin/pip", "install"),
                    groups=(("--no-cache-dir",), ("uv==${UV_VERSION}",))),
            Command(head=("ln", "-s", "/opt/uv/bin/uv", "/usr/local/bin/uv")),
            Command(head=("uv", "--version")),
        )),
    ]
    if b.python_downloads != "never":
        body += [
            Comment(text="The interpreter gets its own layer, not a share of the first sync's."),
            Run(commands=(Command(head=("uv", "python", "install", "${UV_PYTHON}")),)),
        ]
    return Stage(name="base", base=ArgImage(name="BASE_IMAGE"),
                 instructions=_with_args(body, _args(config)),
                 comment="Shared bootstrap: apt basics and a pinned uv.")


def _wheel_builder_stage(config: Config) -> Stage:
    b = config.build
    if not b.wheel_specs:  # prebuilt wheels only (build.wheel-globs): nothing to compile
        return Stage(name="wheel-builder", base="base", instructions=(
            Run(commands=(Command(head=("mkdir", "-p", "/wheels")),
                          Command(head=("touch", "/wheels/MANIFEST")))),),
            comment="Nothing to compile (build.wheel-specs is empty): the wheel-builder stage "
                    "is an empty wheelhouse.")
    install = [("--python", "/opt/builder/bin/python"),
               ("--index-strategy", "unsafe-best-match")]
    if b.builder_extra_index_url:
        install.append(("--extra-index-url", b.builder_extra_index_url))
    body: list[Instruction] = [
        _apt(config, b.builder_apt_packages),
        Run(commands=(Command(head=("uv", "venv", "--seed", "/opt/builder")),)),
        Comment(text="unsafe-best-match: uv otherwise pins every package to the first index "
                "that has it,"),
        Comment(text="which makes PyPI-only requirements such as setuptools>=77 unsatisfiable."),
        Run(commands=(Command(head=("uv", "pip", "install"), groups=tuple(install),
                              unordered=b.builder_requirements),)),
    ]
    specs: list[str] = []
    for spec in b.wheel_specs:
        if spec.startswith("./"):
            path = spec[2:].rstrip("/")
            body.append(Copy(sources=(f"{path}/",), dest=f"/src/{path}/"))
            specs.append(f"/src/{path}")
        else:
            specs.append(spec)
    if b.cuda_arch_list:
        body += [Comment(text="The GPU architectures the kernels are compiled for (the "
                         "MANIFEST's ABI key records them)."),
                 Arg(name="TORCH_CUDA_ARCH_LIST")]
    body += [
        Comment(text="uv has no `pip wheel`; --no-build-isolation builds against what is "
                "installed above (torch)."),
        Arg(name="MAX_JOBS"),
        Run(commands=(Command(
            head=("/opt/builder/bin/python", "-m", "pip", "wheel"),
            groups=(("--no-cache-dir",), ("--no-build-isolation",), ("--no-deps",),
                    ("--wheel-dir", "/wheels"), *((s,) for s in specs)),
        ),)),
        Workdir(path="/wheels"),
        _manifest_run(config),
    ]
    return Stage(name="wheel-builder", base="base",
                 instructions=_with_args(body, _args(config)),
                 comment="Slow path (WHEEL_SOURCE=wheel-builder): compile the wheels "
                         "(nvcc for CUDA).")


def _wheel_stages(config: Config) -> tuple[Stage, ...]:
    """The compiled wheels' two sources and the one the build uses; none for a profile without
    compiled wheels, whose lock is the whole truth (no stage, ARG or MANIFEST of them)."""
    if not config.build.compiled_wheels:
        return ()
    return (
        _wheel_builder_stage(config),
        Stage(name="prebuilt-wheelhouse", base=image("scratch"),
              instructions=(Copy(sources=(f"{_rel(config, str(config.build.wheelhouse))}/",),
                                 dest="/wheels/"),),
              comment="Fast path (default): wheels fetched into the wheelhouse before the build."),
        Stage(name="wheels", base=ArgImage(name="WHEEL_SOURCE"),
              comment="Exactly one wheel source; kaniko needs --skip-unused-stages to skip the "
                      "other."),
    )


def _rel(config: Config, path: str) -> str:
    """A path the Dockerfile copies, relative to the build context (the repository), which it
    must stay inside with its symlinks resolved."""
    return inside_repository(Path(path), config.root, "a path the Dockerfile copies",
                             error=DockerfileError)


def _sync_run(flags: Iterable[str]) -> Run:
    return Run(commands=(Command(head=("uv", "sync"), groups=tuple(_flag_groups(flags))),))


def _flag_groups(flags: Iterable[str]) -> list[tuple[str, ...]]:
    """Pair each `--flag` with its value so each renders on one line."""
    groups: list[tuple[str, ...]] = []
    for word in flags:
        if groups and not word.startswith("-") and len(groups[-1]) == 1:
            groups[-1] = (*groups[-1], word)
        else:
            groups.append((word,))
    return groups


def slice_run(layer: Layer, build: SliceBuild | None = None) -> Run:
    """Install one slice: exactly its pinned artifacts, nothing they depend on; the packages
    the lock's build settings build without isolation build against the chain below."""
    groups: list[tuple[str, ...]] = [("--no-deps",)]
    if layer.hashed:
        groups.append(("--require-hashes",))
    groups += [("--no-build-isolation-package", name) for name in (build.no_isolation if build else ())]
    if len(layer.indexes) > 1:  # each pin names its version and hashes; any listed index may serve it
        groups.append(("--index-strategy", "unsafe-best-match"))
    groups.append(("-r", layer.slice.image_path))
    return Run(commands=(Command(head=("uv", "pip", "install"), groups=tuple(groups)),))


def _compiled_wheels_assert(globs: tuple[str, ...]) -> Run:
    """Each compiled wheel is what is installed: no sync replaced or reverted it. The wheels
    are named by the MANIFEST the image keeps (the wheel files are not in the image)."""
    stmt = ("import fnmatch, importlib.metadata as m; "
            f"names = [line.split()[-1] for line in open('{WHEELS_MANIFEST}') "
            "if line.strip() and not line.startswith('#')]; "
            f"found = [w.split('-')[:2] for w in names if any(fnmatch.fnmatch(w, g) "
            f"for g in {list(globs)!r})]; "
            "bad = [(n, v, m.version(n)) for n, v in found if m.version(n) != v]; "
            "assert found and not bad, ('compiled wheel not installed', found, bad); "
            "print('compiled wheels installed:', ', '.join('=='.join(f) for f in found))")
    return Run(commands=(Command(head=("python", "-B", "-c", stmt)),))


ASSERTS_RECORD = "/etc/gpurl-build-asserts"
# A build arg the cluster job sets anew on every executor run (cluster/jobstart.py): it keeps
# the last stage from being wholly cached (see _rl_stage).
BUILD_ID = "BUILD_ID"


def _asserts_run(globs: tuple[str, ...], import_asserts: tuple[str, ...],
                 environment: tuple[Command, ...] = ()) -> Run:
    """Every build assert in one RUN that records what passed.

    A RUN that makes no files is no layer when kaniko builds it, but an empty layer when its
    cache supplies it: the image would grow a layer per assert on every rebuild. A record file
    makes the RUN one real layer either way.
    """
    # -B: importing must not leave .pyc files in the layer (unplanned bytes).
    checks = ([_compiled_wheels_assert(globs).commands[0]] if globs else []) + [
        *environment, *(Command(head=("python", "-B", "-c", stmt)) for stmt in import_asserts)]
    steps: list[Command | Shell] = []
    for i, check in enumerate(checks, 1):
        steps += [Command(head=("echo", f"build assert {i}/{len(checks)}")), check]
    steps.append(Shell(text=f"echo '{len(checks)} build asserts passed' > {ASSERTS_RECORD}"))
    return Run(commands=tuple(steps))


PROVENANCE_DIR = "/etc/gpurl/provenance"  # what the image records about itself
ENVCHECK = "/etc/gpurl/envcheck.py"  # dockerfile/envcheck.py, as generate writes it
ENVCHECK_SOURCE = "docker/gpurl-envcheck.py"  # where generate writes it, in the context
FREEZE_LOCK = f"{PROVENANCE_DIR}/freeze-lock.txt"  # after the final sync: the lock's set
FREEZE = f"{PROVENANCE_DIR}/freeze.txt"  # `uv pip freeze`: the environment's whole set


def provenance_sources(config: Config) -> tuple[str, ...]:
    """What PROVENANCE_DIR/sources.txt records: one `<what> <url>@<commit>` line per source
    built from git (the vLLM fork the wheels are compiled from, each git post-install)."""
    b = config.build
    lines = [f"vllm-fork {b.vllm_fork_repo}@{b.vllm_fork_commit}"] if b.vllm_fork_commit else []
    lines += [f"{e.name} {e.requirement.split(' @ ', 1)[1].removeprefix('git+')}"
              for e in b.post_installs if " @ " in e.requirement]
    return tuple(lines)


def _post_install_steps(config: Config, plan: Plan) -> list[Instruction]:
    """After the lock: record the provenance files and the lock's set (the final sync proved
    it equal to the lock), then install the post-install requirements (their dependencies
    resolved now) unless they are pinned: then their slice installed them below."""
    record: list[Command | Shell] = [Command(head=("mkdir", "-p", PROVENANCE_DIR))]
    sources = provenance_sources(config)
    record.append(Shell(text=("printf '%s\\n' " + " ".join(shlex.quote(s) for s in sources)
                              if sources else ":") + f" > {PROVENANCE_DIR}/sources.txt"))
    pinned = plan.pinned_post_install
    outside = pinned.names if pinned else ()
    steps: list[Instruction] = [
        Comment(text=f"Provenance in {PROVENANCE_DIR}: "
                + ("the compiled wheels' MANIFEST (copied with them), "
                   if config.build.wheel_globs else "")
                + "the git sources, the package set;"),
        Comment(text="the lock's set as the final sync left it (the asserts prove the "
                "environment is it plus the post-installs)."),
        *([Comment(text="The pinned post-install slice below the sync installed packages "
                   "outside the lock: left out of it.")] if pinned else []),
        Copy(sources=(ENVCHECK_SOURCE,), dest=ENVCHECK),
        Run(commands=(*record, Command(head=("python", "-B", ENVCHECK, "lock-set", FREEZE_LOCK),
                                       groups=tuple(("--outside", n) for n in outside)))),
    ]
    if plan.outside_lock and not pinned:
        steps += [
            Comment(text="After the lock (build.post-install), each pinned; their dependencies "
                    "are resolved now."),
            Run(commands=(Command(head=("uv", "pip", "install"),
                                  unordered=plan.outside_lock),)),
        ]
    return steps


def _environment_checks(config: Config, plan: Plan) -> list[Command]:
    """The package-set proof (recording `uv pip freeze`) and the `uv pip check` gate."""
    prove = [("--lock-set", FREEZE_LOCK), ("--out", FREEZE),
             *(("--post-install", r) for r in plan.outside_lock)]
    allow = [("--allow", pattern) for pattern in config.build.pip_check_allow]
    return [Command(head=("python", "-B", ENVCHECK, "prove"), groups=tuple(prove)),
            Command(head=("python", "-B", ENVCHECK, "pip-check"), groups=tuple(allow))]


def _slice_steps(config: Config, plan: Plan, layer: Layer) -> list[Instruction]:
    """One slice in the chain: a COPY of its file and one install."""
    return [
        Comment(text=f"slice {layer.index + 1}/{len(plan.layers)} {layer.name}: "
                f"{len(layer.packages)} package(s), ~{format_bytes(layer.compressed_bytes)} "
                "compressed"),
        Copy(sources=(_rel(config, str(layer.slice.path(config.variant))),),
             dest=layer.slice.image_path),
        slice_run(layer, plan.build_of(layer)),
    ]


def _env_stages(config: Config, plan: Plan) -> tuple[Stage, ...]:
    """`env-base` (the runtime's apt set and an empty venv), the `env-chain` of every slice,
    and `env` FROM ${ENV_SOURCE}: the chain, or the image composed at the registry from
    env-base and the slice layers gpurl writes on it (the default on both paths; see
    writer/composition.py)."""
    b = config.build
    base: list[Instruction] = [
        Comment(text="The InfiniBand verbs userspace is always installed: without it NCCL "
                "silently falls back"),
        Comment(text="to NET/Socket (the 'Could not find libnccl-net.so' line is a red herring)."),
        _apt(config, (*b.apt_packages, *IB_VERBS_APT)),
        Env(pairs=(("PATH", f"{b.venv}/bin:${{PATH}}"), ("UV_PROJECT_ENVIRONMENT", b.venv),
                   ("VIRTUAL_ENV", b.venv))),
        Comment(text="The workspace directory is made by the RUN (a cached layer, the same "
                "blob on every build);"),
        Comment(text="a WORKDIR that made it would be a new layer on every kaniko build "
                "(the directory's time)."),
        Run(commands=(Command(head=("uv", "venv", b.venv)),
                      Command(head=("mkdir", "-p", WORKDIR)))),
        Workdir(path=WORKDIR, exists=True),
    ]
    known = _args(config)
    stages = [Stage(name=ENV_BASE_STAGE, base="base", instructions=_with_args(base, known),
                    comment="What every slice installs onto: the runtime's apt set and an "
                            "empty venv.")]
    chain: list[Instruction] = [
        Comment(text=f"The layer plan: {len(plan.layers)} slice(s) of uv.lock, each a COPY of its "
                "own file and one install,"),
        Comment(text="so a lock bump rebuilds only the layers whose pins changed (and those above "
                "them)."),
    ]
    for layer in plan.layers:
        chain += _slice_steps(config, plan, layer)
    stages += [
        Stage(name=ENV_CHAIN, base=ENV_BASE_STAGE, instructions=tuple(chain),
              comment="Every slice in one chain: for builders that cannot compose "
                      "(ENV_SOURCE=env-chain, the default)."),
        Stage(name="env", base=ArgImage(name=ENV_ARG), instructions=(
            Comment(text="kaniko v1.23.2 seeds the cache keys of a stage FROM an earlier stage "
                    "with that stage's last"),
            Comment(text="instruction's key, and with nothing for a stage of none: this ARG "
                    "keys every stage FROM env"),
            Comment(text="on the environment image. Without it a new base image would take "
                    "their RUNs from the cache,"),
            Comment(text="the build asserts among them."),
            Arg(name=ENV_ARG)),
              comment="The environment: the chain, or the composed image's reference "
                      "(ENV_SOURCE=<registry>/<repo>@sha256:...)."),
    ]
    return tuple(stages)


def _compiled_stage(config: Config, plan: Plan) -> tuple[Stage, ...]:
    """The compiled wheels installed on the environment into a tree laid out as the image's
    root (`--prefix`: the venv's lib and bin, scripts naming the venv's python), with their
    MANIFEST; none for a profile without compiled wheels."""
    b = config.build
    if not b.wheel_globs:
        return ()
    prefix = f"{_COMPILED_ROOT}{b.venv}"
    provenance_dir = f"{_COMPILED_ROOT}{PROVENANCE_DIR}"
    provided = plan.final_exclusions
    body: list[Instruction] = [
        Copy(sources=("/wheels/",), dest=f"{WHEELS_TMP}/", from_stage="wheels"),
        Comment(text="The compiled wheels provide "
                + (", ".join(provided) if provided else "packages the lock does not pin")
                + "; the final sync excludes them,"),
        Comment(text="so the lock's copies are never installed, built or put back over them."),
        Comment(text="The MANIFEST's ABI key must be the pins' before anything installs: "
                "wheels built for"),
        Comment(text="another fork commit, torch, CUDA, Python or arch list fail here, "
                "not on the cluster."),
        Run(commands=(
            _abi_check(config),
            Command(head=("uv", "pip", "install"),
                    groups=(("--no-deps",), ("--prefix", prefix),
                            *((f"{WHEELS_TMP}/{g}",) for g in b.wheel_globs))),
            Command(head=("rm", "-f", f"{prefix}/.lock")),  # uv's lock of the prefix
            Command(head=("mkdir", "-p", provenance_dir)),
            Command(head=("cp", f"{WHEELS_TMP}/MANIFEST", f"{provenance_dir}/wheels.MANIFEST")),
        )),
    ]
    return (Stage(name=COMPILED_STAGE, base="env", instructions=_with_args(body, _args(config)),
                  comment="The compiled wheels installed on the environment, apart: the rl "
                          "stage copies what they install\nand their MANIFEST, never the "
                          "wheel files."),
            Stage(name=ENV_COMPILED, base="env", instructions=(
                Copy(sources=(f"{_COMPILED_ROOT}/",), dest="/", from_stage=COMPILED_STAGE),),
                  comment="The environment and the compiled tree, for the rl stage; a job that "
                          f"composed the tree into the\nenvironment builds it FROM env "
                          f"({COMPILED_ARG}={COMPILED_IN_ENV})."))


def _rl_stage(config: Config, plan: Plan, *, lock_sha256: str,
              local: tuple[LocalCopy, ...]) -> Stage:
    b = config.build
    ws = _rel(config, str(config.workspace))
    body: list[Instruction] = []
    globs = tuple(b.wheel_globs)
    if local:
        body.append(Comment(text="Local packages the lock installs from a path outside the "
                            "workspace directory, where it expects them."))
        body += [Copy(sources=(f"{c.source}/",), dest=f"{c.dest}/") for c in local]
    body += [
        Copy(sources=(f"{ws}/" if ws != "." else ".",), dest=f"{WORKDIR}/"),
        Comment(text="The lock still rules: this sync finds the slices' packages in place and "
                "installs only"),
        Comment(text="the local packages; --inexact keeps the compiled wheels installed "
                "above." if globs else "the local packages."),
        _sync_run(plan.final_sync_flags),
        *_post_install_steps(config, plan),
        Comment(text="Build asserts: a green build proves the stack imports; each says which "
                "it is, and the"),
        Comment(text=f"RUN writes {ASSERTS_RECORD}, so it is one layer whether kaniko "
                "builds it or takes it from its cache."),
    ]
    asserts = (*b.import_asserts, *(a for e in b.post_installs for a in e.asserts))
    body.append(_asserts_run(globs, asserts, tuple(_environment_checks(config, plan))))
    body += [
        Comment(text=f"kaniko unpacks a stage only when one of its commands is not cached; "
                f"{BUILD_ID} is new on every"),
        Comment(text="cluster build, so this RUN never is, and the attestation step finds this "
                "stage's files."),
        Comment(text="It writes no file: no layer, or the fork's empty one (the same blob on "
                "every build)."),
        Arg(name=BUILD_ID),
        Run(commands=(Shell(text=f'echo "build ${{{BUILD_ID}:-local}}: $(cat {ASSERTS_RECORD})"'),),
            uncached_fileless=True),
        Comment(text="Provenance last: a new git sha must not invalidate any layer's cache."),
        Arg(name="GITSHA"),
        Label(pairs=(
            (provenance.LABEL_GIT_SHA, "${GITSHA}"),
            (provenance.LABEL_LOCK_HASH, lock_sha256),
            (provenance.LABEL_CONFIG_HASH, config_fingerprint(config)),
            (provenance.LABEL_PLAN_FINGERPRINT, plan.fingerprint),
            (provenance.LABEL_PLAN_STEPS, str(len(plan.layers))),
            (provenance.LABEL_GENERATOR, f"gpurl {gpurl_tasks.__version__}"),
            (provenance.LABEL_OCI_REVISION, "${GITSHA}"),
            *([(provenance.LABEL_OCI_SOURCE, b.source_url)] if b.source_url else []),
        )),
    ]
    return Stage(name="rl", base=ArgImage(name=COMPILED_ARG) if globs else "env",
                 instructions=_with_args(body, _args(config)),
                 comment="The RL runtime: the environment, "
                         + ("compiled wheels, " if globs else "") + "the final sync, asserts.")


def _check_plan(plan: Plan) -> None:
    names = [layer.name for layer in plan.layers]
    if len(set(names)) != len(names) or not all(Slice.STEM.fullmatch(n) for n in names):
        raise DockerfileError(f"slice names must be unique NN-label names, not {names!r}",
                              hint="the committed slice files are damaged: run `invoke plan --repack`")
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", plan.fingerprint):
        raise DockerfileError(f"unexpected plan fingerprint {plan.fingerprint!r}",
                              hint="the committed slice files are damaged: run `invoke plan --repack`")


_URL_FIELDS = ("index_url", "builder_extra_index_url", "vllm_fork_repo")


def _check_no_credentials(config: Config) -> None:
    """A URL with user:token@ would be written into a committed file and the image history."""
    urls = [(f"build.{f.replace('_', '-')}", str(getattr(config.build, f))) for f in _URL_FIELDS]
    urls += [("build.post-install", r.split(" @ ", 1)[1].removeprefix("git+"))
             for r in config.build.post_install if " @ " in r]
    for key, value in urls:
        netloc = urlsplit(value).netloc
        if "@" in netloc:
            safe = value.replace(netloc, "***@" + netloc.rsplit("@", 1)[1])
            raise DockerfileError(
                f"{key} carries credentials ({safe})",
                hint="use a URL without user:password@; give the build its credentials another "
                     "way (kaniko: the registry auth file, uv: UV_INDEX_* environment variables)")


def _check_config(config: Config) -> None:
    b = config.build
    _check_no_credentials(config)
    image(b.base_image)  # a typo fails here, not in the middle of a cluster build


# The build ARGs a profile must pin when its recipe uses them (no generic default exists).
_PINNED_ARGS = {"TORCH_VERSION": "torch-version", "FLASH_ATTN_VERSION": "flash-attn-version",
                "VLLM_FORK_REPO": "vllm-fork-repo", "VLLM_FORK_COMMIT": "vllm-fork-commit"}


def _check_pins(used: set[str], args: dict[str, str], config: Config) -> None:
    for name, key in _PINNED_ARGS.items():
        if name in used and not args[name]:
            raise DockerfileError(
                f"build.{key} is not set but the recipe uses ${{{name}}}"
                + config.variant.note,
                hint=f"set {key} in [tool.gpurl.profiles.{config.profile}.build]")


def render_recipe(config: Config, plan: Plan, *, lock_sha256: str,
                  local: tuple[LocalCopy, ...] = ()) -> Dockerfile:
    """The whole gpu-rl (or demo) Dockerfile model for `config` and `plan`; pure. `local`: the
    path sources to copy where the lock expects them (resolved by `generate`)."""
    _check_config(config)
    _check_plan(plan)
    if not re.fullmatch(r"[0-9a-f]{64}", lock_sha256):
        raise DockerfileError(f"lock_sha256 must be 64 hex digits, not {lock_sha256!r}",
                              hint=BUG_HINT)
    args = _args(config)
    stages = (
        _base_stage(config),
        *_wheel_stages(config),
        *_env_stages(config, plan),
        *_compiled_stage(config, plan),
        _rl_stage(config, plan, lock_sha256=lock_sha256, local=local),
    )
    used = {n for s in stages for i in s.instructions if isinstance(i, Arg) for n in [i.name]}
    used |= {"BASE_IMAGE", ENV_ARG, *(("WHEEL_SOURCE",) if config.build.compiled_wheels else ()),
             *((COMPILED_ARG,) if config.build.wheel_globs else ())}
    _check_pins(used, args, config)
    global_args = tuple(Arg(name=n, default=v) for n, v in args.items() if n in used)
    header = (
        f"Generated by gpurl {gpurl_tasks.__version__} from the [tool.gpurl] profile "
        f"'{config.profile}'{config.variant.clause}"
        + " and the layer plan.",
        "Do not edit: regenerate with `invoke generate` (CI runs `invoke generate --check`).",
    )
    return Dockerfile(stages=stages, global_args=global_args, header=header)
