"""Wheel choice by tag priority, size sources and their precedence, and the unknown-size stop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpurl_tasks.config import TargetSpec
from gpurl_tasks.errors import SizeError
from gpurl_tasks.plan.lock import Artifact, LockedPackage
from gpurl_tasks.plan.sizes import load_size_sources, package_sizes, select_wheel
from gpurl_tasks.plan.target import target_tags

TAGS = target_tags(TargetSpec(python="3.12", arch="x86_64", glibc="2.35"))


def _pkg(name: str, wheels: list[tuple[str, int | None]], sdist: bool = False) -> LockedPackage:
    return LockedPackage(
        name=name, version="1.0", source_kind="registry", source={"registry": "r"},
        dependencies=(), optional_dependencies={}, dev_dependencies={},
        wheels=tuple(Artifact(url=f"https://x/{f}", filename=f, hash=None, size=s) for f, s in wheels),
        sdist=Artifact(url="https://x/s.tar.gz", filename="s.tar.gz", hash=None, size=5) if sdist else None,
    )


def test_select_wheel_prefers_the_most_specific_compatible_tag() -> None:
    pkg = _pkg("a", [
        ("a-1.0-py3-none-any.whl", 1),
        ("a-1.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", 2),
        ("a-1.0-cp312-cp312-manylinux_2_28_x86_64.whl", 3),
        ("a-1.0-cp312-cp312-manylinux_2_39_x86_64.whl", 4),  # newer glibc than the target
        ("a-1.0-cp312-cp312-manylinux_2_28_aarch64.whl", 5),
        ("a-1.0-cp311-cp311-manylinux_2_28_x86_64.whl", 6),
        ("a-1.0-cp312-cp312-macosx_11_0_arm64.whl", 7),
    ])
    chosen = select_wheel(pkg, TAGS)
    assert chosen is not None and chosen.size == 3


def test_select_wheel_falls_back_to_abi3_then_pure() -> None:
    assert select_wheel(_pkg("a", [("a-1.0-py3-none-any.whl", 1),
                                   ("a-1.0-cp39-abi3-manylinux_2_17_x86_64.whl", 2)]), TAGS).size == 2
    assert select_wheel(_pkg("a", [("a-1.0-py3-none-any.whl", 1)]), TAGS).size == 1
    assert select_wheel(_pkg("a", [("a-1.0-cp312-cp312-win_amd64.whl", 1)]), TAGS) is None


def test_override_beats_lock_and_version_key_beats_name_key(tmp_path: Path) -> None:
    overrides = tmp_path / "o.json"
    overrides.write_text(json.dumps({"A": 10, "a==1.0": 20, "b": 30}))
    sources = load_size_sources(overrides, None)
    sizes = package_sizes([_pkg("a", [("a-1.0-py3-none-any.whl", 1)]),
                           _pkg("b", [("b-1.0-py3-none-any.whl", None)])], TAGS, sources)
    assert [(s.name, s.compressed_bytes, s.source) for s in sizes] == [
        ("a", 20, "override"), ("b", 30, "override")]


def test_probe_cache_fills_missing_sizes_and_gives_installed_size(tmp_path: Path) -> None:
    cache = tmp_path / "probed.json"
    cache.write_text(json.dumps({"https://x/b-1.0-py3-none-any.whl":
                                 {"compressed": 7, "installed": 11}}))
    (size,) = package_sizes([_pkg("b", [("b-1.0-py3-none-any.whl", None)])], TAGS,
                            load_size_sources(None, cache))
    assert (size.compressed_bytes, size.installed_bytes, size.source) == (7, 11, "probe")


def test_unknown_sizes_are_all_listed_with_the_remedy(tmp_path: Path) -> None:
    pkgs = [_pkg("torch", [("torch-1.0-cp312-cp312-manylinux_2_28_x86_64.whl", None)]),
            _pkg("flash-attn", [], sdist=True),
            _pkg("ok", [("ok-1.0-py3-none-any.whl", 5)])]
    overrides = tmp_path / "overrides.json"
    overrides.write_text("{}")
    with pytest.raises(SizeError) as info:
        package_sizes(pkgs, TAGS, load_size_sources(overrides, None))
    err = info.value
    assert "2 package size(s) unknown" in err.message
    assert "torch==1.0 (its wheel has no compressed size in the lock" in err.message
    assert "flash-attn==1.0 (no wheel for the target and only an sdist" in err.message
    assert "ok==" not in err.message
    assert err.hint is not None and "overrides.json" in err.hint and "--probe" in err.hint


def test_an_sdist_only_package_hint_says_how_to_get_its_size(tmp_path: Path) -> None:
    """No wheel, no size: the hint says how to build the wheel, where its size goes, and the
    exact JSON line; probing (which needs a wheel URL) is not offered for it."""
    overrides = tmp_path / "overrides.json"
    overrides.write_text("{}")
    with pytest.raises(SizeError) as info:
        package_sizes([_pkg("flash-attn", [], sdist=True)], TAGS,
                      load_size_sources(overrides, None))
    hint = info.value.hint or ""
    assert "`pip wheel --no-deps flash-attn==1.0 -w " in hint
    assert "`uv build --wheel`" in hint
    assert f'add "flash-attn==1.0": BYTES to {overrides} (layers.size-overrides)' in hint
    assert "--probe" not in hint
    # the line, with the built wheel's byte count for BYTES, is what the plan then reads
    overrides.write_text('{\n' + hint.split("add ", 1)[1].split(" to ", 1)[0]
                         .replace("BYTES", "4321") + "\n}\n")
    (size,) = package_sizes([_pkg("flash-attn", [], sdist=True)], TAGS,
                            load_size_sources(overrides, None))
    assert (size.compressed_bytes, size.source) == (4321, "override")


def test_without_an_override_file_the_hint_names_the_config_key() -> None:
    with pytest.raises(SizeError) as info:
        package_sizes([_pkg("flash-attn", [], sdist=True)], TAGS, load_size_sources(None, None))
    assert "a JSON file named by layers.size-overrides" in (info.value.hint or "")


def test_a_named_override_file_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    """A typo in --size-overrides must not silently drop every override."""
    with pytest.raises(SizeError, match=r"missing\.json does not exist"):
        load_size_sources(tmp_path / "missing.json", None)
    assert load_size_sources(None, tmp_path / "no-cache-yet.json").probed == {}


@pytest.mark.parametrize("content", ['{"a": "big"}', '{"a": -1}', "[1]", "{nope"])
def test_bad_override_file_is_a_clear_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "o.json"
    path.write_text(content)
    with pytest.raises(SizeError, match=r"o\.json"):
        load_size_sources(path, None)
