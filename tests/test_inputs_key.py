"""The inputs key (rebuild/inputs_key.py): one key per set of build inputs, whatever order they
come in; any one input changed, another key. Pure: no git, no registry."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpurl_tasks.dockerfile.inputs import parse_dockerfile_inputs
from gpurl_tasks.dockerfile.wheels import WheelPins
from gpurl_tasks.rebuild.fingerprint import fingerprint
from gpurl_tasks.rebuild.inputs_key import INPUTS_TAG_PREFIX, inputs_key, inputs_tag

# a name never starts with "-": apt would read it as an option, not a package
NAME = st.text("abcdefgh-", min_size=1, max_size=6).filter(lambda name: not name.startswith("-"))
HEX = st.text("0123456789abcdef", min_size=4, max_size=8)
INPUTS = st.fixed_dictionaries({
    "base_arg": st.sampled_from(["debian:12", "debian:13", "ubuntu:22.04"]),
    "apt": st.lists(NAME, max_size=3, unique=True),
    "closure": st.dictionaries(NAME, st.tuples(st.sampled_from(["1.0", "2.0"]), HEX), max_size=4),
    "extras": st.lists(NAME, max_size=2, unique=True),
    "config": st.dictionaries(st.sampled_from(["a.b", "c.d", "e.f"]), st.text("xyz", max_size=3),
                              max_size=3),
    "copied": st.dictionaries(st.sampled_from(["ws/a.py", "ws/b.py", "docker/x.txt"]), HEX,
                              max_size=3),
    "base": st.sampled_from(["b@sha256:" + "1" * 64, "b@sha256:" + "2" * 64, "b:tag"]),
    "wheel_source": st.sampled_from(["", "prebuilt-wheelhouse", "wheel-builder"]),
})
PINS = WheelPins(vllm_version="0.1", vllm_fork_commit="0" * 40, flash_attn_version="2.0",
                 torch_version="2.4", cuda_tag="cu124", python="3.11", arch="x86_64", glibc="2.28")


def _key(inputs: dict[str, Any], *, reverse: bool = False) -> str:
    """The key of `inputs`; `reverse`: every collection handed over in the other order."""
    order = (lambda xs: list(reversed(list(xs)))) if reverse else list
    apt = " ".join(order(inputs["apt"])) or "true"
    text = (f'ARG BASE_IMAGE="{inputs["base_arg"]}"\nFROM ${{BASE_IMAGE}} AS rl\n'
            f"RUN apt-get install -y {apt}\n")
    closure = [(name, *pair) for name, pair in order(inputs["closure"].items())]
    config = dict(order((k, ("image", v)) for k, v in inputs["config"].items()))
    fp = fingerprint(parse_dockerfile_inputs(text), closure, order(inputs["extras"]), PINS,
                     config=config, compiled=False)
    return inputs_key(fp, dict(order(inputs["copied"].items())), inputs["base"],
                      inputs["wheel_source"])


@given(INPUTS)
def test_the_same_inputs_in_any_order_are_one_key(inputs: dict[str, Any]) -> None:
    assert _key(inputs) == _key(inputs, reverse=True)
    assert len(_key(inputs)) == 64 and inputs_tag(_key(inputs)).startswith(INPUTS_TAG_PREFIX)


@given(INPUTS, INPUTS)
def test_inputs_that_differ_are_another_key(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Two sets of inputs share a key exactly when each input is the same (apt and extras as
    sets: the fingerprint sorts them; closure, config and copied files as mappings)."""
    same = {k: (set(v) if k in ("apt", "extras") else v) for k, v in a.items()} == \
        {k: (set(v) if k in ("apt", "extras") else v) for k, v in b.items()}
    assert (_key(a) == _key(b)) == same


@given(INPUTS, st.sampled_from(["ws/a.py", "ws/new.py"]), HEX)
def test_one_workspace_file_edited_is_another_key(inputs: dict[str, Any], path: str,
                                                  blob: str) -> None:
    """A source-only edit (which `rebuild-needed` rightly answers `none`) changes the image's
    bytes, so it changes the key."""
    edited = {**inputs, "copied": {**inputs["copied"], path: blob + "0"}}
    assert _key(edited) != _key(inputs)
