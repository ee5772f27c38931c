"""Parsing uv.lock: every source kind, forks, extras, groups, and clear errors for bad input."""

from __future__ import annotations

import re

import pytest

from gpurl_tasks.config import PythonSelection, TargetSpec
from gpurl_tasks.errors import LockError
from gpurl_tasks.plan.lock import install_closure, parse_lock
from tests.support.locks import GenPackage, render_lock

TARGET = TargetSpec()

SOURCES = """version = 1
revision = 2
requires-python = ">=3.12"

[manifest]
members = ["app", "member"]

[[package]]
name = "app"
version = "0.1.0"
source = { editable = "." }
dependencies = [
    { name = "from-git" },
    { name = "from-url" },
    { name = "local-path" },
    { name = "local-dir" },
    { name = "member" },
    { name = "Mixed_Case" },
]

[[package]]
name = "from-git"
version = "1.0"
source = { git = "https://example.invalid/repo?rev=abc#abc0123456789abcdef0123456789abcdef0123" }

[[package]]
name = "from-url"
version = "2.0"
source = { url = "https://example.invalid/from_url-2.0-py3-none-any.whl" }
wheels = [{ url = "https://example.invalid/from_url-2.0-py3-none-any.whl", hash = "sha256:aa" }]

[[package]]
name = "local-path"
version = "3.0"
source = { path = "wheels/local_path-3.0-py3-none-any.whl" }
wheels = [{ filename = "local_path-3.0-py3-none-any.whl", hash = "sha256:bb" }]

[[package]]
name = "local-dir"
version = "4.0"
source = { directory = "libs/local-dir" }

[[package]]
name = "member"
version = "0.1.0"
source = { virtual = "packages/member" }

[[package]]
name = "mixed-case"
version = "1.0"
source = { registry = "https://pypi.org/simple" }
sdist = { url = "https://files.example/mixed_case-1.0.tar.gz", hash = "sha256:cc", size = 10 }
""".replace('"sha256:aa"', f'"sha256:{"aa" * 32}"').replace('"sha256:bb"', f'"sha256:{"bb" * 32}"') \
    .replace('"sha256:cc"', f'"sha256:{"cc" * 32}"')  # real hashes: 64 hex digits


def test_every_source_kind_is_parsed_and_local_ones_are_set_apart() -> None:
    lock = parse_lock(SOURCES)
    assert lock.revision == 2 and lock.members == ("app", "member")
    kinds = {p.name: p.source_kind for p in lock.packages}
    assert kinds == {"app": "editable", "from-git": "git", "from-url": "url",
                     "local-path": "path", "local-dir": "directory", "member": "virtual",
                     "mixed-case": "registry"}
    closure = install_closure(lock, TARGET, PythonSelection())
    assert [p.name for p in closure.packages] == ["from-git", "from-url", "mixed-case"]
    assert [p.name for p in closure.local] == ["app", "local-dir", "local-path", "member"]


def _fork_lock() -> str:
    linux = GenPackage("torch", "2.11.0+cu128", 900, fork_marker="sys_platform == 'linux'")
    mac = GenPackage("torch", "2.11.0", 80, fork_marker="sys_platform == 'darwin'")
    linux.deps = [("nvidia-x", None, "sys_platform == 'linux'")]
    nvidia = GenPackage("nvidia-x", "12.8", 500)
    return render_lock(
        [linux, mac, nvidia, GenPackage("tyro", "0.9", 1), GenPackage("pytest", "8.0", 1)],
        root_deps=[("torch", "2.11.0+cu128", "sys_platform == 'linux'"),
                   ("torch", "2.11.0", "sys_platform == 'darwin'")],
        extras={"ep": [("tyro", None, None)]},
        dev=[("pytest", None, None)],
    )


def test_forked_package_resolves_to_the_target_version() -> None:
    closure = install_closure(parse_lock(_fork_lock()), TARGET, PythonSelection())
    assert {(p.name, p.version) for p in closure.packages} == {
        ("torch", "2.11.0+cu128"), ("nvidia-x", "12.8")}


def test_extras_and_groups_select_their_packages() -> None:
    lock = parse_lock(_fork_lock())
    names = lambda sel: {p.name for p in install_closure(lock, TARGET, sel).packages}  # noqa: E731
    assert "tyro" in names(PythonSelection(extras=("ep",)))
    assert "tyro" not in names(PythonSelection())
    assert "pytest" in names(PythonSelection(no_dev=False))
    assert "pytest" not in names(PythonSelection(no_dev=True))


def test_unknown_extra_names_the_known_ones() -> None:
    with pytest.raises(LockError, match=r"extra 'vllm' is not defined by root.*known extras: ep"):
        install_closure(parse_lock(_fork_lock()), TARGET, PythonSelection(extras=("vllm",)))


def test_conflict_markers_use_set_semantics() -> None:
    """uv encodes root extras as `extra-<len>-<pkg>-<name>`; `!=` is true when not activated."""
    text = render_lock(
        [GenPackage("a", "1", 1), GenPackage("b", "1", 1)],
        root_deps=[("a", None, "extra == 'extra-4-root-x' and extra != 'extra-4-root-y'"),
                   ("b", None, "extra == 'extra-4-root-y'")],
        extras={"x": [], "y": []}, dev=[],
    ).replace("x = []", 'x = [{ name = "a" }]').replace("y = []", 'y = [{ name = "b" }]')
    lock = parse_lock(text)
    pick = lambda *e: [p.name for p in install_closure(lock, TARGET, PythonSelection(extras=e)).packages]  # noqa: E731
    assert pick("x") == ["a"]
    assert pick("y") == ["b"]
    assert pick() == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version = 1\n[[package]\n", "is not valid TOML"),
        ("version = 2\n", "lock version 2 is not supported"),
        ("version = 1\nrevision = 99\n", "lock revision 99 is not supported"),
        ('version = 1\n[[package]]\nversion = "1"\n', r"package\[0\] has no 'name'"),
        ('version = 1\n[[package]]\nname = "a"\nsource = { nowhere = "x" }\n',
         r"package\[0\] \(a\)\.source must name exactly one of"),
        ('version = 1\n[[package]]\nname = "a"\nsource = { registry = "r" }\n'
         'dependencies = [{ name = "b", marker = "sys_platform ==" }]\n',
         r"package\[0\] \(a\)\.dependencies\[0\]\.marker is invalid"),
        ('version = 1\n[[package]]\nname = "a"\nsource = { registry = "r" }\n'
         'wheels = [{ url = "https://x.example/a-1-py3-none-any.whl", size = -3 }]\n',
         r"package\[0\] \(a\)\.wheels\[0\]\.size must be a non-negative integer"),
        ('version = 1\n[[package]]\nname = "a"\nsource = { registry = "r" }\nwheels = "x"\n',
         r"package\[0\] \(a\)\.wheels must be a list"),
    ],
)
def test_malformed_locks_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(LockError, match=message):
        parse_lock(text, source="bad.lock")


def test_dangling_dependency_is_reported() -> None:
    text = render_lock([], root_deps=[("ghost", None, None)], extras={}, dev=[])
    with pytest.raises(LockError, match="root depends on ghost but the lock has no package"):
        install_closure(parse_lock(text), TARGET, PythonSelection())


CONFLICTING = """version = 1
revision = 2
requires-python = ">=3.12"
conflicts = [[
    { package = "app", extra = "a" },
    { package = "app", extra = "b" },
], [
    { package = "app", group = "dev" },
    { package = "app", group = "g" },
]]

[[package]]
name = "app"
version = "0.1.0"
source = { editable = "." }
"""
_HINTED_KEY = re.compile(r"\[tool\.gpurl\.(profiles\.[A-Z]+\.variants\.[A-Z]+|[a-z-]+)\] "
                         r"([a-z-]+(?: / [a-z-]+)*)")


@pytest.mark.parametrize(("selection", "keys"), [
    (PythonSelection(extras=("a", "b")), {"extras", "python.extras"}),
    (PythonSelection(groups=("g",), no_dev=False), {"groups", "python.groups", "python.no-dev"}),
])
def test_conflict_hint_names_only_real_config_keys(selection: PythonSelection,
                                                    keys: set[str]) -> None:
    from gpurl_tasks.config import _VARIANT_KEYS, _known_keys
    from gpurl_tasks.plan.lock import check_conflicts

    lock = parse_lock(CONFLICTING)
    with pytest.raises(LockError) as err:
        check_conflicts(lock, "app", selection)
    hint = err.value.hint or ""
    named = set()
    for table, listed in _HINTED_KEY.findall(hint):
        for key in listed.split(" / "):
            named.add(key if table.startswith("profiles.") else f"{table}.{key}")
    assert named == keys, hint
    for key in named:
        assert key in (_VARIANT_KEYS if "." not in key else _known_keys()), key
    assert "python-extras" not in hint and "python-groups" not in hint
