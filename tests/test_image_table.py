"""Pinning into a typed image table (launcher/table.py), pure: the span editor on a module
shaped like the team's `cloud/iris/gpu_rl_images.py`. What a pin means is checked by running
the edited module in a scratch namespace and reading its table, as the launcher would."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpurl_tasks.config import LauncherSettings, load_config
from gpurl_tasks.errors import ConfigError, PinError
from gpurl_tasks.launcher.table import EntryPin, TableShape, check_entries, entry_commit, pin_entries
from gpurl_tasks.rebuild.inputs import default_since
from tests.conftest import REPO_ROOT
from tests.support.image_table import (
    HARBOR,
    KEYS,
    SOURCE,
    evaluate,
    key_of,
    old_digest,
    table_module,
)

SHAPE = TableShape.of(LauncherSettings(table="GPU_RL_IMAGES"))  # the defaults: the team's
OLD = table_module()
NEW_COMMIT = "0123456789abcdef0123456789abcdef01234567"
_PREFIX = {"STANDARD": "gpu-rl", "MEGATRON": "gpu-rl-megatron"}
_SUFFIX = {"AMD64": "", "ARM64": "-arm64"}


def full_tag(arch: str, flavor: str, commit: str) -> str:
    """The tag the team's f-string gives for `commit`."""
    return f"{_PREFIX[flavor]}-{commit}{_SUFFIX[arch]}"


def digest_of(n: int) -> str:
    return "sha256:" + f"{n:064x}"


def entry_lines(text: str, key: tuple[str, str]) -> list[int]:
    """Indices of the digest, tag and source_commit lines of `key`'s entry in the fixture."""
    start = text.splitlines().index(f"    {key_of(*key)}: GpuRlImage(")
    return [start + 3, start + 4, start + 5]


def test_pinning_every_entry_of_one_commit_moves_the_variable_once() -> None:
    """All four entries, one commit, tags the team's f-strings give: SOURCE_COMMIT changes
    once and each digest; no tag or source_commit line is touched."""
    pins = [EntryPin(key=key_of(*k), digest=digest_of(i), tag=full_tag(*k, NEW_COMMIT),
                     commit=NEW_COMMIT) for i, k in enumerate(KEYS)]
    new = pin_entries(OLD, SHAPE, pins)
    expected = OLD.replace(f'SOURCE_COMMIT = "{SOURCE}"', f'SOURCE_COMMIT = "{NEW_COMMIT}"')
    for i, key in enumerate(KEYS):
        expected = expected.replace(old_digest(key), digest_of(i))
    assert new == expected
    assert evaluate(new) == {k: {"digest": digest_of(i), "tag": full_tag(*k, NEW_COMMIT),
                                 "source_commit": NEW_COMMIT, "harbor_commit": HARBOR}
                             for i, k in enumerate(KEYS)}


def test_pinning_one_entry_alone_writes_its_own_values() -> None:
    """One entry, an image tagged with the short sha: it gets literal values, SOURCE_COMMIT
    and the three other entries keep theirs."""
    key = ("ARM64", "MEGATRON")
    pin = EntryPin(key=key_of(*key), digest=digest_of(7), tag="gpu-rl-megatron-0123456",
                   commit=NEW_COMMIT)
    new = pin_entries(OLD, SHAPE, [pin])
    old_lines, new_lines = OLD.splitlines(), new.splitlines()
    digest, tag, commit = entry_lines(OLD, key)
    assert [i for i, (a, b) in enumerate(zip(old_lines, new_lines, strict=True)) if a != b] == [
        digest, tag, commit]
    assert new_lines[digest] == f'        digest="{digest_of(7)}",'
    assert new_lines[tag] == '        tag="gpu-rl-megatron-0123456",'
    assert new_lines[commit] == f'        source_commit="{NEW_COMMIT}",'
    before, after = evaluate(OLD), evaluate(new)
    assert after[key] == {"digest": digest_of(7), "tag": "gpu-rl-megatron-0123456",
                          "source_commit": NEW_COMMIT, "harbor_commit": HARBOR}
    assert {k: v for k, v in after.items() if k != key} == \
        {k: v for k, v in before.items() if k != key}
    assert pin_entries(new, SHAPE, [pin]) == new


def test_a_commit_variable_read_outside_the_table_stays() -> None:
    """Every entry pinned to one commit, but the module reads SOURCE_COMMIT elsewhere too:
    moving it would change that, so each entry gets its own values instead."""
    text = OLD + "\nSOURCE_URL = f'https://example.org/tree/{SOURCE_COMMIT}'\n"
    pins = [EntryPin(key=key_of(*k), digest=digest_of(i), tag=full_tag(*k, NEW_COMMIT),
                     commit=NEW_COMMIT) for i, k in enumerate(KEYS)]
    new = pin_entries(text, SHAPE, pins)
    assert f'SOURCE_COMMIT = "{SOURCE}"' in new
    assert new.count(f'source_commit="{NEW_COMMIT}"') == 4


def test_a_commit_variable_another_field_reads_stays() -> None:
    """Every entry pinned to one commit, but one entry's harbor_commit (a field the pin does
    not manage) reads SOURCE_COMMIT: moving it would change that field, so it stays."""
    key = ("AMD64", "STANDARD")
    text = OLD.replace("harbor_commit=HARBOR_COMMIT", "harbor_commit=SOURCE_COMMIT", 1)
    pins = [EntryPin(key=key_of(*k), digest=digest_of(i), tag=full_tag(*k, NEW_COMMIT),
                     commit=NEW_COMMIT) for i, k in enumerate(KEYS)]
    new = pin_entries(text, SHAPE, pins)
    assert f'SOURCE_COMMIT = "{SOURCE}"' in new
    assert evaluate(new)[key]["harbor_commit"] == evaluate(text)[key]["harbor_commit"] == SOURCE
    assert all(v["source_commit"] == NEW_COMMIT for v in evaluate(new).values())


_keys = st.lists(st.sampled_from(KEYS), min_size=1, max_size=4, unique=True)
_commits = st.sampled_from([SOURCE, NEW_COMMIT, "fedcba9876543210fedcba9876543210fedcba98"])


@given(_keys, st.data())
def test_only_the_pinned_spans_change_and_the_table_means_the_pins(
        keys: list[tuple[str, str]], data: st.DataObject) -> None:
    """Any entries, commits and tags (the f-string's or a short one): the edited module runs,
    its table holds the pins for their entries and the old values for every other, only the
    pinned entries' field lines and SOURCE_COMMIT's line differ, and the same pin again is a
    no-op."""
    pins = []
    for key in keys:
        commit = data.draw(_commits)
        tag = data.draw(st.sampled_from([full_tag(*key, commit), f"gpu-rl-{commit[:7]}"]))
        pins.append(EntryPin(key=key_of(*key), digest=digest_of(data.draw(st.integers(0, 9))),
                             tag=tag, commit=commit))
    new = pin_entries(OLD, SHAPE, pins)
    before, after = evaluate(OLD), evaluate(new)
    for key, pin in zip(keys, pins, strict=True):
        assert after[key] == {"digest": pin.digest, "tag": pin.tag, "source_commit": pin.commit,
                              "harbor_commit": HARBOR}
    assert {k: v for k, v in after.items() if k not in keys} == \
        {k: v for k, v in before.items() if k not in keys}
    old_lines, new_lines = OLD.splitlines(keepends=True), new.splitlines(keepends=True)
    allowed = {i for key in keys for i in entry_lines(OLD, key)}
    allowed.add(old_lines.index(f'SOURCE_COMMIT = "{SOURCE}"\n'))
    assert len(old_lines) == len(new_lines)
    changed = [(i, a, b) for i, (a, b) in enumerate(zip(old_lines, new_lines, strict=True)) if a != b]
    assert {i for i, _, _ in changed} <= allowed
    for _, a, b in changed:  # only the value: the field's name, `=` and what follows it stay
        assert a.partition("=")[0] == b.partition("=")[0] and a[-2:] == b[-2:]
        assert b.partition("=")[2].strip(' ,\n')[0] == '"'  # a plain literal where it changed
    assert pin_entries(new, SHAPE, pins) == new


@pytest.mark.parametrize(("text", "key", "message"), [
    (OLD.replace("ImageVariant.MEGATRON): GpuRlImage(", "ImageVariant.STANDARD): GpuRlImage(", 1),
     ("AMD64", "MEGATRON"), "has no entry (ImageArchitecture.AMD64, ImageVariant.MEGATRON)"),
    (OLD.replace("ImageVariant.MEGATRON): GpuRlImage(", "ImageVariant.STANDARD): GpuRlImage(", 1),
     ("AMD64", "STANDARD"), "has 2 entries (ImageArchitecture.AMD64, ImageVariant.STANDARD)"),
    (OLD.replace(old_digest(("ARM64", "STANDARD")), "sha256:abc123"), ("AMD64", "STANDARD"),
     "the digest of entry (ImageArchitecture.ARM64, ImageVariant.STANDARD) is 'sha256:abc123', "
     "not sha256:<64 hex digits>"),
    (OLD.replace(f'"{old_digest(("AMD64", "STANDARD"))}"',
                 f'"ghcr.io/example-org/example-agent@{old_digest(("AMD64", "STANDARD"))}"'),
     ("AMD64", "STANDARD"), "not sha256:<64 hex digits>"),
    (OLD.replace("GPU_RL_IMAGES = {", "GPU_RL_IMAGES = dict({", 1).replace(
        "\n}\n\nCLUSTER", "\n})\n\nCLUSTER"), ("AMD64", "STANDARD"), "is not a dict literal"),
    (OLD.replace("GPU_RL_IMAGES = {", "IMAGES = {"), ("AMD64", "STANDARD"),
     "has no assignment to GPU_RL_IMAGES"),
    (OLD.replace("class ImageVariant(StrEnum):", "class ImageVariant(StrEnum)"),
     ("AMD64", "STANDARD"), "is not valid Python"),
])
def test_bad_tables_are_named(text: str, key: tuple[str, str], message: str) -> None:
    with pytest.raises(PinError) as info:
        check_entries(text, SHAPE, [key_of(*key)], where="gpu_rl_images.py")
    assert message in info.value.message and info.value.hint
    with pytest.raises(PinError):
        pin_entries(text, SHAPE, [EntryPin(key=key_of(*key), digest=digest_of(1), tag="gpu-rl-1234567",
                                           commit=NEW_COMMIT)])


def test_the_pinned_commit_is_read_through_the_variable_it_names() -> None:
    assert entry_commit(OLD, SHAPE, key_of("AMD64", "STANDARD")) == SOURCE
    pinned = pin_entries(OLD, SHAPE, [EntryPin(key=key_of("AMD64", "MEGATRON"), digest=digest_of(2),
                                               tag="gpu-rl-megatron-0123456", commit=NEW_COMMIT)])
    assert entry_commit(pinned, SHAPE, key_of("AMD64", "MEGATRON")) == NEW_COMMIT
    assert entry_commit(pinned, SHAPE, key_of("AMD64", "STANDARD")) == SOURCE
    assert entry_commit("GPU_RL_IMAGES = {}\n", SHAPE, key_of("AMD64", "STANDARD")) is None


def test_rebuild_needed_starts_from_the_tables_commit(repo_tmp: Path) -> None:
    """The default --since of a variant pinned into a table is its entry's commit (the
    module-level variable it names), when this clone has it."""
    head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD~1"], check=True,
                          capture_output=True, text=True).stdout.strip()
    module = repo_tmp / "gpu_rl_images.py"
    module.write_text(table_module(source=head))
    config = load_config(REPO_ROOT, profile="gpu-rl", variant="megatron", env={
        "GPURL_LAUNCHER_PATH": str(module), "GPURL_LAUNCHER_TABLE": "GPU_RL_IMAGES"})
    assert config.variant.table_key == key_of("AMD64", "MEGATRON")
    assert default_since(config, REPO_ROOT) == (
        head, "GPU_RL_IMAGES[(ImageArchitecture.AMD64, ImageVariant.MEGATRON)] in gpu_rl_images.py")


# --- the config that describes the table ------------------------------------------------------

TEAM = '''
[tool.gpurl.launcher]
path = "cloud/iris/gpu_rl_images.py"
table = "GPU_RL_IMAGES"

[tool.gpurl.profiles.team.variants.standard]
extras = ["vllm", "fsdp"]

[tool.gpurl.profiles.team.variants.megatron]
extras = ["vllm", "megatron"]

[tool.gpurl.profiles.team.variants.standard-arm64]
extras = ["vllm", "fsdp"]
table-key = "(ImageArchitecture.ARM64,ImageVariant.STANDARD)"
target = {arch = "aarch64"}
'''


def test_the_teams_table_in_a_few_lines_of_config(tmp_path: Path) -> None:
    """The defaults name the team's key and fields; a variant whose name is not the enum's
    sets its own key (spelled as it likes); no variant needs a launcher variable."""
    config = load_config(tmp_path, profile="team", env={}, pyproject_text=TEAM)
    assert {v.name: v.table_key for v in config.variants} == {
        "standard": key_of("AMD64", "STANDARD"), "megatron": key_of("AMD64", "MEGATRON"),
        "standard-arm64": key_of("ARM64", "STANDARD")}
    shape = TableShape.of(config.launcher)
    assert (shape.table, *shape.fields, shape.commit_variable) == (
        "GPU_RL_IMAGES", "digest", "tag", "source_commit", "SOURCE_COMMIT")


@pytest.mark.parametrize(("key", "message"), [
    ("(ImageArchitecture.ARM64, ImageVariant.STANDARD)",
     "variants 'megatron' and 'standard-arm64' of profile 'team' both pin into the GPU_RL_IMAGES "
     "entry (ImageArchitecture.ARM64, ImageVariant.STANDARD)"),
    ("(ImageArchitecture.{ARCH}, ", "is not a Python expression"),
])
def test_table_keys_that_cannot_work_are_config_errors(tmp_path: Path, key: str,
                                                       message: str) -> None:
    """The megatron variant keyed as another variant's entry, or not as Python at all."""
    text = TEAM.replace('extras = ["vllm", "megatron"]\n',
                        f'extras = ["vllm", "megatron"]\ntable-key = "{key}"\n')
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, profile="team", env={}, pyproject_text=text)
    assert message in info.value.message and info.value.hint
