"""The build config: one explicit cascade resolved in one function.

defaults (the dataclasses below) -> [tool.gpurl] in pyproject.toml -> the selected profile
[tool.gpurl.profiles.NAME] -> environment variables GPURL_<SECTION>_<KEY> -> task flags.
The result is frozen. Unknown keys fail with a "did you mean" hint rather than being ignored,
because a misspelled cap silently falling back to a default is exactly the kind of quiet
failure this tool exists to prevent.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import hashlib
import json
import os
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

from gpurl_tasks import values
from gpurl_tasks.errors import ConfigError, shown
from gpurl_tasks.files import read_text
from gpurl_tasks.values import parse_size

__all__ = [
    "CRANE_ARCHIVES",
    "DEFAULT_LAYOUT",
    "DEFAULT_VARIANT",
    "OCI_ARCH",
    "OTHER_VARIABLES",
    "SHARED",
    "Arch",
    "Bakes",
    "BuildSettings",
    "ClusterSettings",
    "Config",
    "LauncherSettings",
    "LayerMode",
    "LayerSettings",
    "Layout",
    "PythonSelection",
    "RegistrySettings",
    "TargetSpec",
    "Variant",
    "VerifySettings",
    "baked_values",
    "config_fingerprint",
    "declared_bakes",
    "environment_value",
    "environment_variable",
    "key_doc",
    "load_committed_config",
    "load_config",
    "load_profile_names",
    "platform_groups",
    "profile_from_env",
    "sets_config",
    "unknown_variables",
]

_KW = {"frozen": True, "kw_only": True}

Backend = Literal["iris", "local"]
SizeBasis = Literal["compressed", "installed"]
# every slice its own layer wherever it sits (the one mode: "stacked" was retired)
LayerMode = Literal["independent"]
WheelSource = Literal["prebuilt-wheelhouse", "wheel-builder"]
PythonDownloads = Literal["automatic", "manual", "never"]
SnapshotMode = Literal["full", "redo", "time"]  # kaniko --snapshot-mode
EnvSource = Literal["composed", "chain"]  # how the cluster build makes the environment
# What verify-layers asks of an image's attached SBOM and provenance (attest/check.py)
Attestations = Literal["required", "if-present", "off"]
# What pin asks of an image's GPU verification summary (`invoke verify-gpu`): the same three
GpuVerification = Literal["required", "if-present", "off"]
Arch = Literal["x86_64", "aarch64"]  # the image platforms gpurl builds (H100 nodes, GB200 nodes)
# Each arch's OCI platform name (an image config's `architecture`, `--platform linux/...`)
OCI_ARCH: dict[str, str] = {"x86_64": "amd64", "aarch64": "arm64"}
# crane v0.20.3's release archive per arch and its sha256 (the release's checksums.txt): the
# default of cluster.crane-url / crane-sha256 for a variant of that target.arch
_CRANE_RELEASE = "https://github.com/google/go-containerregistry/releases/download/v0.20.3/"
CRANE_ARCHIVES: dict[str, tuple[str, str]] = {
    "x86_64": (f"{_CRANE_RELEASE}go-containerregistry_Linux_x86_64.tar.gz",
               "36c67a932f489b3f2724b64af90b599a8ef2aa7b004872597373c0ad694dc059"),
    "aarch64": (f"{_CRANE_RELEASE}go-containerregistry_Linux_arm64.tar.gz",
                "d2235f7779cd39c6e40f43701d2512c997409f629fb53e621ede0d57d3f995e2"),
}
# What a change of a key asks of the pinned image (rebuild-needed): the compiled wheels and the
# image rebuilt ("wheels"), the image rebuilt ("image"), or nothing ("none": the key does not
# reach what the image holds, e.g. the job's resources, the verify rules, where files live).
Bakes = Literal["wheels", "image", "none"]


@dataclasses.dataclass(frozen=True, slots=True)
class _Key:
    """How one config key is read, declared on its field: a size ("4GB" or bytes), an
    http(s) URL, a path relative to the repository root (other paths are relative to the
    workspace), a path that must stay inside the repository (it is written, or copied into
    the build context, or becomes a .dockerignore rule), and the grammar its value must meet
    because it is written as syntax into a generated artifact (values.py); and what a change
    of it bakes (`Bakes`), which every key declares (rebuild-needed decides from it)."""

    bakes: Bakes
    size: bool = False
    url: bool = False
    root_relative: bool = False
    inside: bool = False  # a path that must stay inside the repository (symlinks resolved)
    check: values.Check | None = None


def _field(default: Any, *, doc: str, bakes: Bakes, size: bool = False, url: bool = False,
           root_relative: bool = False, inside: bool = False,
           check: values.Check | None = None) -> Any:
    """A config field with its reading, its class and its description (`doc`, the one
    docs/config.md shows) declared next to it (read back by `_key_of` and `key_doc`)."""
    key = _Key(bakes=bakes, size=size, url=url, root_relative=root_relative, inside=inside,
               check=check)
    return dataclasses.field(default=default, metadata={"gpurl": key, "doc": doc})


def key_doc(field: dataclasses.Field[Any]) -> str:
    """The description a config key's field declares (`doc`): the only one there is."""
    doc = field.metadata.get("doc")
    if not isinstance(doc, str) or not doc:  # a declaration error in this file, not a user's
        raise TypeError(f"config field {field.name!r} has no doc")
    return doc


@dataclasses.dataclass(frozen=True, slots=True)
class Setting:
    """One config value as read, before it is typed: where it came from (errors name the
    place), and whether it is `text` to parse (an environment variable or a flag) or a TOML
    value that must already have its type."""

    value: Any
    where: str
    text: bool = False


Settings = Mapping[str, Setting]  # dotted key -> its setting, as merged so far


@dataclasses.dataclass(**_KW)
class PythonSelection:
    """What `uv sync` selects: the extras and groups of the environment the slices install."""

    extras: tuple[str, ...] = _field((), check=values.each(values.package_name), bakes="image",
                                     doc="the extras the environment's `uv sync` selects")
    groups: tuple[str, ...] = _field((), check=values.each(values.package_name), bakes="image",
                                     doc="the dependency groups it selects")
    no_dev: bool = _field(True, bakes="image", doc="leave out the dev group (`--no-dev`)")


@dataclasses.dataclass(**_KW)
class TargetSpec:
    """The platform the image runs on (not the machine running this tool)."""

    python: str = _field("3.12", check=values.version, bakes="wheels",
                         doc="the image's Python version (the lock's markers and wheel tags are "
                             "read for it)")
    os: str = _field("linux", bakes="wheels", doc="the image's operating system")
    arch: Arch = _field("x86_64", bakes="wheels",
                        doc="the image's CPU architecture (x86_64: H100 nodes; aarch64: GB200 "
                            "nodes)")
    glibc: str = _field("2.35", check=values.glibc, bakes="image",
                        doc="the image's glibc (manylinux tags); 2.35 is Ubuntu 22.04, the CUDA "
                            "base")

    @property
    def platform(self) -> str:
        """The OCI platform (`linux/amd64`, `linux/arm64`): kaniko's and crane's `--platform`,
        an image index entry's."""
        return f"{self.os}/{OCI_ARCH[self.arch]}"


@dataclasses.dataclass(**_KW)
class _Packing:
    """How the planner packs, declared once: config keys of `LayerSettings` and the fields
    of the planner's `Layout`."""

    mode: LayerMode = _field("independent", bakes="image",
                             doc="independent: each slice its own layer wherever it sits (a bump "
                                 "costs the slices that hold a changed package); the one mode "
                                 "(\"stacked\" was retired)")
    own_layer: int = _field(20 * 10**6, size=True, bakes="image",
                            doc="independent layers: a package at least this large gets a slice "
                                "of its own")
    tail_groups: int = _field(32, bakes="image",
                              doc="independent layers: how many stable groups the smaller "
                                  "packages go into (among several variants, each variant's own "
                                  "packages: a quarter as many)")


@dataclasses.dataclass(**_KW)
class LayerSettings(_Packing):
    """How the Python environment is split into layers."""

    cap: int = _field(4 * 10**9, size=True, bakes="image",
                      doc="the largest slice layer the planner makes")
    basis: SizeBasis = _field("compressed", bakes="image",
                              doc="the size the cap applies to: the packages' compressed or "
                                  "installed bytes")
    size_overrides: Path | None = _field(None, root_relative=True, bakes="image",
                                         doc='a JSON table of sizes the lock lacks (`{"name" or '
                                             '"name==version": compressed bytes}`)')
    size_cache: Path | None = _field(None, root_relative=True, bakes="image",
                                     doc="where `invoke sizes --probe` caches the sizes it "
                                         "fetched")
    # zlib in writer/blob.py; 6 measured on the heavy torch slice: 1 took 26 s and was 5.4%
    # larger, 9 took 1.9x as long for 0.2% less (docs/build.md)
    slice_gzip_level: int = _field(6, check=values.gzip_level, bakes="image",
                                   doc="the gzip level of the slice layers gpurl's own writer "
                                       "makes, on either backend: part of each slice's digest "
                                       "and cache key, so one value for every builder")
    # containerd's erofs snapshotter mounts about 100 (containerd#12662); 120 is the planning
    # ceiling (plan/layerlimit.CEILING: the builders add empty layers the Dockerfile cannot show)
    max_image_layers: int = _field(100, check=values.between(1, 120, "a number of image layers"),
                                   bakes="image",
                                   doc="the most layers each variant's image may have, the base "
                                       "image's included: the planner fits the slices under it "
                                       "(at most 120)")

    @property
    def layout(self) -> Layout:
        return Layout(**{f.name: getattr(self, f.name) for f in dataclasses.fields(_Packing)})


@dataclasses.dataclass(**_KW)
class Layout(_Packing):
    """How the planner packs: the layer mode and, for independent layers, its thresholds."""

    # the most slices an image may have (None: no budget): independent layers lower the groups,
    # then raise the own-layer threshold, until the packing fits (planner.fit_layout); not a
    # config key, the generator derives it from layers.max-image-layers
    max_slices: int | None = None


DEFAULT_LAYOUT = Layout()


@dataclasses.dataclass(**_KW)
class RegistrySettings:
    """Where the image is pushed and how its tags are named."""

    host: str = _field("ghcr.io", check=values.registry_host, bakes="none",
                       doc="the registry the image is pushed to")
    repository: str = _field("open-thoughts/openthoughts-agent", check=values.repository,
                             bakes="none", doc="the image's repository on it")
    user: str = _field("", check=values.optional(values.plain_name), bakes="none",
                       doc="the user the build pushes as (the token comes from the environment)")
    tag_prefix: str = _field("gpu-rl", check=values.plain_name, bakes="none",
                             doc="the immutable tag is PREFIX-<git sha>")
    floating_tag: str = _field("gpu-rl", check=values.plain_name, bakes="none",
                               doc="the tag that moves to the latest build (pushed on request)")
    insecure: bool | None = _field(None, bakes="none",
                                   doc="plain HTTP (true), HTTPS only (false), or unset: HTTPS, "
                                       "plain HTTP for a loopback host without TLS, as dockerd "
                                       "and crane do (oci/scheme.py)")
    retries: int = _field(3, check=values.between(0, 20, "a number of retries"), bakes="none",
                          doc="how often a registry request answered 5xx or 429, or whose "
                              "connection failed, is retried with backoff (writer/retry.py): by "
                              "gpurl's client, and in the cluster job by its crane calls "
                              "(writer/crane.py) and kaniko's `--push-retry`")
    retry_max_wait: int = _field(30, check=values.between(0, 600, "seconds"), bakes="none",
                                 doc="the longest wait in seconds before a retry, a Retry-After "
                                     "included")

    @property
    def image(self) -> str:
        """`host/repository`, the name tags and digests hang off."""
        return f"{self.host}/{self.repository}"

    def immutable_reference(self, git_sha: str, *, prefix: str | None = None) -> str:
        """`host/repository:PREFIX-<git sha>`: the one spelling of the tag a build pushes and
        pin accepts (each variant has its own prefix). `git_sha` is a source id: the short sha,
        or `SHA-dirty-<diff hash>` for a tree with uncommitted edits."""
        return f"{self.image}:{prefix or self.tag_prefix}-{git_sha}"

    def is_immutable_tag(self, tag: str, *, prefix: str | None = None) -> bool:
        """`tag` is spelled like an immutable_reference's tag."""
        return re.fullmatch(rf"{re.escape(prefix or self.tag_prefix)}-{values.SOURCE_ID_PATTERN}",
                            tag) is not None


@dataclasses.dataclass(**_KW)
class BuildSettings:
    """Inputs of the generated Dockerfile (its ARG defaults) and of the builders.

    The defaults are generic: no compiled wheels, no harbor, no asserts beyond the final sync.
    A profile's own pins (the vLLM fork and its version, flash-attn, torch, harbor) live in its
    `[tool.gpurl.profiles.NAME.build]` table, and a variant may override any of them in
    `[tool.gpurl.profiles.NAME.variants.VARIANT.build]`: a fork bump is a config edit.
    """

    dockerfile: Path = _field(Path("docker/Dockerfile.gpu-rl"), root_relative=True, inside=True,
                              bakes="none",
                              doc="the variant's Dockerfile: generated, or the team's own with "
                                  "build.generate = false (a variant but the first: "
                                  "DOCKERFILE-VARIANT unless it sets its own)")
    # rebuild-needed reads a hand-written file, what its COPY/ADD take and build.build-args
    generate: bool = _field(True, bakes="none",
                            doc="false: build.dockerfile is hand-written; gpurl neither plans nor "
                                "writes it, and builds it with the same kaniko job, watch, "
                                "verify-layers and pin")
    build_args: tuple[str, ...] = _field((), check=values.each(values.build_arg), bakes="image",
                                         doc="a hand-written Dockerfile's build arguments "
                                             "(`--build-arg`), `NAME=value` each")
    context: Path = _field(Path("."), root_relative=True, inside=True, bakes="image",
                           doc="a hand-written Dockerfile's build context, relative to the "
                               "repository root")
    wheelhouse: Path = _field(Path("docker/wheelhouse"), root_relative=True, inside=True,
                              bakes="image",
                              doc="the directory of prebuilt compiled wheels the image installs; "
                                  "variants of different ABI keys need their own (generate "
                                  "refuses a shared one)")
    slices: Path = _field(Path("docker/layers"), root_relative=True, inside=True, bakes="none",
                          doc="where the slice files go (<slices>/<profile>/...)")
    base_image: str = _field("nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04",
                             check=values.image_reference, bakes="wheels",
                             doc="the image the runtime stages start from")
    # counted with the Dockerfile's by plan/layerlimit.py
    base_image_layers: int = _field(20, bakes="image",
                                    doc="the base image's own layers, counted against the layer "
                                        "limit (the CUDA devel base has about 20; a local "
                                        "single-layer base, 1)")
    torch_version: str = _field("", check=values.version, bakes="wheels",
                                doc="the torch the wheel-builder compiles against: the lock's")
    cuda_tag: str = _field("cu128", check=values.plain_name, bakes="wheels",
                           doc="the local label of the lock's torch (2.9.1+cu128)")
    flash_attn_version: str = _field("", check=values.version, bakes="wheels",
                                     doc="the flash-attn the compiled wheels provide")
    vllm_fork_repo: str = _field("", check=values.git_url, bakes="wheels",
                                 doc="the git repository of the vLLM fork")
    vllm_fork_commit: str = _field("", check=values.commit, bakes="wheels",
                                   doc="the fork's commit the wheels are built from")
    vllm_version: str = _field("", check=values.version, bakes="wheels",
                               doc="the fork's version (checked against what the lock's "
                                   "dependents require)")
    cuda_arch_list: str = _field("", check=values.optional(values.cuda_arch_list), bakes="wheels",
                                 doc='TORCH_CUDA_ARCH_LIST of the compile ("8.0;9.0;10.0"), '
                                     "recorded in the MANIFEST's ABI key; required when the "
                                     "profile has compiled wheels")
    wheel_source: WheelSource = _field("prebuilt-wheelhouse", bakes="wheels",
                                       doc="prebuilt-wheelhouse (published wheels) or "
                                           "wheel-builder (compile with nvcc in the build: the "
                                           "slow path)")
    wheel_base_url: str = _field("", check=values.url, bakes="image",
                                 doc="where the prebuilt wheels and their MANIFEST are published; "
                                     "variants of different ABI keys need their own (generate "
                                     "refuses a shared one)")
    max_jobs: int = _field(8, bakes="none", doc="parallel compile jobs of the wheel-builder")
    source_url: str = _field("", check=values.optional(values.url), bakes="image",
                             doc="the repository the image is built from (label "
                                 "org.opencontainers.image.source; empty: none)")
    apt_packages: tuple[str, ...] = _field(
        ("ca-certificates", "curl", "git", "ibverbs-providers", "ibverbs-utils", "libibverbs1",
         "librdmacm1", "rdma-core"), check=values.each(values.apt_package), bakes="image",
        doc="the runtime stage's apt packages (the InfiniBand verbs userspace is added always)")
    index_url: str = _field("", check=values.optional(values.url), bakes="image",
                            doc="the package index the build installs from (empty: uv's default)")
    # Bounded network waits in every stage: a stalled mirror once left a 48-core job alive
    # with no output.
    apt_retries: int = _field(3, bakes="none",
                              doc="every apt-get's `-o Acquire::Retries` (a stalled mirror fails, "
                                  "never hangs)")
    apt_timeout: int = _field(60, bakes="none",
                              doc="every apt-get's `Acquire::http(s)::Timeout`, in seconds")
    http_timeout: int = _field(600, bakes="none",
                               doc="UV_HTTP_TIMEOUT and PIP_DEFAULT_TIMEOUT of every stage, in "
                                   "seconds")
    http_retries: int = _field(5, bakes="none",
                               doc="UV_HTTP_RETRIES and PIP_RETRIES of every stage")
    venv: str = _field("/opt/venv", check=values.image_path, bakes="image",
                       doc="the environment's path in the image (UV_PROJECT_ENVIRONMENT, "
                           "VIRTUAL_ENV, PATH), where the launcher's python is")
    uv_version: str = _field("0.13.9", check=values.version, bakes="image",
                             doc="the uv installed into the image (pip-installed into /opt/uv)")
    python_downloads: PythonDownloads = _field("automatic", bakes="image",
                                               doc="UV_PYTHON_DOWNLOADS in the image: "
                                                   "automatic, manual or never")
    builder_apt_packages: tuple[str, ...] = _field(("build-essential", "git", "ninja-build"),
                                                   check=values.each(values.apt_package),
                                                   bakes="wheels",
                                                   doc="the wheel-builder stage's apt packages")
    builder_extra_index_url: str = _field("", check=values.optional(values.url), bakes="wheels",
                                          doc="an extra index for the wheel-builder's "
                                              "requirements")
    builder_requirements: tuple[str, ...] = _field((), check=values.each(values.requirement),
                                                   bakes="wheels",
                                                   doc="what the wheel-builder installs before "
                                                       "it compiles")
    wheel_specs: tuple[str, ...] = _field((), check=values.each(values.wheel_spec), bakes="wheels",
                                          doc="the `pip wheel` arguments of the compiled wheels "
                                              "(`./path` is copied in); with it and wheel-globs "
                                              "empty the lock is the whole truth: no "
                                              "wheel-builder, wheelhouse or MANIFEST anywhere")
    wheel_globs: tuple[str, ...] = _field((), check=values.each(values.wheel_glob), bakes="image",
                                          doc="the compiled wheels the rl stage installs with "
                                              "--no-deps")
    import_asserts: tuple[str, ...] = _field((), check=values.each(values.one_line), bakes="image",
                                             doc="Python statements the build runs in the image, "
                                                 "one `python -c` each in one RUN (a failing one "
                                                 "names itself); a variant's `import-asserts` are "
                                                 "added to these")
    # generate checks every assert against the variant's closure
    import_names: tuple[str, ...] = _field((), bakes="none",
                                           doc="`module=distribution` where an assert imports "
                                               "another name than its distribution's "
                                               "(yaml=pyyaml)")
    # Their dependencies are resolved by `lock-post-install` into post-install.pins (the plan's
    # last slice), else at build time; the image proves it holds exactly the lock's closure
    # plus these and their dependencies (recipe.py).
    post_install: tuple[str, ...] = _field((), check=values.each(values.post_install),
                                           bakes="image",
                                           doc="requirements the lock does not hold (their "
                                               "dependencies pinned by `lock-post-install`, "
                                               "else resolved at build time), each pinned "
                                               "(`name==1.2.3`, or "
                                               "`name[extra] @ git+URL@<commit>`) with optional "
                                               "asserts after ` | `: `req[ | assert]...`")
    pip_check_allow: tuple[str, ...] = _field((), check=values.each(values.one_line),
                                              bakes="none",
                                              doc="the `uv pip check` conflicts tolerated, each "
                                                  "an fnmatch pattern of one line it prints; "
                                                  "any other fails")
    gpu_asserts: tuple[str, ...] = _field((), check=values.each(values.one_line), bakes="none",
                                          doc="Python statements `invoke verify-gpu` runs in the "
                                              "image on the GPU node, `torch` bound (the check's "
                                              "kernel launches)")

    @property
    def post_installs(self) -> tuple[values.PostInstall, ...]:
        return tuple(values.post_install_entry(e, "build.post-install") for e in self.post_install)

    @property
    def compiled_wheels(self) -> bool:
        """The image installs compiled wheels (wheel-specs or wheel-globs set). Without any, the
        lock is the whole truth: no wheel-builder, wheelhouse, MANIFEST or swap anywhere."""
        return bool(self.wheel_specs or self.wheel_globs)


@dataclasses.dataclass(**_KW)
class ClusterSettings:
    """The iris job that runs kaniko (runbook sections 0.5 and 3).

    The cluster is named (`iris --cluster=NAME`, the default) or reached at a controller URL
    (`iris --controller-url=URL`, e.g. a local iris cluster); the URL wins when both are set,
    and a `--cluster` flag on a task wins over both.
    """

    name: str = _field("cw-us-east-02a", check=values.plain_name, bakes="none",
                       doc="the iris cluster (`iris --cluster=NAME`)")
    controller_url: str = _field("", url=True, bakes="none",
                                 doc="an iris controller URL (e.g. http://127.0.0.1:18765) "
                                     "instead of the cluster name (wins when set)")
    # the defaults are the composed job's measured peaks (benchmarks/kaniko_scale.py, `nox -s
    # bench-kaniko`: the heavy profile's cold build on both executors, sampled from the job
    # container's cgroup; warm and bumped builds do less) times 2, rounded up to a power of
    # two; the runbook asked for 48 CPUs, 512GB and 400GB
    cpu: int = _field(8, bakes="none",
                      doc="CPUs of the build job: the composed job's parallel part is gpurl's "
                          "slice writer, at most 8 threads; kaniko's steps use about one "
                          "(benchmarks/REPORT.md, \"Real kaniko\")")
    memory: str = _field("32GB", check=values.resource_size, bakes="none",
                         doc="memory of the build job: twice the composed job's measured peak "
                             "(benchmarks/REPORT.md, \"Real kaniko\"), rounded up to a power "
                             "of two; `doctor` scales the need with the environment's installed "
                             "bytes and says so above 4x it; a build refuses below the measured "
                             "peak, or below 512GB where kaniko snapshots the environment "
                             "(env-source chain, wheel-source wheel-builder)")
    disk: str = _field("32GB", check=values.resource_size, bakes="none",
                       doc="ephemeral disk of the build job: twice the composed job's peak "
                           "disk (its writable layer, sampled through the whole job, the "
                           "environment the final stage unpacks included; "
                           "benchmarks/REPORT.md, \"Real kaniko\"), rounded up to a power of "
                           "two; it grows with the environment's installed bytes")
    timeout: int = _field(18000, bakes="none", doc="the job's timeout in seconds")
    max_retries: int = _field(0, bakes="none", doc="iris retries of the build job")
    task_image: str = _field("docker.io/library/python:3.12-slim-bookworm",
                             check=values.image_reference, bakes="none",
                             doc="the image the job runs in: bash, tar, coreutils and python3 "
                                 "3.11 or newer, which runs gpurl's steps before the executor "
                                 "(overlaid on it) first runs")
    cache_repo: str = _field("", check=values.optional(values.image_reference), bakes="none",
                             doc="the layer cache repository: kaniko's cache and the slice "
                                 "images (empty: REGISTRY_IMAGE/cache)")
    # `crane digest IMAGE:TAG` refreshes it. Upstream kaniko (gcr.io/kaniko-project/executor)
    # was archived in June 2025; v1.23.2 is its last release. The maintained fork publishes
    # ghcr.io/osscontainertools/kaniko: point this key at one of its digests to move.
    kaniko_executor: str = _field("gcr.io/kaniko-project/executor@sha256:"
                                  "9e69fd4330ec887829c780f5126dd80edc663df6def362cd22e79bcdf00ac53f",
                                  bakes="image", doc="the kaniko executor image, pinned by digest")
    # Refresh crane-url and crane-sha256 together from the release's checksums.txt.
    crane_url: str = _field("", url=True, bakes="none",
                            doc="the go-containerregistry release archive (`crane` at its top) "
                                "the script overlays the executor with (empty: v0.20.3's for "
                                "target.arch)")
    crane_sha256: str = _field("", check=values.optional(values.sha256_hex), bakes="none",
                               doc="its sha256 (set with crane-url, or neither)")
    # go-containerregistry's default is BestSpeed (1): the demo's slices came out 9-22% over
    # the plan; at 9 its MB-sized ones were within 2% (docs/build.md)
    kaniko_gzip_level: int = _field(9, check=values.gzip_level, bakes="image",
                                    doc="the gzip level of the layers kaniko writes (its "
                                        "`--compression-level`): env-base, the final stage, and "
                                        "the env-chain slices; never the slices gpurl writes "
                                        "(layers.slice-gzip-level)")
    snapshot_mode: SnapshotMode = _field("full", bakes="none",
                                         doc="kaniko's `--snapshot-mode`, how it finds a RUN's "
                                             "changes: full hashes every file's content, redo "
                                             "compares size, mtime and mode, time compares "
                                             "mtime only (benchmarks/REPORT.md compares full and "
                                             "redo)")
    env_source: EnvSource = _field("composed", bakes="image",
                                   doc="how the iris job makes the environment: composed (each "
                                       "slice written by gpurl's layer writer on env-base, "
                                       "composed at the registry: one blob per slice on every "
                                       "builder) or chain (the env-chain stage, every slice in "
                                       "one kaniko layer chain)")
    # their names and sha256 are pinned in gpurl_tasks/local/builder-sources.toml
    source_archives: Path = _field(Path("../shared/third_party"), root_relative=True,
                                   bakes="none",
                                   doc="where kaniko's and crane's release source archives are, "
                                       "for `invoke setup-kaniko`")
    gpu_cluster: str = _field("", check=values.optional(values.plain_name), bakes="none",
                              doc="the iris cluster of `invoke verify-gpu`'s job (empty: the "
                                  "variant's build cluster, its name or controller-url)")
    gpus: int = _field(8, check=values.between(1, 16, "GPUs of one node"), bakes="none",
                       doc="the GPUs of one node the GPU check's job asks for (iris `--gpu`)")
    gpu_type: str = _field("", check=values.optional(values.plain_name), bakes="none",
                           doc="the GPU the job asks for, e.g. H100 (`--gpu H100x8`; empty: any)")
    gpu_cpu: int = _field(16, bakes="none", doc="CPUs of the GPU check's job")
    gpu_memory: str = _field("128GB", check=values.resource_size, bakes="none",
                             doc="memory of the GPU check's job")
    gpu_timeout: int = _field(3600, bakes="none",
                              doc="the GPU check's job timeout in seconds (iris `--timeout`)")
    gpu_start_timeout: int = _field(1800, bakes="none",
                                    doc="how long verify-gpu waits, beyond gpu-timeout, for the "
                                        "job to be scheduled and its image pulled")


@dataclasses.dataclass(**_KW)
class VerifySettings:
    """Rules a pushed image must meet before it may be pinned."""

    hard_limit: int = _field(8 * 10**9, size=True, bakes="none",
                             doc="no pushed layer may reach this size")
    min_layers: int = _field(20, bakes="none", doc="a pushed image needs at least this many layers")
    cap: int | None = _field(None, size=True, bakes="none",
                             doc="every layer's target (unset: layers.cap; a small demo cap is "
                                 "for sync layers)")
    attestations: Attestations = _field("required", bakes="none",
                                        doc="the image's attached SBOM and provenance: required "
                                            "(pin refuses an image without them; both build "
                                            "paths attach them), if-present (checked when "
                                            "attached: images built before gpurl attached "
                                            "them), or off")
    gpu: GpuVerification = _field("if-present", bakes="none",
                                  doc="the GPU verification summary `invoke verify-gpu` "
                                      "attaches: required (pin refuses an image without a "
                                      "passing one), if-present (a failing one is refused, none "
                                      "is accepted), or off (not read)")


@dataclasses.dataclass(**_KW)
class LauncherSettings:
    """The file and variable that hold the pinned image digest (path relative to workspace)."""

    path: Path = _field(Path("cloud/iris/launch_rl_iris.py"), inside=True, bakes="none",
                        doc="the launcher file the pin is written into, relative to the "
                            "workspace")
    variable: str = _field("DEFAULT_RL_DOCKER_IMAGE", check=values.identifier, bakes="none",
                           doc="the variable holding the pinned image (variants of different "
                               "platforms naming one: the digest of their image index)")
    platform_variable: str = _field("", check=values.optional(values.identifier), bakes="none",
                                    doc="the variable holding this variant's own platform image "
                                        "(its manifest digest), beside an index's shared "
                                        "variable; unset: no per-platform pin")
    python_variable: str = _field("RL_PYTHON", check=values.identifier, bakes="none",
                                  doc="the launcher's variable naming the environment's python "
                                      "(or its directory): generate and pin refuse a path "
                                      "outside build.venv")
    # launcher/table.py: e.g. GPU_RL_IMAGES = {(ImageArchitecture.AMD64, ImageVariant.STANDARD):
    # GpuRlImage(digest=..., tag=..., source_commit=...), ...}
    table: str = _field("", check=values.optional(values.identifier), bakes="none",
                        doc="the module-level dict of typed entries the pin writes into instead "
                            "of `variable` (the team's GPU_RL_IMAGES); empty: pin `variable`")
    table_key: str = _field("(ImageArchitecture.{ARCH}, ImageVariant.{VARIANT})",
                            check=values.one_line, bakes="none",
                            doc="the key of the variant's entry in the table, as a Python "
                                "expression: {arch}/{ARCH} its OCI arch, {variant}/{VARIANT} its "
                                "name (a variant may set its own `table-key`)")
    digest_field: str = _field("digest", check=values.identifier, bakes="none",
                               doc="the entry's field holding the image's manifest digest "
                                   "(`sha256:<64 hex>`)")
    tag_field: str = _field("tag", check=values.identifier, bakes="none",
                            doc="the entry's field holding the image's immutable tag")
    commit_field: str = _field("source_commit", check=values.identifier, bakes="none",
                               doc="the entry's field holding the commit the image was built "
                                   "from")
    commit_variable: str = _field("SOURCE_COMMIT", check=values.optional(values.identifier),
                                  bakes="none",
                                  doc="the module-level variable the entries may name as their "
                                      "commit (source_commit=SOURCE_COMMIT): rewritten only "
                                      "when every entry naming it is pinned together")


@dataclasses.dataclass(**_KW)
class Variant:
    """One image of a profile, with every setting a profile's images may differ in: what its
    `uv sync` selects, its build pins and Dockerfile (`build`), its tag prefix
    and floating tag (`registry`), the launcher variable its pin goes to (`launcher`), and
    where its slice files live. Every profile has at least one: a profile that declares none
    has its implicit default (`declared` False), whose files are named as the profile's.
    Resolved once, where the config is read: `_resolve_variant` (a declared one, its defaults
    from `_own_image`) or `_implicit_variant`."""

    name: str
    declared: bool
    python: PythonSelection
    build: BuildSettings
    registry: RegistrySettings
    launcher: LauncherSettings
    target: TargetSpec
    cluster: ClusterSettings
    slices: Path  # its own committed slice files (build.slices/PROFILE[/VARIANT])
    # the slices the profile's variants of its platform share: build.slices/PROFILE/shared for
    # the first variant's platform, build.slices/PROFILE/shared-ARCH for another (their bytes differ)
    shared_slices: Path

    @property
    def crane_archive(self) -> tuple[str, str]:
        """(url, sha256) of the crane archive its job fetches: the configured one, else the
        pinned release archive of its target.arch."""
        cluster = self.cluster
        return ((cluster.crane_url, cluster.crane_sha256) if cluster.crane_url
                else CRANE_ARCHIVES[self.target.arch])

    @property
    def table_key(self) -> str:
        """The key of its entry in launcher.table, as `ast.unparse` spells it (so spacing and
        quotes in the module do not matter): launcher.table-key with its placeholders filled."""
        arch, name = OCI_ARCH[self.target.arch], self.name.replace("-", "_")
        text = self.launcher.table_key
        for placeholder, value in (("{arch}", arch), ("{ARCH}", arch.upper()),
                                   ("{variant}", name), ("{VARIANT}", name.upper())):
            text = text.replace(placeholder, value)
        try:
            return ast.unparse(ast.parse(text.strip(), mode="eval").body)
        except SyntaxError:
            raise ConfigError(f"launcher.table-key {text!r}{self.note} is not a Python "
                              "expression", hint='write the entry\'s key as the module does, e.g. '
                              '"(ImageArchitecture.{ARCH}, ImageVariant.{VARIANT})"') from None

    @property
    def shown(self) -> str:
        """The name messages and JSON show: empty for the implicit default."""
        return self.name if self.declared else ""

    @property
    def note(self) -> str:
        """` (variant 'NAME')` for an error about one variant; empty for the implicit one."""
        return f" (variant {self.name!r})" if self.declared else ""

    @property
    def clause(self) -> str:
        """`, variant 'NAME',` after the profile's name in prose; empty for the implicit one."""
        return f", variant {self.name!r}," if self.declared else ""


DEFAULT_VARIANT = "default"  # the name of the implicit variant of a profile that declares none


@dataclasses.dataclass(**_KW)
class Config:
    """The whole resolved config, for one of the profile's variants; paths are absolute.

    A profile may declare variants ([tool.gpurl.profiles.NAME.variants.VARIANT]): images of one
    workspace with other extras/groups or another platform, each with its own Dockerfile, tag
    prefix and launcher variable; one that declares none has one implicit variant. The config
    is resolved for one of them (`variant`, default: the first): `python`, `build`,
    `registry`, `launcher`, `target` and `cluster` are read through it, so no copy is kept in
    step. `variants` holds them all, in file order; `for_variant` gives the config of another.
    """

    root: Path
    profile: str
    # the top keys (their defaults: _top_settings)
    workspace: Path = dataclasses.field(metadata={
        "doc": "the directory (inside the repository) holding the workspace's pyproject.toml "
               "and uv.lock"})
    lock: Path = dataclasses.field(metadata={"doc": "the lock to plan, relative to the workspace"})
    variant: Variant
    variants: tuple[Variant, ...]
    backend: Backend = dataclasses.field(default="iris", metadata={
        "doc": "where `invoke build` builds: an iris job running kaniko, or the local Docker "
               "engine"})
    layers: LayerSettings = LayerSettings()
    verify: VerifySettings = VerifySettings()

    def planned(self) -> Config:
        """This config, whose Dockerfile gpurl plans from the lock; a hand-written one's
        (build.generate = false) is refused in one line: there is nothing to plan or size."""
        if not self.build.generate:
            path = self.build.dockerfile.relative_to(self.root).as_posix()
            raise ConfigError(f"profile {self.profile!r} builds the hand-written {path} "
                              "(build.generate = false): gpurl plans no layers for it",
                              hint="build it on the cluster (`invoke build`); verify-layers "
                                   "checks its layers once pushed")
        return self

    @property
    def target(self) -> TargetSpec:
        return self.variant.target

    @property
    def cluster(self) -> ClusterSettings:
        return self.variant.cluster

    @property
    def python(self) -> PythonSelection:
        return self.variant.python

    @property
    def build(self) -> BuildSettings:
        return self.variant.build

    @property
    def registry(self) -> RegistrySettings:
        return self.variant.registry

    @property
    def launcher(self) -> LauncherSettings:
        return self.variant.launcher

    def variant_named(self, name: str) -> Variant:
        """The profile's variant `name` (the implicit one's name is DEFAULT_VARIANT)."""
        found = [v for v in self.variants if v.name == name]
        if not found:
            raise ConfigError(f"profile {self.profile!r} has no variant {name!r}",
                              hint=f"choose one of {', '.join(v.name for v in self.variants)}")
        return found[0]

    def for_variant(self, variant: Variant) -> Config:
        """This config for another of its profile's variants (no file is read again)."""
        return dataclasses.replace(self, variant=variant)

    def with_variant_settings(self, **sections: Any) -> Config:
        """This config with its variant's `python`, `build`, `registry`, `launcher`, `target`
        or `cluster` replaced (in `variants` too, so `for_variant` keeps the change)."""
        changed = dataclasses.replace(self.variant, **sections)
        return dataclasses.replace(self, variant=changed, variants=tuple(
            changed if v.name == changed.name else v for v in self.variants))


_SECTIONS: dict[str, type[Any]] = {
    "python": PythonSelection,
    "target": TargetSpec,
    "layers": LayerSettings,
    "registry": RegistrySettings,
    "build": BuildSettings,
    "cluster": ClusterSettings,
    "verify": VerifySettings,
    "launcher": LauncherSettings,
}
_TOP_KEYS = ("workspace", "lock", "backend")
_VARIANT_SECTIONS = ("python", "build", "registry", "launcher", "target", "cluster")  # each its own
_VARIANT_TABLES = ("build", "target", "cluster")  # a variant's sub-tables, each its section's keys
# What a change of a top key bakes: the workspace and the lock are copied and installed; the
# backend picks where the build runs, and both backends bake the same inputs.
_TOP_BAKES: dict[str, Bakes] = {"workspace": "image", "lock": "image", "backend": "none"}
SHARED = "shared"  # the slice directory of a profile's variants' common layers
# What a variant sets in its own table, as the dotted key it sets: keys of the sections that
# have no variant table, each replacing the profile's, and import-asserts, added to the
# profile's. Every other build, target or cluster key is written in the variant's table of that
# name and replaces the profile's; each key has one spelling (_RETIRED_VARIANT_KEYS).
_VARIANT_KEYS = {"extras": "python.extras", "groups": "python.groups",
                 "tag-prefix": "registry.tag-prefix", "floating-tag": "registry.floating-tag",
                 "launcher-variable": "launcher.variable",
                 "platform-variable": "launcher.platform-variable", "table-key": "launcher.table-key",
                 "import-asserts": "build.import-asserts"}
def _key(name: str) -> str:
    return name.replace("_", "-")


_HINTS: dict[type[Any], dict[str, Any]] = {}


def _hints(cls: type[Any]) -> dict[str, Any]:
    """The field types of a settings class (resolved once: annotations are strings here)."""
    if cls not in _HINTS:
        _HINTS[cls] = get_type_hints(cls)
    return _HINTS[cls]


def _key_of(field: dataclasses.Field[Any]) -> _Key:
    key = field.metadata.get("gpurl")
    if not isinstance(key, _Key):  # a declaration error in this file, not a user's
        raise TypeError(f"config field {field.name!r} is not declared with _field(..., bakes=...)")
    return key


@functools.cache
def _known_keys() -> tuple[str, ...]:
    keys = list(_TOP_KEYS)
    for section, cls in _SECTIONS.items():
        keys += [f"{section}.{_key(f.name)}" for f in dataclasses.fields(cls)]
    return tuple(keys)


@functools.cache
def declared_bakes() -> dict[str, Bakes]:
    """Every config key (dotted, in declaration order) with what a change of it bakes."""
    out = dict(_TOP_BAKES)
    for section, cls in _SECTIONS.items():
        out.update({f"{section}.{_key(f.name)}": _key_of(f).bakes for f in dataclasses.fields(cls)})
    return out


def _shown_value(value: Any, root: Path) -> str:
    """A setting as stable text: paths relative to the repository root, lists as JSON."""
    if isinstance(value, Path):
        return value.relative_to(root).as_posix() if value.is_relative_to(root) else str(value)
    if isinstance(value, tuple):
        return json.dumps(list(value))
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return str(value)


def baked_values(config: Config) -> dict[str, tuple[Bakes, str]]:
    """Every key's value in `config` (its variant's) as stable text, with its class: what
    rebuild-needed compares between two commits."""
    out: dict[str, tuple[Bakes, str]] = {
        "workspace": ("image", _shown_value(config.workspace, config.root)),
        "lock": ("image", _shown_value(config.lock, config.root)),
        "backend": ("none", config.backend)}
    for section, cls in _SECTIONS.items():
        settings = getattr(config, section)
        for f in dataclasses.fields(cls):
            out[f"{section}.{_key(f.name)}"] = (_key_of(f).bakes,
                                                _shown_value(getattr(settings, f.name), config.root))
    return out


def config_fingerprint(config: Config) -> str:
    """sha256 over the baked keys' values (classes wheels and image): the generated Dockerfile
    records it (a label), so a generated file can be told stale against its commit's config."""
    baked = {k: v for k, (bakes, v) in baked_values(config).items() if bakes != "none"}
    blob = json.dumps(baked, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()


# Keys that were replaced, with what to write instead.
_MIGRATED = {
    "build.install-harbor": "harbor is one build.post-install entry now",
    "build.harbor-repo": "harbor is one build.post-install entry now",
    "build.harbor-commit": "harbor is one build.post-install entry now",
}
_MIGRATION_HINT = ('write post-install = ["harbor[EXTRAS] @ git+<harbor-repo>@<harbor-commit> | '
                   'import harbor"] in the build table and remove install-harbor, harbor-repo and '
                   "harbor-commit")


# Keys that were renamed: (the new name, what it is). Two keys were called compression-level.
_RENAMED = {"layers.compression-level": ("layers.slice-gzip-level",
                                         "the gzip level of the slice layers gpurl writes"),
            "cluster.compression-level": ("cluster.kaniko-gzip-level",
                                          "the gzip level of the layers kaniko writes")}

# Keys that were retired, nothing reads them: (why, what to do with what it named).
_RETIRED_KEYS = {"build.kaniko-script": (
    "the job's script is rendered when `invoke build` submits it, and nothing rendered is "
    "committed", "nothing reads the script it named either: delete it")}

# Values that were retired, with why and what to write instead: (dotted key, value) -> hint.
_RETIRED_VALUES = {
    ("layers.mode", "stacked"): ("a bump rebuilt every layer above the changed one; every "
                                 "slice is now its own layer (docs/plan.md)",
                                 'remove layers.mode (or write "independent"), then '
                                 "`invoke generate`"),
}


def _unknown(key: str, where: str) -> ConfigError:
    if key in _MIGRATED:
        return ConfigError(f"{key} in {where} is no longer a key: {_MIGRATED[key]}",
                           hint=_MIGRATION_HINT)
    if key in _RENAMED:
        new, what = _RENAMED[key]
        section, name = new.split(".")
        hint = (f"set ${environment_variable(new)} instead" if where.startswith("$") else
                f"write {name} = N in its {section} table instead")
        return ConfigError(f"{key} in {where} is now {new}, {what}",
                           hint=f"{hint} (the same N gives the same layers)")
    if key in _RETIRED_KEYS:
        why, after = _RETIRED_KEYS[key]
        section, name = key.split(".")
        remove = (f"unset ${environment_variable(key)}" if where.startswith("$") else
                  f"remove {name} from its {section} table")
        return ConfigError(f"{key} in {where} was retired: {why}", hint=f"{remove}; {after}")
    close = difflib.get_close_matches(key, (*_known_keys(), "default-profile", "profiles"), n=1)
    hint = f"did you mean {close[0]!r}?" if close else "every key is in docs/config.md"
    return ConfigError(f"unknown config key {key!r} in {where}", hint=hint)


def _flatten(table: Mapping[str, Any], where: str) -> dict[str, Any]:
    """[tool.gpurl]-shaped table -> {"section.key": value}, rejecting unknown keys."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if key in ("profiles", "default-profile", "variants"):
            continue
        if key in _TOP_KEYS:
            flat[key] = value
        elif key in _SECTIONS:
            for sub, subvalue in _table(value, f"{where[:-1]}.{key}]").items():
                flat[f"{key}.{sub}"] = subvalue
        else:
            raise _unknown(key, where)
    for dotted in flat:
        if dotted not in _known_keys():
            raise _unknown(dotted, where)
    return flat


PROFILE_ENV = "GPURL_PROFILE"


def profile_from_env(env: Mapping[str, str] | None = None) -> str | None:
    """The profile $GPURL_PROFILE selects (None: unset), as load_config reads it."""
    return (os.environ if env is None else env).get(PROFILE_ENV) or None


def environment_value(dotted: str, env: Mapping[str, str] | None = None) -> str | None:
    """The raw GPURL_<SECTION>_<KEY> value of config key `dotted` in `env`, for the one path
    that runs without a resolved config: redacting a failed task's output."""
    found = _from_env(os.environ if env is None else env).get(dotted)
    return found[0] if found else None


def sets_config(env: Mapping[str, str]) -> bool:
    """`env` holds a GPURL_<SECTION>_<KEY> variable, so a config read with it differs from the
    committed one."""
    return bool(_from_env(env))


def environment_variable(dotted: str) -> str:
    """The GPURL_<SECTION>_<KEY> variable that sets config key `dotted` (layers.cap: GPURL_LAYERS_CAP)."""
    return "GPURL_" + dotted.upper().replace(".", "_").replace("-", "_")


# GPURL_* variables that are not config keys (tests/test_architecture.py says who reads each);
# the last four steer the test harness
OTHER_VARIABLES = frozenset({
    PROFILE_ENV, "GPURL_DEBUG", "GPURL_REGISTRY_TOKEN", "GPURL_KANIKO_ROOT", "GPURL_IRIS",
    "GPURL_DOCKER_CLIENT", "GPURL_CACHE_DIR", "GPURL_LOG", "GPURL_PROBE",
    "GPURL_IRIS_CONTRACT", "GPURL_TEST_KANIKO_ROOTS", "GPURL_TEST_PATH_PREPEND",
    "GPURL_FUZZ_SCALE", "GPURL_IMAGE_DIGEST"})


def unknown_variables(env: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """GPURL_* variables in `env` that nothing reads (`GPURL_LAYERS_CAPP`), each with the
    closest variable that is read (None: none is close): a typo is otherwise silently ignored."""
    # a renamed or retired key's variable is load_config's error, which says what to do
    known = sorted({environment_variable(k) for k in (*_known_keys(), *_RENAMED, *_RETIRED_KEYS)}
                   | OTHER_VARIABLES)
    found = []
    for name in sorted(n for n in env if n.startswith("GPURL_") and n not in known):
        close = difflib.get_close_matches(name[6:], [k[6:] for k in known], n=1)
        found.append((name, "GPURL_" + close[0] if close else None))
    return found


def _from_env(env: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """GPURL_<SECTION>_<KEY> variables as {dotted key: (value, variable name)}."""
    by_var = {environment_variable(k): k for k in _known_keys()}
    return {by_var[name]: (value, name) for name, value in env.items() if name in by_var}


def _table(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} must be a table, not {shown(value)}",
                          hint="write it as a TOML table, [section] or { key = value }")
    return value


def _type_name(hint: Any) -> str:
    if get_origin(hint) is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(hint))
    names = {bool: "a boolean", int: "an integer", str: "a string", Path: "a path string",
             tuple[str, ...]: "a list of strings"}
    return names.get(hint) or names.get(next((a for a in get_args(hint) if a is not type(None)),
                                              str), "a value")


def _convert(dotted: str, hint: Any, setting: Setting, key: _Key | None = None) -> Any:
    """One config value as its typed field, or a ConfigError naming the key path, where it
    came from, the expected type and the value found (`Setting.text`: a string to parse)."""
    value, where, text = setting.value, setting.where, setting.text

    def bad(expected: str, detail: str = "") -> ConfigError:
        return ConfigError(f"{dotted} in {where} must be {expected}, not {shown(value)}{detail}",
                           hint=f"docs/config.md gives {dotted}'s form and default")

    optional = type(None) in get_args(hint)
    base = next((a for a in get_args(hint) if a is not type(None)), hint) if optional else hint
    if value is None or (optional and text and value == ""):
        if optional:
            return None
        raise bad(_type_name(base))
    if key is not None and key.size:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise bad('a size like "4GB" or a byte count')
        try:
            size = parse_size(value)
        except (TypeError, ValueError) as exc:
            raise bad('a size like "4GB" or a byte count', f" ({exc})") from None
        if size <= 0:
            raise bad("a positive size")
        return size
    if get_origin(base) is Literal:
        choices = get_args(base)
        if value in choices:
            return value
        if (dotted, value) in _RETIRED_VALUES:
            why, hint = _RETIRED_VALUES[dotted, value]
            raise ConfigError(f"{dotted} = {value!r} in {where} was retired: {why}", hint=hint)
        close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
        raise ConfigError(f"{dotted} in {where} must be {_type_name(base)}, not {shown(value)}",
                          hint=f"did you mean {close[0]!r}?" if close else f"set {dotted} to one of them")
    if base is bool:
        if isinstance(value, bool):
            return value
        if text and str(value).lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            return str(value).lower() in ("1", "true", "yes", "on")
        raise bad("a boolean")
    if base is int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif text and isinstance(value, str) and value.strip().lstrip("-").isdigit():
            number = int(value)
        else:
            raise bad("an integer")
        if number < 0:
            raise bad("a non-negative integer")
        return number
    if base == tuple[str, ...]:
        if text and isinstance(value, str):
            return values.comma_list(value)
        if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise bad("a list of strings")
    if not isinstance(value, str):
        raise bad(_type_name(base))
    if base is Path:
        if not value:
            raise bad("a path, not empty")
        return Path(value)
    if key is not None and key.url and value and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", value):
        raise bad("an http:// or https:// URL, or empty")
    return value


def _tool_table(root: Path, text: str | None = None) -> Mapping[str, Any]:
    """[tool.gpurl] of root/pyproject.toml (or of `text`, that file at another commit),
    checked to be a table."""
    pyproject = root / "pyproject.toml"
    if text is None:
        text = read_text(pyproject, what="pyproject.toml", error=ConfigError,
                         missing_hint="run gpurl in the project, or pass --project DIR")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{pyproject} is not valid TOML: {exc}",
                          hint="fix the TOML the message points at") from None
    return _table(_table(data.get("tool", {}), "[tool]").get("gpurl", {}), "[tool.gpurl]")


def load_profile_names(root: Path) -> tuple[str, ...]:
    """Every profile in [tool.gpurl.profiles], in file order."""
    return tuple(_table(_tool_table(root.resolve()).get("profiles", {}), "[tool.gpurl.profiles]"))


def load_config(
    root: Path,
    *,
    profile: str | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    variant: str | None = None,
    pyproject_text: str | None = None,
) -> Config:
    """Resolve the config for `profile` (and `variant`) from `root/pyproject.toml`, `env` and
    `overrides`, in one pass: pyproject is read once, and every variant of the profile is
    resolved from the same tables (the chosen one first, so its errors come first).

    `overrides` uses dotted keys ("layers.cap", "python.extras", "lock"); None values are
    ignored so task flags can pass their defaults straight through. `pyproject_text` stands
    for root/pyproject.toml as it was at another commit (rebuild-needed reads both points so).
    """
    env = os.environ if env is None else env
    root = root.resolve()
    tool = _tool_table(root, pyproject_text)
    name, profile_table = _chosen_profile(tool, profile or profile_from_env(env))
    shared = _file_settings(tool, name, profile_table)
    names, chosen = _variant_names(profile_table, name, variant)
    late = _late_settings(env, overrides)
    workspace, lock, backend = _top_settings({**shared, **late}, root)

    def resolve(merged: Settings) -> dict[str, Any]:
        return _sections(merged, root, workspace)

    # the chosen variant first, so its errors come first; every other one resolved as fully
    # (its errors are errors here too)
    own = resolve({**shared, **late})  # what the profile itself sets: its first (or implicit) image
    order = (chosen, *(n for n in names if n != chosen)) if names else ()
    resolved = {n: _resolve_variant(profile_table, name, n, first=n == names[0], shared=shared,
                                    late=late, own=own, resolve=resolve) for n in order}
    variants = _platform_shares(tuple(resolved[n] for n in names)
                                or (_implicit_variant(name, own),), name)
    if variants[0].launcher.table:
        _one_entry_per_key(variants, name)
    elif not {"launcher.variable", "launcher.platform-variable"} & set(late):
        _one_image_per_variable(variants, name)  # (a flag or variable names one for the run)
    return Config(root=root, profile=name, workspace=workspace, lock=lock, backend=backend,
                  variant=next(v for v in variants if v.name == chosen) if names else variants[0],
                  variants=variants,
                  **{k: v for k, v in own.items() if k not in _VARIANT_SECTIONS})


def platform_groups(variants: Sequence[Variant]) -> list[tuple[Variant, ...]]:
    """The variants by platform (target), in file order: each group is planned together and
    shares its lowest slices; two groups share none, since a slice's files are another
    platform's wheels."""
    groups: dict[TargetSpec, list[Variant]] = {}
    for variant in variants:
        groups.setdefault(variant.target, []).append(variant)
    return [tuple(group) for group in groups.values()]


def _platform_shares(variants: tuple[Variant, ...], profile: str) -> tuple[Variant, ...]:
    """The variants with their shared slices per platform: variants of another target than
    the first share only among themselves (build.slices/PROFILE/shared-ARCH), since their
    bytes differ. Two other platforms of one arch (another python, say) would be one directory."""
    _, *others = platform_groups(variants)  # the first platform keeps build.slices/PROFILE/shared
    moved: dict[str, Variant] = {}
    for group in others:
        directory = f"{SHARED}-{group[0].target.arch}"
        if any(directory == f"{SHARED}-{o[0].target.arch}" for o in others if o is not group):
            raise ConfigError(f"profile {profile!r} has two {group[0].target.arch} targets that "
                              f"differ (variant {group[0].name!r})",
                              hint="give every variant of one arch the same target table")
        moved.update({v.name: dataclasses.replace(
            v, shared_slices=v.shared_slices.with_name(directory)) for v in group})
    return tuple(moved.get(v.name, v) for v in variants)


def _one_image_per_variable(variants: tuple[Variant, ...], profile: str) -> None:
    """Variants of different platforms may share a launcher variable (it pins their image
    index, release/index.py); two of one platform may not: one variable holds one image per
    platform, and a platform variable one image."""
    seen: dict[tuple[str, str], str] = {}
    for variant in variants:
        launcher, platform = variant.launcher, variant.target.platform
        for key in ((launcher.variable, platform), (launcher.platform_variable, "")):
            if key[0] and seen.setdefault(key, variant.name) != variant.name:
                raise ConfigError(
                    f"variants {seen[key]!r} and {variant.name!r} of profile {profile!r} both pin "
                    f"a {platform} image into {key[0]}", hint="give each its own variable (only "
                    "variants of different platforms share one: their image index)")
    for variant in variants:
        own = variant.launcher.platform_variable
        if own and any(own == v.launcher.variable for v in variants):
            raise ConfigError(f"platform-variable {own} of variant {variant.name!r} is also a "
                              f"launcher-variable of profile {profile!r}",
                              hint="name a variable of its own, e.g. DEFAULT_RL_ARM64_DOCKER_IMAGE")


def _one_entry_per_key(variants: tuple[Variant, ...], profile: str) -> None:
    """Pinning into an image table, each variant's image goes to the entry of its own key."""
    seen: dict[str, str] = {}
    for variant in variants:
        key = variant.table_key
        if seen.setdefault(key, variant.name) != variant.name:
            raise ConfigError(f"variants {seen[key]!r} and {variant.name!r} of profile {profile!r} "
                              f"both pin into the {variant.launcher.table} entry {key}",
                              hint="give each variant its own table-key (the entry of its "
                                   "platform and variant)")


def _chosen_profile(tool: Mapping[str, Any], wanted: str | None) -> tuple[str, Mapping[str, Any]]:
    """(the profile's name, its table): `wanted`, else [tool.gpurl]'s default-profile; a
    misspelled key anywhere in [tool.gpurl] is named before the profile is chosen."""
    profiles = _table(tool.get("profiles", {}), "[tool.gpurl.profiles]")
    _flatten(tool, "[tool.gpurl]")
    default = tool.get("default-profile", "default")
    if not isinstance(default, str) or not default:
        raise ConfigError(f"default-profile in [tool.gpurl] must be a profile name, not {shown(default)}",
                          hint="set default-profile to the name of a [tool.gpurl.profiles.NAME] table")
    name = values.profile_name(wanted or default, "the profile name")
    if profiles and name not in profiles:
        close = difflib.get_close_matches(name, list(profiles), n=1)
        raise ConfigError(
            f"unknown profile {name!r}",
            hint=f"did you mean {close[0]!r}?" if close else f"choose one of {sorted(profiles)}",
        )
    return name, _table(profiles.get(name, {}), f"[tool.gpurl.profiles.{name}]")


def _file_settings(tool: Mapping[str, Any], name: str, profile: Mapping[str, Any]) -> Settings:
    """[tool.gpurl]'s keys, then the profile's over them, each with the table it came from."""
    settings: dict[str, Setting] = {}
    for table, where in ((tool, "[tool.gpurl]"), (profile, f"[tool.gpurl.profiles.{name}]")):
        settings.update({k: Setting(v, where) for k, v in _flatten(table, where).items()})
    return settings


def _late_settings(env: Mapping[str, str], overrides: Mapping[str, Any] | None) -> Settings:
    """What GPURL_* variables and task flags set (flags last), over every table's keys; a
    renamed or retired key's variable is an error, as the key in a table is."""
    for old in (*_RENAMED, *_RETIRED_KEYS):
        if environment_variable(old) in env:
            raise _unknown(old, f"${environment_variable(old)}")
    late = {k: Setting(v, f"${var}", text=True) for k, (v, var) in _from_env(env).items()}
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key not in _known_keys():
            raise _unknown(key, "the command line")
        late[key] = Setting(value, "the command line",
                            text=not isinstance(value, bool | int | list | tuple))
    return late


def _top_settings(merged: Settings, root: Path) -> tuple[Path, Path, Backend]:
    """(workspace, lock, backend): the workspace is copied into the build context, so it
    stays inside the repository."""
    hints = _hints(Config)

    def top(key: str, default: Any) -> Any:
        return _convert(key, hints[key], merged[key]) if key in merged else default

    def where(key: str) -> str:
        return merged[key].where if key in merged else "defaults"

    workspace = (root / values.inside_repository(top("workspace", Path(".")), root,
                                                 f"workspace in {where('workspace')}")).resolve()
    lock_path = top("lock", Path("uv.lock"))
    values.one_line(str(lock_path), f"lock in {where('lock')}")
    return workspace, workspace / lock_path, top("backend", "iris")


def _implicit_variant(profile: str, sections: Mapping[str, Any]) -> Variant:
    """The one variant of a profile that declares none: the profile's own settings."""
    build = sections["build"]
    return _checked(Variant(
        name=DEFAULT_VARIANT, declared=False, python=sections["python"], build=build,
        registry=sections["registry"], launcher=sections["launcher"], target=sections["target"],
        cluster=sections["cluster"], slices=build.slices / profile,
        shared_slices=build.slices / profile / SHARED), f"[tool.gpurl.profiles.{profile}]")


def _sections(merged: Settings, root: Path, workspace: Path) -> dict[str, Any]:
    """Each section's settings from the merged values, every key read as its field declares."""
    sections: dict[str, Any] = {}
    for section, cls in _SECTIONS.items():
        hints = _hints(cls)
        kwargs: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            dotted = f"{section}.{_key(field.name)}"
            key = _key_of(field)
            base = root if key.root_relative else workspace
            if dotted in merged:
                where = merged[dotted].where
                value = _convert(dotted, hints[field.name], merged[dotted], key)
                if key.check is not None:  # issue 24: the value's grammar, at the edge
                    try:
                        key.check(value, dotted)
                    except ConfigError as exc:
                        raise ConfigError(f"{exc.message} (in {where})", hint=exc.hint) from None
                if isinstance(value, Path):
                    value = base / value
                    if key.inside:  # issue 30: written or copied, so never outside the repository
                        values.inside_repository(value, root, f"{dotted} in {where}")
                kwargs[field.name] = value
            elif isinstance(field.default, Path):  # default paths resolve the same way
                kwargs[field.name] = base / field.default
        sections[section] = cls(**kwargs)
    return sections


def _variant_names(profile: Mapping[str, Any], name: str,
                   wanted: str | None) -> tuple[tuple[str, ...], str]:
    """(every declared variant's name in file order, the chosen one); ((), "") for a profile
    that declares none. Each name is checked against its grammar: it names files."""
    table = _table(profile.get("variants", {}), f"[tool.gpurl.profiles.{name}.variants]")
    names = tuple(values.profile_name(n, f"a variant name in [tool.gpurl.profiles.{name}.variants]")
                  for n in table)
    for taken in names:
        if taken == SHARED or taken.startswith(f"{SHARED}-"):
            raise ConfigError(f"a variant of profile {name!r} is named {taken!r}",
                              hint=f"{SHARED!r} and {SHARED}-ARCH are the directories of the "
                                   "slices a platform's variants share")
    if not names:
        if wanted:
            values.one_line(wanted, "--variant")
            raise ConfigError(f"profile {name!r} has no variants, so --variant {wanted} means "
                              "nothing", hint=f"add [tool.gpurl.profiles.{name}.variants.{wanted}]")
        return (), ""
    chosen = values.profile_name(wanted or names[0], f"a variant name of profile {name!r}")
    if chosen not in names:
        close = difflib.get_close_matches(chosen, names, n=1)
        raise ConfigError(f"profile {name!r} has no variant {chosen!r}",
                          hint=f"did you mean {close[0]!r}?" if close else
                          f"choose one of {', '.join(names)}")
    return names, chosen


def _variant_values(table: Mapping[str, Any], where: str, shared: Settings) -> dict[str, Setting]:
    """A variant table's keys as the dotted keys they set (its `build` table's too; its
    import-asserts are added to the profile's), with where each came from."""
    keys = dict(_table(table, where))
    tables = {section: _table(keys.pop(section, {}), f"{where[:-1]}.{section}]")
              for section in _VARIANT_TABLES}
    found: dict[str, Setting] = {}
    for key in keys:
        if key == "dockerfile":  # one spelling per key: a build key goes in the build table
            raise ConfigError(f"a variant's dockerfile is written in {where[:-1]}.build], not "
                              f"in {where}", hint="move the key there, as every build key of a "
                                                  "variant")
        if key not in _VARIANT_KEYS:
            close = difflib.get_close_matches(key, list(_VARIANT_KEYS), n=1)
            raise ConfigError(f"unknown variant key {key!r} in {where}",
                              hint=f"did you mean {close[0]!r}?" if close else
                              f"a variant sets {', '.join(_VARIANT_KEYS)} and "
                              f"{', '.join(_VARIANT_TABLES)} tables")
    # the variant's own build pins (compiled-wheel versions, fork commit, torch, base image,
    # CUDA arch list...), its platform (target.arch...) and its cluster (name, crane archive)
    for section, sub in tables.items():
        sub_where = f"{where[:-1]}.{section}]"
        for key, value in sub.items():
            if f"{section}.{key}" not in _known_keys():
                raise _unknown(f"{section}.{key}", sub_where)
            if _VARIANT_KEYS.get(key) == f"{section}.{key}":  # one spelling: import-asserts
                raise ConfigError(f"a variant's {key} are written in {where}, not in {sub_where}",
                                  hint="move the key there: its entries are added to the "
                                       f"profile's {key}")
            found[f"{section}.{key}"] = Setting(value, sub_where)
    for key, value in keys.items():
        dotted = _VARIANT_KEYS[key]
        if key == "import-asserts":
            base = shared[dotted].value if dotted in shared else list(BuildSettings().import_asserts)
            if not isinstance(value, list) or not isinstance(base, list | tuple):
                raise ConfigError(f"import-asserts in {where} must be a list of strings",
                                  hint="write it as a list of strings, e.g. import-asserts = [\"torch\"]")
            value = [*base, *value]
        found[dotted] = Setting(value, where)
    return found


def _own_image(own: Mapping[str, Any], variant: str) -> dict[str, dict[str, Any]]:
    """What a variant other than the first defaults to, from the profile's own settings:
    PREFIX-VARIANT tags and a Dockerfile named DOCKERFILE-VARIANT, as {section: {field:
    value}}."""
    registry, build = own["registry"], own["build"]
    return {"registry": {"tag_prefix": f"{registry.tag_prefix}-{variant}",
                         "floating_tag": f"{registry.floating_tag}-{variant}"},
            "build": {"dockerfile": Path(f"{build.dockerfile}-{variant}")}}


def _resolve_variant(profile: Mapping[str, Any], name: str, variant: str, *, first: bool,
                     shared: Settings, late: Settings, own: Mapping[str, Any],
                     resolve: Callable[[Settings], dict[str, Any]]) -> Variant:
    """Declared variant `variant` of profile `name`, every setting typed.

    Precedence: flags and GPURL_* variables, then the variant's table (and its build table),
    then (for any variant but the first) its own image's defaults (`_own_image`), then the
    profile. The first variant is the profile's own image; any other one must name its
    launcher variable (a pin must never land in another variant's variable), unless the pin goes
    into an image table (launcher.table), whose entries are told apart by their keys.
    """
    table = _table(profile.get("variants", {}), f"[tool.gpurl.profiles.{name}.variants]")
    where = f"[tool.gpurl.profiles.{name}.variants.{variant}]"
    keys = _variant_values(table[variant], where, shared)
    sections = resolve({**shared, **keys, **late})
    if not first:
        if "launcher.variable" not in keys and not sections["launcher"].table:
            raise ConfigError(f"{where} has no launcher-variable",
                              hint="name the launcher variable its pin goes to, e.g. "
                                   f'launcher-variable = "RL_{variant.upper()}_DOCKER_IMAGE"')
        for section, defaults in _own_image(own, variant).items():
            unset = {f: v for f, v in defaults.items()
                     if f"{section}.{_key(f)}" not in keys and f"{section}.{_key(f)}" not in late}
            sections[section] = dataclasses.replace(sections[section], **unset)
    build = sections["build"]
    return _checked(Variant(
        name=variant, declared=True, python=sections["python"], build=build,
        registry=sections["registry"], launcher=sections["launcher"], target=sections["target"],
        cluster=sections["cluster"], slices=build.slices / name / variant,
        shared_slices=build.slices / name / SHARED), where)


def _checked(variant: Variant, where: str) -> Variant:
    """`variant`, once its crane archive is known to match its platform: both of
    cluster.crane-url and crane-sha256 or neither, and no other arch's archive (an x86_64 crane
    cannot run in a GB200 job)."""
    cluster, arch = variant.cluster, variant.target.arch
    if bool(cluster.crane_url) != bool(cluster.crane_sha256):
        raise ConfigError(f"cluster.crane-url and cluster.crane-sha256 go together (in {where})",
                          hint="set both (the archive and its sha256 from the release's "
                               "checksums.txt), or neither for the pinned archive of target.arch")
    others = {OCI_ARCH[a] for a in OCI_ARCH if a != arch} | {a for a in OCI_ARCH if a != arch}
    name = cluster.crane_url.rsplit("/", 1)[-1]
    if any(other in name for other in others):
        raise ConfigError(f"cluster.crane-url {name!r} is not an archive for {arch}, and target.arch "
                          f"is {arch} (in {where})",
                          hint=f"point it at go-containerregistry's "
                               f"{CRANE_ARCHIVES[arch][0].rsplit('/', 1)[-1]} (of its release), "
                               "or leave crane-url and crane-sha256 unset")
    return variant


def load_committed_config(root: Path, profile: str | None, variant: str | None = None) -> Config:
    """The config as committed: pyproject.toml alone, no GPURL_* variables and no flags (the
    profile, when not named, is still the one $GPURL_PROFILE selects).

    Files that are generated and committed (Dockerfiles, slice files) must
    not depend on whoever runs the generator.
    """
    return load_config(root, profile=profile or profile_from_env(), env={}, variant=variant)
