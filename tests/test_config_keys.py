"""Each config key is declared once: its description on its field, one spelling in a variant,
one name per meaning; a retired spelling is one error naming what to write instead."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest

from gpurl_tasks import config as cfg
from gpurl_tasks.config import load_config
from gpurl_tasks.errors import ConfigError

BASE = """
[tool.gpurl]
default-profile = "a"
[tool.gpurl.profiles.a]
workspace = "ws"
[tool.gpurl.profiles.a.build]
import-asserts = ["import os"]
[tool.gpurl.profiles.a.variants.one]
[tool.gpurl.profiles.a.variants.two]
launcher-variable = "TWO_IMAGE"
"""


def _load(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> cfg.Config:
    (tmp_path / "pyproject.toml").write_text(text)
    return load_config(tmp_path, env=env or {})


def _every_key() -> list[tuple[str, Any, dataclasses.Field[Any]]]:
    """(dotted key, its type, its field) for every key, top keys included."""
    top = {f.name: f for f in dataclasses.fields(cfg.Config)}
    keys = [(k, cfg._hints(cfg.Config)[k], top[k]) for k in cfg._TOP_KEYS]
    for section, cls in cfg._SECTIONS.items():
        keys += [(f"{section}.{cfg._key(f.name)}", cfg._hints(cls)[f.name], f)
                 for f in dataclasses.fields(cls)]
    return keys


@pytest.mark.parametrize(("dotted", "hint", "field"), _every_key(),
                         ids=[dotted for dotted, _, _ in _every_key()])
def test_a_keys_description_names_each_of_its_choices(dotted: str, hint: Any,
                                                      field: dataclasses.Field[Any]) -> None:
    """The one description of a key (its field's doc) is true of its type: a key of fixed
    choices names every one (a description once offered layers.mode = "chain", which the
    type refuses)."""
    doc = cfg.key_doc(field)
    assert "\n" not in doc and doc == doc.strip(), dotted
    if get_origin(hint) is Literal:
        missing = [c for c in get_args(hint) if not re.search(rf"(?<![\w-]){c}(?![\w-])", doc)]
        assert not missing, f"{dotted}'s doc does not name {missing}: {doc}"


def test_the_packing_keys_are_declared_once() -> None:
    """layers.mode, own-layer and tail-groups are the planner's Layout fields themselves, so
    the config's values reach the planner whole and the defaults cannot drift apart."""
    packing = {f.name: f for f in dataclasses.fields(cfg.Layout) if f.name != "max_slices"}
    layers = {f.name: f for f in dataclasses.fields(cfg.LayerSettings)}
    assert set(packing) == {"mode", "own_layer", "tail_groups"}
    assert all(packing[name] is layers[name] for name in packing)
    chosen = cfg.LayerSettings(mode="independent", own_layer=7, tail_groups=3).layout
    assert (chosen.mode, chosen.own_layer, chosen.tail_groups, chosen.max_slices) == \
        ("independent", 7, 3, None)


def test_the_two_gzip_levels_are_two_keys(tmp_path: Path) -> None:
    """The slice writer's level and kaniko's are set apart, each with its old default."""
    default = _load(tmp_path, BASE)
    assert (default.layers.slice_gzip_level, default.cluster.kaniko_gzip_level) == (6, 9)
    both = _load(tmp_path, BASE + "[tool.gpurl.profiles.a.layers]\nslice-gzip-level = 5\n"
                 "[tool.gpurl.profiles.a.cluster]\nkaniko-gzip-level = 4\n")
    assert (both.layers.slice_gzip_level, both.cluster.kaniko_gzip_level) == (5, 4)


def test_a_variants_dockerfile_and_asserts_each_have_one_place(tmp_path: Path) -> None:
    """dockerfile in the variant's build table replaces the profile's; import-asserts in the
    variant's own table add to the profile's."""
    one, two = _load(tmp_path, BASE + 'import-asserts = ["import json"]\n'
                     "[tool.gpurl.profiles.a.variants.two.build]\n"
                     'dockerfile = "docker/Dockerfile.two"\n').variants
    assert two.build.dockerfile == tmp_path / "docker" / "Dockerfile.two"
    assert (one.build.import_asserts, two.build.import_asserts) == (
        ("import os",), ("import os", "import json"))


RETIRED = [
    # (what the pyproject adds, GPURL_* variables, the message, the hint)
    ("[tool.gpurl.layers]\ncompression-level = 6\n", {},
     "layers.compression-level in [tool.gpurl] is now layers.slice-gzip-level",
     "write slice-gzip-level = N in its layers table instead (the same N gives the same layers)"),
    ("[tool.gpurl.profiles.a.cluster]\ncompression-level = 9\n", {},
     "cluster.compression-level in [tool.gpurl.profiles.a] is now cluster.kaniko-gzip-level",
     "write kaniko-gzip-level = N in its cluster table instead (the same N gives the same layers)"),
    ("[tool.gpurl.profiles.a.variants.two.cluster]\ncompression-level = 9\n", {},
     "cluster.compression-level in [tool.gpurl.profiles.a.variants.two.cluster] is now "
     "cluster.kaniko-gzip-level",
     "write kaniko-gzip-level = N in its cluster table instead (the same N gives the same layers)"),
    ("", {"GPURL_LAYERS_COMPRESSION_LEVEL": "6"},
     "layers.compression-level in $GPURL_LAYERS_COMPRESSION_LEVEL is now layers.slice-gzip-level",
     "set $GPURL_LAYERS_SLICE_GZIP_LEVEL instead (the same N gives the same layers)"),
    ('dockerfile = "docker/Dockerfile.two"\n', {},
     "a variant's dockerfile is written in [tool.gpurl.profiles.a.variants.two.build], not in "
     "[tool.gpurl.profiles.a.variants.two]",
     "move the key there, as every build key of a variant"),
    ('[tool.gpurl.profiles.a.variants.two.build]\nimport-asserts = ["import json"]\n', {},
     "a variant's import-asserts are written in [tool.gpurl.profiles.a.variants.two], not in "
     "[tool.gpurl.profiles.a.variants.two.build]",
     "move the key there: its entries are added to the profile's import-asserts"),
    # a retired key: nothing reads it (the job's script is rendered at submit time)
    ('[tool.gpurl.build]\nkaniko-script = "docker/build_gpu_rl_kaniko.sh"\n', {},
     "build.kaniko-script in [tool.gpurl] was retired: the job's script is rendered "
     "when `invoke build` submits it, and nothing rendered is committed",
     "remove kaniko-script from its build table; nothing reads the script it named either: "
     "delete it"),
    ('[tool.gpurl.profiles.a.variants.two.build]\nkaniko-script = "docker/two.sh"\n', {},
     "build.kaniko-script in [tool.gpurl.profiles.a.variants.two.build] was retired: ",
     "remove kaniko-script from its build table; nothing reads the script it named either: "
     "delete it"),
    ("", {"GPURL_BUILD_KANIKO_SCRIPT": "docker/build_a_kaniko.sh"},
     "build.kaniko-script in $GPURL_BUILD_KANIKO_SCRIPT was retired: ",
     "unset $GPURL_BUILD_KANIKO_SCRIPT; nothing reads the script it named either: delete it"),
]


@pytest.mark.parametrize(("added", "env", "message", "hint"), RETIRED,
                         ids=["layers-level", "cluster-level", "variant-cluster-level",
                              "level-variable", "variant-dockerfile", "variant-build-asserts",
                              "kaniko-script", "variant-kaniko-script", "kaniko-script-variable"])
def test_a_retired_spelling_names_the_one_to_write(tmp_path: Path, added: str,
                                                   env: dict[str, str], message: str,
                                                   hint: str) -> None:
    """A key's old name, its other spelling in a variant, or a retired key is refused in one
    line that says what to write instead; a user's pyproject.toml may still have it."""
    text = BASE.replace("[tool.gpurl.profiles.a]\n", added + "[tool.gpurl.profiles.a]\n") \
        if added.startswith("[tool.gpurl.layers]") else BASE + added
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text, env)
    assert caught.value.message.startswith(message), caught.value.message
    assert "\n" not in caught.value.message
    assert caught.value.hint == hint
    assert cfg.unknown_variables(env) == []  # no warning besides: the error names the new one
