"""What a compiled-wheel glob names: `build.wheel-globs` entries start with their project's
name ("flash_attn-${FLASH_ATTN_VERSION}-*.whl" -> flash-attn), the distributions the lock never
installs because the compiled wheels provide them. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from packaging.utils import canonicalize_name

from gpurl_tasks.errors import PlanError

__all__ = ["glob_project", "provided_names"]


def glob_project(pattern: str) -> str | None:
    """The distribution a wheel glob names: "flash_attn-${V}-*.whl" -> "flash-attn"."""
    head = pattern.rsplit("/", 1)[-1].split("-", 1)[0]
    if not head or any(c in head for c in "*?[$") or head == pattern:
        return None
    return str(canonicalize_name(head))


def provided_names(wheel_globs: Sequence[str]) -> tuple[str, ...]:
    """The distributions the compiled wheels provide (each glob names its project)."""
    names = []
    for pattern in wheel_globs:
        name = glob_project(pattern)
        if name is None:
            raise PlanError(f"wheel glob {pattern!r} does not name its distribution",
                            hint="start each build.wheel-globs entry with the project name, "
                                 "e.g. 'vllm-*.whl'")
        names.append(name)
    return tuple(sorted(set(names)))
