"""The build config: one explicit cascade resolved in one function.

defaults (the dataclasses below) -> [tool.gpurl] in pyproject.toml -> the selected profile
[tool.gpurl.profiles.NAME] -> environment variables GPURL_<SECTION>_<KEY> -> task flags.
The result is frozen. Unknown keys fail with a "did you mean" hint rather than being ignored,
because a misspelled cap silently falling back to a default is exactly the kind of quiet
failure this tool exists to prevent.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_type_hints

from gpurl_tasks.errors import ConfigError
from gpurl_tasks.units import parse_size

__all__ = [
    "BuildSettings",
    "ClusterSettings",
    "Config",
    "LauncherSettings",
    "LayerSettings",
    "PythonSelection",
    "RegistrySettings",
    "TargetSpec",
    "VerifySettings",
    "load_config",
]

_KW = {"frozen": True, "kw_only": True}


@dataclasses.dataclass(**_KW)
class PythonSelection:
    """What `uv sync` selects: every sync in the chain uses exactly these flags."""

    extras: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    no_dev: bool = True


@dataclasses.dataclass(**_KW)
class TargetSpec:
    """The platform the image runs on (not the machine running this tool)."""

    python: str = "3.12"
    os: str = "linux"
    arch: str = "x86_64"
    glibc: str = "2.35"  # Ubuntu 22.04, the CUDA base image


@dataclasses.dataclass(**_KW)
class LayerSettings:
    """How the Python environment is split into layers."""

    cap: int = 4 * 10**9  # decimal bytes; written "4GB" in config
    basis: str = "compressed"  # "compressed" | "installed"
    size_overrides: Path | None = None  # JSON {"name" | "name==version": compressed bytes}
    size_cache: Path | None = None  # JSON written by `invoke sizes --probe`


@dataclasses.dataclass(**_KW)
class RegistrySettings:
    """Where the image is pushed and how its tags are named."""

    host: str = "ghcr.io"
    repository: str = "open-thoughts/openthoughts-agent"
    user: str = ""
    tag_prefix: str = "gpu-rl"
    floating_tag: str = "gpu-rl"
    insecure: bool | None = None  # None: plain HTTP only for loopback hosts, like dockerd

    @property
    def image(self) -> str:
        """`host/repository`, the name tags and digests hang off."""
        return f"{self.host}/{self.repository}"

    def immutable_reference(self, git_sha: str, *, prefix: str | None = None) -> str:
        """`host/repository:PREFIX-<git sha>`: the one spelling of the tag a build pushes and
        pin accepts (the megatron variant passes its own prefix)."""
        return f"{self.image}:{prefix or self.tag_prefix}-{git_sha}"


@dataclasses.dataclass(**_KW)
class BuildSettings:
    """Inputs of the generated Dockerfile (its ARG defaults) and of the builders."""

    dockerfile: Path = Path("docker/Dockerfile.gpu-rl")
    kaniko_script: Path = Path("docker/build_gpu_rl_kaniko.sh")
    wheelhouse: Path = Path("docker/wheelhouse")
    base_image: str = "nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04"
    torch_version: str = "2.11.0"
    cuda_tag: str = "cu128"
    flash_attn_version: str = "2.8.3"
    vllm_fork_repo: str = "https://github.com/open-thoughts/vllm.git"
    vllm_fork_commit: str = "76259c63a"
    vllm_version: str = "0.11.1"
    harbor_repo: str = "https://github.com/laude-institute/harbor.git"
    harbor_commit: str = "f4a6b1a0"
    wheel_source: str = "prebuilt-wheelhouse"  # or "wheel-builder" (slow nvcc path)
    wheel_base_url: str = "https://huggingface.co/datasets/laion/gpu-rl-build-wheels/resolve/main"
    max_jobs: int = 8
    megatron_extra: str = "megatron"
    apt_packages: tuple[str, ...] = (
        "ca-certificates",
        "curl",
        "git",
        "ibverbs-providers",
        "ibverbs-utils",
        "libibverbs1",
        "librdmacm1",
        "rdma-core",
    )
    index_url: str = ""  # empty: uv's default; the demo points it at a loopback index
    # What the generated Dockerfile writes where gpu-rl and the demo differ (see recipe.py).
    uv_version: str = "0.13.9"  # uv is pip-installed into /opt/uv inside the image
    python_downloads: str = "automatic"  # UV_PYTHON_DOWNLOADS in the image; "never" for the demo
    builder_apt_packages: tuple[str, ...] = ("build-essential", "git", "ninja-build")
    builder_extra_index_url: str = "https://download.pytorch.org/whl/cu128"
    builder_requirements: tuple[str, ...] = (
        "torch==${TORCH_VERSION}",
        "setuptools>=77",
        "setuptools-scm>=8",
        "wheel",
        "ninja",
        "packaging",
        "cmake>=3.26",
        "jinja2",
    )
    wheel_specs: tuple[str, ...] = (  # `pip wheel` arguments; "./path" is copied from the context
        "git+${VLLM_FORK_REPO}@${VLLM_FORK_COMMIT}",
        "flash-attn==${FLASH_ATTN_VERSION}",
    )
    wheel_globs: tuple[str, ...] = (  # the wheels the rl stage installs with --no-deps
        "vllm-*g${VLLM_FORK_COMMIT}*.whl",
        "flash_attn-${FLASH_ATTN_VERSION}-*.whl",
    )
    import_asserts: tuple[str, ...] = (  # one RUN each, so a failure names itself
        "import flash_attn, flash_attn_2_cuda",
        "import torch, transformers, vllm, skyrl_train, flash_attn, flash_attn_2_cuda",
        "import boto3, smart_open, s3fs; boto3.client('s3', region_name='us-east-1')",
        "from torchtitan.distributed.expert_parallel import ExpertParallel",
    )
    megatron_asserts: tuple[str, ...] = (
        "import megatron.core, megatron.bridge, transformer_engine",
    )
    install_harbor: bool = True


@dataclasses.dataclass(**_KW)
class ClusterSettings:
    """The iris job that runs kaniko (runbook sections 0.5 and 3)."""

    name: str = "cw-us-east-02a"
    cpu: int = 48
    memory: str = "512GB"
    disk: str = "400GB"
    timeout: int = 18000
    max_retries: int = 0
    task_image: str = "docker.io/library/ubuntu:22.04"
    cache_repo: str = ""  # empty: REGISTRY_IMAGE/cache


@dataclasses.dataclass(**_KW)
class VerifySettings:
    """Rules a pushed image must meet before it may be pinned."""

    hard_limit: int = 8 * 10**9
    min_layers: int = 20
    cap: int | None = None  # every layer's target; None: layers.cap (a small demo cap is for sync layers)


@dataclasses.dataclass(**_KW)
class LauncherSettings:
    """The file and variable that hold the pinned image digest (path relative to workspace)."""

    path: Path = Path("cloud/iris/launch_rl_iris.py")
    variable: str = "DEFAULT_RL_DOCKER_IMAGE"


@dataclasses.dataclass(**_KW)
class Config:
    """The whole resolved config; paths are absolute."""

    root: Path
    profile: str
    workspace: Path
    lock: Path
    backend: str = "iris"
    python: PythonSelection = PythonSelection()
    target: TargetSpec = TargetSpec()
    layers: LayerSettings = LayerSettings()
    registry: RegistrySettings = RegistrySettings()
    build: BuildSettings = BuildSettings()
    cluster: ClusterSettings = ClusterSettings()
    verify: VerifySettings = VerifySettings()
    launcher: LauncherSettings = LauncherSettings()


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
_SIZE_KEYS = {("layers", "cap"), ("verify", "hard_limit"), ("verify", "cap")}
# Paths relative to the repository root; the rest of the paths are relative to the workspace.
_ROOT_RELATIVE = {("layers", "size_overrides"), ("layers", "size_cache"), ("build", "dockerfile"),
                  ("build", "kaniko_script"), ("build", "wheelhouse")}


def _key(name: str) -> str:
    return name.replace("_", "-")


@functools.cache
def _known_keys() -> tuple[str, ...]:
    keys = list(_TOP_KEYS)
    for section, cls in _SECTIONS.items():
        keys += [f"{section}.{_key(f.name)}" for f in dataclasses.fields(cls)]
    return tuple(keys)


def _unknown(key: str, where: str) -> ConfigError:
    close = difflib.get_close_matches(key, _known_keys(), n=1)
    hint = f"did you mean {close[0]!r}?" if close else "see [tool.gpurl] in README.md"
    return ConfigError(f"unknown config key {key!r} in {where}", hint=hint)


def _flatten(table: Mapping[str, Any], where: str) -> dict[str, Any]:
    """[tool.gpurl]-shaped table -> {"section.key": value}, rejecting unknown keys."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if key in ("profiles", "default-profile"):
            continue
        if key in _TOP_KEYS:
            flat[key] = value
        elif key in _SECTIONS and isinstance(value, Mapping):
            for sub, subvalue in value.items():
                flat[f"{key}.{sub}"] = subvalue
        else:
            raise _unknown(key, where)
    for dotted in flat:
        if dotted not in _known_keys():
            raise _unknown(dotted, where)
    return flat


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    by_var = {"GPURL_" + k.upper().replace(".", "_").replace("-", "_"): k for k in _known_keys()}
    return {by_var[name]: value for name, value in env.items() if name in by_var}


def _convert(section: str, name: str, hint: Any, value: Any, where: str) -> Any:
    text = f"{section}.{_key(name)}"
    try:
        if (section, name) in _SIZE_KEYS:
            return parse_size(value)
        if hint in (bool, bool | None):
            if isinstance(value, bool) or value is None:
                return value
            if str(value).lower() in ("1", "true", "yes", "on"):
                return True
            if str(value).lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"{value!r} is not a boolean")
        if hint is int:
            return int(value)
        if hint == tuple[str, ...]:
            if isinstance(value, str):
                return tuple(v.strip() for v in value.split(",") if v.strip())
            return tuple(str(v) for v in value)
        if hint in (Path, Path | None):
            return Path(value) if value not in (None, "") else None
        return str(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid value for {text}: {exc}") from None


def load_config(
    root: Path,
    *,
    profile: str | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Resolve the config for `profile` from `root/pyproject.toml`, `env` and `overrides`.

    `overrides` uses dotted keys ("layers.cap", "python.extras", "lock"); None values are
    ignored so task flags can pass their defaults straight through.
    """
    env = os.environ if env is None else env
    root = root.resolve()
    pyproject = root / "pyproject.toml"
    try:
        data = tomllib.loads(pyproject.read_text())
    except FileNotFoundError:
        raise ConfigError(f"no pyproject.toml in {root}", hint="run from the gpurl checkout") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{pyproject} is not valid TOML: {exc}") from None
    tool = data.get("tool", {}).get("gpurl", {})
    profiles = tool.get("profiles", {})
    name = profile or env.get("GPURL_PROFILE") or tool.get("default-profile") or "default"
    if profiles and name not in profiles:
        close = difflib.get_close_matches(name, list(profiles), n=1)
        raise ConfigError(
            f"unknown profile {name!r}",
            hint=f"did you mean {close[0]!r}?" if close else f"choose one of {sorted(profiles)}",
        )

    merged = _flatten(tool, "[tool.gpurl]")
    merged.update(_flatten(profiles.get(name, {}), f"[tool.gpurl.profiles.{name}]"))
    merged.update(_from_env(env))
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key not in _known_keys():
            raise _unknown(key, "the command line")
        merged[key] = value

    workspace = (root / str(merged.get("workspace", "."))).resolve()
    lock = workspace / str(merged.get("lock", "uv.lock"))
    sections: dict[str, Any] = {}
    for section, cls in _SECTIONS.items():
        hints = get_type_hints(cls)
        kwargs: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            dotted = f"{section}.{_key(field.name)}"
            if dotted not in merged:
                continue
            value = _convert(section, field.name, hints[field.name], merged[dotted], dotted)
            if isinstance(value, Path) and not value.is_absolute():
                value = (root if (section, field.name) in _ROOT_RELATIVE else workspace) / value
            kwargs[field.name] = value
        for field in dataclasses.fields(cls):  # default paths resolve the same way
            if field.name not in kwargs and isinstance(field.default, Path):
                base = root if (section, field.name) in _ROOT_RELATIVE else workspace
                kwargs[field.name] = base / field.default
        sections[section] = cls(**kwargs)
    layers = sections["layers"]
    if layers.basis not in ("compressed", "installed"):
        raise ConfigError(f"layers.basis must be 'compressed' or 'installed', not {layers.basis!r}")
    if layers.cap <= 0:
        raise ConfigError("layers.cap must be positive")
    backend = str(merged.get("backend", "iris"))
    if backend not in ("iris", "local"):
        raise ConfigError(f"backend must be 'iris' or 'local', not {backend!r}")
    return Config(root=root, profile=name, workspace=workspace, lock=lock, backend=backend,
                  **sections)
