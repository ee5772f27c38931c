"""`cli.json_text` writes exactly what `json.dumps(obj, indent=2)` writes, for any value JSON
can hold (and leaves anything else, with json's own text or error, to json.dumps)."""

from __future__ import annotations

import enum
import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpurl_tasks.cli import json_text

_SCALARS = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True)
            | st.text())
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (st.lists(inner, max_size=4) | st.lists(inner, max_size=3).map(tuple)
                   | st.dictionaries(st.text(max_size=5), inner, max_size=4)),
    max_leaves=40)


@given(_VALUES)
def test_the_text_is_json_dumps_indent_2(value: Any) -> None:
    assert json_text(value) == json.dumps(value, indent=2)


class _Kind(enum.IntEnum):
    ONE = 1


@pytest.mark.parametrize("value", [
    {3: "int key", None: "none key", 2.5: "float key", True: "bool key"},
    {"nan": math.nan, "inf": [math.inf, -math.inf]},
    {"enum": _Kind.ONE, "str subclass": type("S", (str,), {})("x")},
    {"nested": {"": [], "e": {}, "u": "\u00e9\u2028\U0001f600\x00\"\\"}},
])
def test_what_it_leaves_to_json_dumps_reads_the_same(value: Any) -> None:
    assert json_text(value) == json.dumps(value, indent=2)


def test_what_json_cannot_hold_fails_as_json_dumps_does() -> None:
    with pytest.raises(TypeError):
        json_text({"a": {1, 2}})
    looped: list[Any] = []
    looped.append(looped)
    with pytest.raises(ValueError, match="Circular reference"):
        json_text({"loop": looped})
