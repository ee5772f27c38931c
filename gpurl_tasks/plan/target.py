"""The target platform (where the image runs) as packaging tags and a marker environment.

Everything here is computed from `TargetSpec`, never from the machine running gpurl: the
image is linux/x86_64 CPython 3.12 even when the planner runs on a Mac.
"""

from __future__ import annotations

import functools
from typing import Any

from packaging import tags

from gpurl_tasks.config import TargetSpec
from gpurl_tasks.errors import ConfigError

__all__ = ["marker_environment", "platform_tags", "target_tags"]

# Legacy manylinux names and the glibc minor they stand for (PEP 600 aliases).
_LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}


def _python_parts(target: TargetSpec) -> tuple[int, int, str]:
    parts = target.python.split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        raise ConfigError(f"target.python {target.python!r} must look like '3.12' or '3.12.7'",
                          hint="set target.python to e.g. \"3.12\"") from None
    full = target.python if len(parts) >= 3 else f"{major}.{minor}.0"
    return major, minor, full


def platform_tags(target: TargetSpec) -> list[str]:
    """Platform tags in priority order: newest manylinux first, then the plain linux tag."""
    if target.os != "linux":
        raise ConfigError(f"target.os {target.os!r} is not supported; images are linux",
                          hint="set target.os = \"linux\" (or leave it out)")
    try:
        glibc_major, glibc_minor = (int(x) for x in target.glibc.split("."))
    except ValueError:
        raise ConfigError(f"target.glibc {target.glibc!r} must look like '2.28'",
                          hint="set target.glibc to the base image's glibc, e.g. \"2.35\"") from None
    if glibc_major != 2:
        raise ConfigError(f"target.glibc {target.glibc!r}: only glibc 2.x is known",
                          hint="set target.glibc to the base image's glibc, e.g. \"2.35\"")
    arch = target.arch
    result: list[str] = []
    for minor in range(glibc_minor, 4, -1):
        result.append(f"manylinux_2_{minor}_{arch}")
        legacy = _LEGACY_MANYLINUX.get(minor)
        if legacy and (minor == 17 or arch in ("x86_64", "i686")):  # 2010 and 1: x86 only
            result.append(f"{legacy}_{arch}")
    result.append(f"linux_{arch}")
    return result


@functools.cache
def target_tags(target: TargetSpec) -> tuple[tags.Tag, ...]:
    """Supported wheel tags for the target, most preferred first (as an installer ranks them)."""
    major, minor, _ = _python_parts(target)
    platforms = platform_tags(target)
    interpreter = f"cp{major}{minor}"
    return (
        *tags.cpython_tags((major, minor), abis=[interpreter, "abi3", "none"], platforms=platforms),
        *tags.compatible_tags((major, minor), interpreter=interpreter, platforms=platforms),
    )


def marker_environment(target: TargetSpec) -> dict[str, Any]:
    """PEP 508 marker variables for the target (CPython on Linux)."""
    major, minor, full = _python_parts(target)
    return {
        "implementation_name": "cpython",
        "implementation_version": full,
        "os_name": "posix",
        "platform_machine": target.arch,
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_system": "Linux",
        "platform_version": "",
        "python_full_version": full,
        "python_version": f"{major}.{minor}",
        "sys_platform": "linux",
    }
