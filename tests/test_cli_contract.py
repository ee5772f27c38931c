"""Issue 53: the CLI contract, second pass.

`test_every_error_is_raised_with_a_hint` reads gpurl_tasks' source: an `error:` line is never
without a hint, and the hint is written where the error is raised (no class carries a
fallback), so every construction of an error class passes a `hint=` that cannot be empty. The
table runs the `gpurl` command in-process (its `main(argv)`, the same program a shell runs),
with a canary token in the environment of every case.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

from gpurl_tasks.errors import ExitCode, GpurlError
from tests.conftest import REPO_ROOT

# Classes whose own __init__ writes the hint (it takes none): the class name and why.
HINT_IN_INIT = {
    "PinMismatchError": "built from the mismatches alone; its one hint says to edit those keys",
}
# The name under which a helper holds an error class it was handed (values.py's validators,
# files.read_text): a call of it constructs that error.
ERROR_PARAMETER = "error"


def _error_classes(trees: list[ast.Module]) -> set[str]:
    """The name of every class gpurl_tasks derives from GpurlError, read from its source
    (names are unique): no module needs importing."""
    bases = {node.name: {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")
                         for b in node.bases}
             for tree in trees for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    found = {"GpurlError"}
    while grown := {name for name, of in bases.items() if of & found} - found:
        found |= grown
    return found


def _empty(node: ast.expr) -> bool:
    """A hint expression that is, or may be, no hint: None or "", also as one branch of a
    conditional (`h if c else None`) or the last resort of an `or` (`h or None`)."""
    if isinstance(node, ast.Constant):
        return not node.value
    if isinstance(node, ast.IfExp):
        return _empty(node.body) or _empty(node.orelse)
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
        return _empty(node.values[-1])
    return False


def _parsed(files: list[Path]) -> dict[str, ast.Module]:
    """Each file's syntax tree, by its path in the repository (or its name, outside it)."""
    return {(path.relative_to(REPO_ROOT).as_posix() if path.is_relative_to(REPO_ROOT) else
             path.name): ast.parse(path.read_text(encoding="utf-8")) for path in files}


def _unhinted_raises(classes: set[str], trees: dict[str, ast.Module]) -> list[str]:
    """`file:line: Class` of each construction of an error class (or of the `error` a helper
    was handed) that passes no `hint=`, or one that may be empty."""
    checked = (classes - set(HINT_IN_INIT)) | {ERROR_PARAMETER}
    found = []
    for name_of_file, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else \
                func.attr if isinstance(func, ast.Attribute) else None
            if name not in checked or (name == ERROR_PARAMETER and not isinstance(func, ast.Name)):
                continue  # `parser.error(...)` is argparse's, no error class
            hint = next((k.value for k in node.keywords if k.arg == "hint"), None)
            if hint is None or _empty(hint):
                found.append(f"{name_of_file}:{node.lineno}: {name}")
    return found


def test_every_error_is_raised_with_a_hint() -> None:
    """Each raise site of every error class writes its hint; no class has a fallback."""
    trees = _parsed(sorted((REPO_ROOT / "gpurl_tasks").rglob("*.py")))
    classes = _error_classes(list(trees.values()))
    assert {"ConfigError", "RegistryError", "RegistryUnreachable", "TagMoveRefused",
            *HINT_IN_INIT} <= classes
    missing = _unhinted_raises(classes, trees)
    assert not missing, "errors raised without a hint:\n" + "\n".join(missing)
    assert "default_hint" not in vars(GpurlError)
    from gpurl_tasks.dockerfile.checks import PinMismatchError
    assert PinMismatchError([]).hint


def test_the_hint_check_finds_a_raise_without_one(tmp_path: Path) -> None:
    """The check itself: a bare raise, `hint=None`, `hint=""`, a hint that is None on one
    branch or at the end of an `or`, and a helper's `error(...)` without one are found; a
    written hint, a variable and a re-raise of an existing error are not."""
    class Bare(GpurlError):
        pass

    source = tmp_path / "m.py"
    source.write_text('raise Bare("a")\nraise Bare("b", hint=None)\nraise Bare("c", hint="h")\n'
                      'raise errors.Bare("d")\nraise Bare("e", hint="")\n'
                      'raise Bare("f", hint="h" if x else None)\nraise Bare("g", hint=h or None)\n'
                      'raise Bare("h", hint=h)\nraise error("i")\nraise error("j", hint=h)\n'
                      'raise exc\nraise Bare("k", hint=h or "written")\nparser.error("l")\n')
    found = _unhinted_raises({"Bare"}, _parsed([source]))
    assert found == ["m.py:1: Bare", "m.py:2: Bare", "m.py:4: Bare", "m.py:5: Bare",
                     "m.py:6: Bare", "m.py:7: Bare", "m.py:9: error"]
    assert Bare("x").hint is None and Bare("x", hint="that").hint == "that"


# --- the table: the `gpurl` command in-process, a canary token in every case -------------

CANARY = "ghp_canary53ffee0123456789abcdef"
# (argv, environment, expected exit code, a phrase stderr says); "{canary}" in argv or a
# value becomes CANARY
TABLE: list[tuple[list[str], dict[str, str], int, str]] = [
    (["plan", "--cap", "12QB"], {}, 2, ""),
    (["plan", "--json", "--cap", "0"], {}, 2, ""),
    (["plan", "--lock", "/"], {}, 2, ""),
    (["plan", "--profile", "{canary}"], {}, 2, "unknown profile"),
    (["plan", "--json", "--extra"], {}, 2, "--extra needs a value"),
    (["sizes", "--extra"], {}, 2, "--extra needs a value"),
    (["plan"], {"GPURL_LAYERS_MAX_IMAGE_LAYERS": "many"}, 2, ""),
    (["plan", "--json"], {"GPURL_LAYERS_CAP": "-3GB"}, 2, ""),
    (["verify-layers", "--ref", "localhost:5/x:y", "--min-layers", "two"], {}, 2, ""),
    (["rebuild-needed", "--json", "--since", "HEAD~99999"], {}, 2, ""),
    (["pin", "--ref", "Not/A Ref", "--dry-run"], {}, 2, ""),
    (["diff", "a b", "c"], {}, 2, ""),
    (["kill", "--dry-run", "/a/b\tc"], {}, 2, "is not a job id"),
    (["watch", "--json", "/a/b\nc"], {}, 2, "is not a job id"),
    (["watch", "/a/b", "--interval", "4000000"], {}, 2, "up to 2592000"),
    (["watch", "/a/b", "--max-duration", "1" + "0" * 30], {}, 2, "up to 2592000"),
    (["build", "--dry-run", "--cluster", "{canary}"], {}, 0, ""),
    (["build", "--dry-run", "--json", "--cluster", "{canary}"], {}, 0, ""),
    (["build", "--dry-run", "--cluster", "a b"], {}, 2, ""),
    (["--project", "/nonexistent/{canary}", "plan"], {}, 2, ""),
    (["-c", "bogus", "plan"], {}, 2, "gpurl has no flag -c"),
    (["--project", "/", "plan", "--json"], {}, 2, "no gpurl project"),
    (["-r", "/nonexistent", "plan", "--json"], {}, 2, "gpurl has no flag -r"),
    (["plan", "--json", "--bogus={canary}"], {}, 2, ""),
    (["watch", "/a/b", "--dry-run"], {}, 2, "only reads"),
    (["verify-layers", "--json", "--dry-run"], {}, 2, "only reads"),
    (["setup-kaniko", "--dry-run", "--json", "--executor", "upstream,{canary}"], {}, 2, "unknown executor"),
    # a repeatable flag given again without a value, after one with
    (["sizes", "--json", "--extra=ep", "--extra"], {}, 2, "--extra needs a value"),
    (["plan", "--extra", "megatron", "--extra", "--cap", "3GB"], {}, 2, "--extra needs a value"),
    # a flag the task lacks, where a positional argument is still wanted
    (["diff", "--json", "--dry-run", "r.io/a:1", "r.io/b:2"], {}, 2, "diff only reads"),
    (["diff", "r.io/a:1", "--bogus={canary}"], {}, 2, "diff has no flag --bogus"),
    (["kill", "--job", "/u/j\r\nx"], {}, 2, "is not a job id"),
    (["watch", "--job", "/u/j", "--max-duration", "-" + "9" * 25], {}, 2, "up to 2592000"),
    # hints written at the raise site, not a class's
    (["plan", "--json"], {"GPURL_LAYERS_SIZE_OVERRIDES": "README.md"}, 2,
     "point layers.size-overrides at the right file"),
    (["plan", "--lock", "README.md"], {}, 2, "run `uv lock`"),
    (["rebuild-needed", "--json", "--since=-HEAD"], {}, 2, "not something starting with -"),
]


def _gpurl(argv: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
           capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """`gpurl ARGV` in this process (the command's own `main`): exit code, stdout, stderr."""
    from gpurl_tasks import cli
    from gpurl_tasks.__main__ import main

    for name in [n for n in os.environ if n.startswith("GPURL_")]:
        monkeypatch.delenv(name)
    for name, value in {"GHCR_TOKEN": CANARY, **env}.items():
        monkeypatch.setenv(name, value.replace("{canary}", CANARY))
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.setattr(cli, "_project", {})
    monkeypatch.setattr(cli, "RUNNING", ["invoke"])
    capsys.readouterr()
    try:
        main(["gpurl", *(a.replace("{canary}", CANARY) for a in argv)])
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    done = capsys.readouterr()
    return code, done.out, done.err


@pytest.mark.parametrize(("argv", "env", "code", "says"), TABLE,
                         ids=[" ".join([*(f"{k}=.." for k in e), *a])[:60] for a, e, _, _ in TABLE])
def test_the_contract_holds(argv: list[str], env: dict[str, str], code: int, says: str,
                            monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture[str]) -> None:
    """The exit code; exit 2 is one `error:` line and its hint, no traceback; under --json
    exactly one JSON object (an error's saying what stderr says); never the canary token."""
    got, out, err = _gpurl(argv, env, monkeypatch, capsys)
    assert got == code, (got, out, err)
    assert CANARY not in out + err and "Traceback" not in err, (out, err)
    assert says in err, err
    lines = err.splitlines()
    if code == ExitCode.ERROR:
        errors = [i for i, line in enumerate(lines) if line.startswith("error: ")]
        assert len(errors) == 1 and errors[0] == len(lines) - 2, err
        hint = lines[-1].removeprefix("  hint: ")
        assert hint != lines[-1] and hint.strip(), err
    if "--json" in argv:
        document = json.loads(out)  # one object: anything after it would fail to parse
        assert isinstance(document, dict), out
        if code == ExitCode.ERROR:
            assert document["error"] == lines[-2].removeprefix("error: ")
            assert document["hint"] == lines[-1].removeprefix("  hint: ")
            assert document["exit_code"] == code
    elif code == ExitCode.ERROR:
        assert out == "", out


def test_dry_run_is_on_every_task_that_changes_something() -> None:
    """The README's rule, checked against the collection: a read-only task has no --dry-run
    (and saying it is one that has would hide a write); every other task has one or is one
    of the README's named exceptions (a local preview flag, or this machine only)."""
    from gpurl_tasks import cli
    from gpurl_tasks.collection import ns

    local_only = {"generate", "sizes", "build-wheels", "fill-index", "serve-index"}
    has = {name for name in ns.task_names
           if "dry_run" in {a.name for a in ns[name].get_arguments()}}
    assert not has & cli.READ_ONLY
    assert set(ns.task_names) == has | cli.READ_ONLY | local_only
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    rule = readme[readme.index("`--dry-run` is on every task"):]
    listed_with = rule[:rule.index("It\nreads")]
    listed_without = rule[rule.index("The tasks that only read"):rule.index("have none")]
    for name in sorted(has):
        assert f"`{name}`" in listed_with, name
    for name in sorted(cli.READ_ONLY):
        assert f"`{name}`" in listed_without, name


# the archives the config names (cluster.source-archives: ../shared/third_party by default)
SOURCES = Path(os.environ.get("GPURL_CLUSTER_SOURCE_ARCHIVES",
                              REPO_ROOT.parent / "shared" / "third_party"))


@pytest.mark.skipif(not (SOURCES / "SHA256SUMS").is_file(), reason="no kaniko source archives")
def test_setup_kaniko_dry_run_checks_the_sources_and_runs_nothing(tmp_path: Path) -> None:
    """The real archives are checked (sha256); the commands end in the pushes the real run
    makes, and nothing is built or written under the cache."""
    from gpurl_tasks.local.from_source import setup_kaniko_commands

    dry = setup_kaniko_commands(tmp_path / "cache", SOURCES, "127.0.0.1:5005",
                                executors=("upstream",))
    assert ("docker", "push", "127.0.0.1:5005/gpurl/kaniko-executor:upstream") in dry.commands
    assert [c[1] for c in dry.commands if "build" in c] == ["build", "build"]  # upstream, crane
    assert dry.to_json()["dry_run"] is True and not (tmp_path / "cache").exists()


@pytest.mark.parametrize(("posargs", "expected"), [
    (["--json", "r:t"], ["--json", "--ref", "r:t"]),
    (["r:t", "--json"], ["--ref", "r:t", "--json"]),
    (["--cap", "4GB", "r:t", "-j"], ["--cap", "4GB", "--ref", "r:t", "-j"]),
    (["-p", "demo", "r:t"], ["-p", "demo", "--ref", "r:t"]),
    (["--ref=r:t", "--json"], ["--ref=r:t", "--json"]),
])
def test_the_nox_session_finds_the_image_wherever_it_stands(
        posargs: list[str], expected: list[str]) -> None:
    """`nox -s verify-layers -- --json REF` once read REF as a task's name: the first bare
    argument that is no flag's value is the image, after flags as before them."""
    from gpurl_tasks.sessions import _ref_as_flag

    assert _ref_as_flag("verify-layers", posargs) == expected
