"""docs/config.md, the config reference, rendered from the config's declared fields (pure).

Each key's type, default and reading (size, URL, root-relative path) come from its dataclass
field in config.py; where it may appear and its `GPURL_*` variable from the cascade's own
tables. Only the one-line purpose is written here, and rendering fails when a key has none
(or a purpose names no key), so a new field cannot reach a release undocumented.
`invoke generate` writes the page and `generate --check` fails when it is stale.
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Any

from gpurl_tasks import config as cfg
from gpurl_tasks.errors import ConfigError
from gpurl_tasks.files import read_text
from gpurl_tasks.values import format_bytes

__all__ = ["PAGE", "PURPOSE", "reference_files", "render"]

PAGE = Path("docs/config.md")

PURPOSE: dict[str, str] = {
    "workspace": "the directory (inside the repository) holding the workspace's pyproject.toml and uv.lock",
    "lock": "the lock to plan, relative to the workspace",
    "backend": "where `invoke build` builds: an iris job running kaniko, or the local Docker engine",
    "python.extras": "the extras the environment's `uv sync` selects",
    "python.groups": "the dependency groups it selects",
    "python.no-dev": "leave out the dev group (`--no-dev`)",
    "target.python": "the image's Python version (the lock's markers and wheel tags are read for it)",
    "target.os": "the image's operating system",
    "target.arch": "the image's CPU architecture (x86_64: H100 nodes; aarch64: GB200 nodes)",
    "target.glibc": "the image's glibc (manylinux tags); 2.35 is Ubuntu 22.04, the CUDA base",
    "layers.cap": "the largest slice layer the planner makes",
    "layers.basis": "the size the cap applies to",
    "layers.size-overrides": "a JSON table of sizes the lock lacks (`{\"name==version\": bytes}`)",
    "layers.size-cache": "where `invoke sizes --probe` caches the sizes it fetched",
    "layers.mode": "independent: each slice its own layer wherever it sits; chain: each on the ones below",
    "layers.own-layer": "independent layers: a package at least this large gets a slice of its own",
    "layers.tail-groups": "independent layers: how many stable groups the smaller packages go into",
    "layers.compression-level": "the gzip level of the slice layers gpurl writes itself (part of "
                                "each slice's digest and cache tag: one value for every builder)",
    "layers.max-image-layers": ("the most layers each variant's image may have, the base image's "
                                "included: the planner fits the slices under it (at most 120)"),
    "registry.host": "the registry the image is pushed to",
    "registry.repository": "the image's repository on it",
    "registry.user": "the user the build pushes as (the token comes from the environment)",
    "registry.tag-prefix": "the immutable tag is PREFIX-<git sha>",
    "registry.floating-tag": "the tag that moves to the latest build (pushed on request)",
    "registry.retries": ("how often a registry request answered 5xx or 429, or whose connection "
                         "failed, is retried: by gpurl's client, and in the cluster job by its "
                         "crane wrapper and kaniko's `--push-retry`"),
    "registry.retry-max-wait": "the longest wait in seconds before a retry, a Retry-After included",
    "registry.insecure": ("plain HTTP (true), HTTPS only (false), or unset: HTTPS, plain HTTP for a loopback "
                          "host without TLS"),
    "build.dockerfile": "the generated Dockerfile of the profile's first variant",
    "build.generate": ("false: build.dockerfile is hand-written; gpurl neither plans nor writes "
                       "it, and builds it with the same kaniko job, watch, verify-layers and pin"),
    "build.build-args": "a hand-written Dockerfile's build arguments (`--build-arg`), `NAME=value` each",
    "build.context": "a hand-written Dockerfile's build context, relative to the repository root",
    "build.kaniko-script": "the generated kaniko script (another variant's: SCRIPT-VARIANT.sh)",
    "build.wheelhouse": "the directory of prebuilt compiled wheels the image installs; variants of "
                        "different ABI keys need their own (generate refuses a shared one)",
    "build.slices": "where the slice files go (<slices>/<profile>/...)",
    "build.base-image": "the image the runtime stages start from",
    "build.base-image-layers": "the base image's own layers, counted against the layer limit",
    "build.torch-version": "the torch the wheel-builder compiles against: the lock's",
    "build.cuda-tag": "the local label of the lock's torch (2.9.1+cu128)",
    "build.flash-attn-version": "the flash-attn the compiled wheels provide",
    "build.vllm-fork-repo": "the git repository of the vLLM fork",
    "build.vllm-fork-commit": "the fork's commit the wheels are built from",
    "build.vllm-version": "the fork's version (checked against what the lock's dependents require)",
    "build.cuda-arch-list": "TORCH_CUDA_ARCH_LIST of the compile, recorded in the MANIFEST's ABI key; "
                            "required when the profile has compiled wheels",
    "build.apt-retries": "every apt-get's `-o Acquire::Retries` (a stalled mirror fails, never hangs)",
    "build.apt-timeout": "every apt-get's `Acquire::http(s)::Timeout`, in seconds",
    "build.http-timeout": "UV_HTTP_TIMEOUT and PIP_DEFAULT_TIMEOUT of every stage, in seconds",
    "build.http-retries": "UV_HTTP_RETRIES and PIP_RETRIES of every stage",
    "build.source-url": "the repository the image is built from (label org.opencontainers.image.source)",
    "build.venv": "the environment's path in the image, where the launcher's python is",
    "build.wheel-source": ("prebuilt-wheelhouse (published wheels) or wheel-builder (compile with nvcc in "
                           "the build)"),
    "build.wheel-base-url": "where the prebuilt wheels and their MANIFEST are published; variants of "
                            "different ABI keys need their own (generate refuses a shared one)",
    "build.max-jobs": "parallel compile jobs of the wheel-builder",
    "build.apt-packages": "the runtime stage's apt packages",
    "build.index-url": "the package index the build installs from (empty: uv's default)",
    "build.uv-version": "the uv installed into the image",
    "build.python-downloads": "UV_PYTHON_DOWNLOADS in the image",
    "build.builder-apt-packages": "the wheel-builder stage's apt packages",
    "build.builder-extra-index-url": "an extra index for the wheel-builder's requirements",
    "build.builder-requirements": "what the wheel-builder installs before it compiles",
    "build.wheel-specs": "the `pip wheel` arguments of the compiled wheels (`./path` is copied in); "
                         "with it and wheel-globs empty the lock is the whole truth: no "
                         "wheel-builder, wheelhouse or MANIFEST anywhere",
    "build.wheel-globs": "the compiled wheels the rl stage installs with --no-deps",
    "build.import-asserts": "Python statements run in the image, one RUN each (a variant's are added)",
    "build.gpu-asserts": ("Python statements `invoke verify-gpu` runs in the image on the GPU "
                          "node, `torch` bound (the check's kernel launches)"),
    "build.import-names": "`module=distribution` where an assert imports another name than its distribution",
    "build.pip-check-allow": "the `uv pip check` conflicts tolerated (fnmatch patterns); any other fails",
    "build.post-install": "pinned requirements installed after the lock, each `req[ | assert]...`",
    "cluster.name": "the iris cluster (`iris --cluster=NAME`)",
    "cluster.controller-url": "an iris controller URL instead of the cluster name (wins when set)",
    "cluster.cpu": "CPUs of the build job",
    "cluster.memory": "memory of the build job (below 512GB the wheel packaging OOMs)",
    "cluster.disk": "ephemeral disk of the build job",
    "cluster.timeout": "the job's timeout in seconds",
    "cluster.max-retries": "iris retries of the build job",
    "cluster.task-image": "the image the job runs in (the executor is overlaid on it)",
    "cluster.cache-repo": "kaniko's layer cache repository (empty: REGISTRY_IMAGE/cache)",
    "cluster.kaniko-executor": "the kaniko executor image, pinned by digest",
    "cluster.crane-url": ("the go-containerregistry release archive the script takes crane from "
                          "(empty: v0.20.3's for target.arch)"),
    "cluster.crane-sha256": "its sha256 (set with crane-url, or neither)",
    "cluster.compression-level": ("the gzip level kaniko writes layers at (9 keeps slices within 2% of "
                                  "the plan)"),
    "cluster.snapshot-mode": "how kaniko finds a RUN's changes: full hashes contents, redo compares metadata",
    "cluster.env-source": "how the iris job makes the environment: composed (slices written by "
                          "gpurl, composed at the registry) or chain (the env-chain stage, every "
                          "slice in one kaniko layer chain)",
    "cluster.source-archives": "kaniko's and crane's source archives, for `invoke setup-kaniko`",
    "cluster.gpu-cluster": ("the iris cluster of `invoke verify-gpu`'s job (empty: the variant's "
                            "build cluster)"),
    "cluster.gpus": "the GPUs of one node the GPU check's job asks for (iris `--gpu`)",
    "cluster.gpu-type": "the GPU the job asks for, e.g. H100 (`--gpu H100x8`; empty: any)",
    "cluster.gpu-cpu": "CPUs of the GPU check's job",
    "cluster.gpu-memory": "memory of the GPU check's job",
    "cluster.gpu-timeout": "the GPU check's job timeout in seconds (iris `--timeout`)",
    "cluster.gpu-start-timeout": ("how long verify-gpu waits, beyond gpu-timeout, for the job to "
                                  "be scheduled and its image pulled"),
    "verify.hard-limit": "no pushed layer may reach this size",
    "verify.min-layers": "a pushed image needs at least this many layers",
    "verify.cap": "every layer's target (unset: layers.cap)",
    "verify.attestations": ("the image's attached SBOM and provenance: required (pin refuses an "
                            "image without them), if-present (checked when attached: images "
                            "built before gpurl attached them), or off"),
    "verify.gpu": ("the GPU verification summary `invoke verify-gpu` attaches: required (pin "
                   "refuses an image without a passing one), if-present (a failing one is "
                   "refused, none is accepted), or off"),
    "launcher.python-variable": "the launcher's variable naming the environment's python (in build.venv)",
    "launcher.path": "the launcher file the pin is written into, relative to the workspace",
    "launcher.variable": ("the variable holding the pinned image (variants of different "
                          "platforms naming one: the digest of their image index)"),
    "launcher.platform-variable": ("the variable holding this variant's own platform image "
                                   "(its manifest digest), beside an index's shared variable"),
    "launcher.table": ("the module-level dict of typed entries the pin writes into instead of "
                       "`variable` (the team's GPU_RL_IMAGES); empty: pin `variable`"),
    "launcher.table-key": ("the key of the variant's entry in the table, as a Python expression: "
                           "{arch}/{ARCH} its OCI arch, {variant}/{VARIANT} its name (a variant "
                           "may set its own `table-key`)"),
    "launcher.digest-field": "the entry's field holding the image's manifest digest (`sha256:<64 hex>`)",
    "launcher.tag-field": "the entry's field holding the image's immutable tag",
    "launcher.commit-field": "the entry's field holding the commit the image was built from",
    "launcher.commit-variable": ("the module-level variable the entries may name as their commit "
                                 "(rewritten only when every entry naming it is pinned together)"),
}


_NEEDS = {"wheels": "wheels+image", "image": "image", "none": "none"}


def _keys() -> list[tuple[str, type[Any] | None, dataclasses.Field[Any] | None]]:
    """(dotted key, its settings class, its field) for every key, top keys first."""
    keys: list[tuple[str, type[Any] | None, dataclasses.Field[Any] | None]] = [
        (k, None, None) for k in cfg._TOP_KEYS]
    for section, cls in cfg._SECTIONS.items():
        keys += [(f"{section}.{cfg._key(f.name)}", cls, f) for f in dataclasses.fields(cls)]
    return keys


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, Path | str):
        return f'"{value}"'
    return str(value)


def _default(field: dataclasses.Field[Any] | None, dotted: str) -> str:
    if field is None:
        # the top keys' defaults, as load_config applies them (backend: the Config field's)
        return {"workspace": '`"."`', "lock": '`"uv.lock"`'}.get(
            dotted, f"`{_toml(next(f.default for f in dataclasses.fields(cfg.Config) if f.name == dotted))}`")
    value: Any = field.default
    if value is None:
        return "unset"
    if cfg._key_of(field).size:
        return f"`{format_bytes(value).replace('.00', '').replace(' ', '')}`"
    return f"`{_toml(value)}`"


def _type(cls: type[Any] | None, field: dataclasses.Field[Any] | None, dotted: str) -> str:
    if field is None or cls is None:
        hints = cfg._hints(cfg.Config)
        return cfg._type_name(hints[dotted])
    key = cfg._key_of(field)
    if key.size:
        return 'a size ("4GB" or bytes)'
    name = cfg._type_name(cfg._hints(cls)[field.name])
    if key.url:
        return "an http(s) URL"
    if key.root_relative:
        return name + ", from the repository root"
    return name


def _where(dotted: str) -> str:
    places = ["top", "profile"]
    variant = [k for k, target in cfg._VARIANT_KEYS.items() if target == dotted]
    if variant:
        places.append(f"variant (`{variant[0]}`)")
    section = dotted.split(".", 1)[0]
    if section in cfg._VARIANT_TABLES:
        places.append(f"variant {section} table")
    return ", ".join(places)


def render() -> str:
    """The whole page; a ConfigError when a key has no purpose or a purpose names no key."""
    keys = _keys()
    names = [k for k, _, _ in keys]
    missing = [k for k in names if k not in PURPOSE]
    stale = [k for k in PURPOSE if k not in names]
    if missing or stale:
        raise ConfigError(f"gpurl_tasks/configdoc.py: no purpose for {missing or 'nothing'}, "
                          f"a purpose of no key: {stale or 'nothing'}",
                          hint="describe each config key in one line in PURPOSE")
    lines = [
        "# Config reference",
        "",
        "<!-- generated by `invoke generate` from gpurl_tasks/config.py; do not edit -->",
        "",
        "Every key of `[tool.gpurl]` in `pyproject.toml`. A key `SECTION.KEY` is written",
        "`KEY = ...` in a `[tool.gpurl.SECTION]` table (top) or a",
        "`[tool.gpurl.profiles.NAME.SECTION]` table (profile); the top keys directly in",
        "`[tool.gpurl]` or `[tool.gpurl.profiles.NAME]`. A variant",
        "(`[tool.gpurl.profiles.NAME.variants.VARIANT]`) sets the keys named in its column under",
        "their variant name, and any `build`, `target` or `cluster` key in its table of that",
        "name (a GB200 variant: `target.arch = \"aarch64\"`, its cluster and base image). The variable",
        "overrides the file; a task flag overrides the variable. Unknown keys are an error.",
        "Its change needs: what `invoke rebuild-needed` answers when the key alone changed",
        "(`wheels+image`: the compiled wheels and the image; `image`; `none`: not baked).",
        "",
        "| key | type | default | where | variable | its change needs | what it does |",
        "|---|---|---|---|---|---|---|",
    ]
    bakes = cfg.declared_bakes()
    for dotted, cls, field in keys:
        lines.append(f"| `{dotted}` | {_type(cls, field, dotted)} | {_default(field, dotted)} | "
                     f"{_where(dotted)} | `{cfg.environment_variable(dotted)}` | "
                     f"{_NEEDS[bakes[dotted]]} | {PURPOSE[dotted]} |")
    lines += ["", "Outside the table: `default-profile` (top only) names the profile used when",
              "neither `--profile` nor `$GPURL_PROFILE` does; the registry token is",
              "`$GPURL_REGISTRY_TOKEN`, else `$GHCR_TOKEN`, else `gh auth token`, never config.", ""]
    return "\n".join(lines)


def reference_files(config: cfg.Config) -> dict[Path, str]:
    """The page, as a file `invoke generate` writes with the first profile's first variant
    (one owner, so it is rendered and checked once), in gpurl's own repository only (a
    repository that adopts gpurl gets no docs/ it did not ask for)."""
    page = config.root / PAGE
    first_profile = cfg.load_profile_names(config.root)[:1] == (config.profile,)
    first_variant = config.variant == config.variants[0]
    owned = first_profile and first_variant and page.exists() and _is_gpurl_itself(config.root)
    return {page: render()} if owned else {}


def _is_gpurl_itself(root: Path) -> bool:
    """gpurl's own repository (its pyproject's project is gpurl): a user's docs/config.md,
    whatever it holds, is never gpurl's to write."""
    text = read_text(root / "pyproject.toml", what="pyproject.toml", error=ConfigError)
    project = tomllib.loads(text).get("project")
    return isinstance(project, dict) and project.get("name") == "gpurl"
