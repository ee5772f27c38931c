"""Byte sizes: parse "4GB" / "500MB" / "3.5GiB" and format sizes for humans.

Layer caps are decimal (GB = 10**9) because registries and the team's rules of thumb are;
`binary_gb=True` reads "512GB" as 512 GiB, which is how iris (humanfriendly) reads memory.
"""

from __future__ import annotations

import re

__all__ = ["format_bytes", "parse_size"]

_DECIMAL = {"": 1, "B": 1, "K": 10**3, "KB": 10**3, "M": 10**6, "MB": 10**6,
            "G": 10**9, "GB": 10**9, "T": 10**12, "TB": 10**12}
_BINARY = {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | int, *, binary_gb: bool = False) -> int:
    """Parse a size into bytes; raise ValueError quoting the input when it is not one."""
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"size {text!r} must not be negative")
        return text
    match = _SIZE_RE.match(text)
    if not match:
        raise ValueError(f"size {text!r} is not a number with an optional unit like 4GB or 500MB")
    number, unit = float(match.group(1)), match.group(2).upper()
    if unit in _BINARY:
        factor = _BINARY[unit]
    elif unit in _DECIMAL:
        factor = _DECIMAL[unit]
        if binary_gb and unit:
            factor = {10**3: 2**10, 10**6: 2**20, 10**9: 2**30, 10**12: 2**40}.get(factor, factor)
    else:
        raise ValueError(f"size {text!r} has an unknown unit {match.group(2)!r}")
    return int(number * factor)


def format_bytes(size: int | None) -> str:
    """Decimal units with two decimals, matching how caps are written ("3.46 GB")."""
    if size is None:
        return "?"
    for unit, factor in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if abs(size) >= factor:
            return f"{size / factor:.2f} {unit}"
    return f"{size} B"
