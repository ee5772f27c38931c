"""gpurl's program reads invoke's parse errors through invoke's own API, not its wording.

The real collection's contexts and invoke's real Parser, in-process: each case is a command
line invoke refuses. What gpurl says comes from the error's context, from the token invoke's
Parser leaves unparsed, and (for a flag without its value, the one fact a ParseError carries
only in its text) from the flag's repr quoted there: any other wording of invoke's message
gives the same error. The subprocess cases of the contract are tests/test_cli_edges.py's.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from invoke.exceptions import ParseError
from invoke.parser.parser import Parser

from gpurl_tasks.collection import ns
from gpurl_tasks.errors import ConfigError
from gpurl_tasks.program import GpurlProgram, refused_token, usage_error
from tests.conftest import REPO_ROOT

PROGRAM = GpurlProgram(namespace=ns, binary="gpurl", binary_names=["gpurl"])
PARSER = Parser(initial=PROGRAM.initial_context, contexts=ns.to_contexts())

# a command line invoke refuses (the task part: what parse_tasks parses) -> gpurl's error line
CASES = {
    ("plan", "--bogus"): "plan has no flag --bogus",
    ("plan", "--json", "--bogus=x"): "plan has no flag --bogus",
    ("plan", "-xyz"): "plan has no flag -x",
    ("plann",): "no task 'plann'",
    ("--bogus",): "gpurl has no flag --bogus",
    ("-c", "bogus", "plan"): "gpurl has no flag -c",
    ("plan", "sizes", "--bogus"): "sizes has no flag --bogus",
    ("watch", "/a/b", "--dry-run"): "watch only reads: it changes nothing, so it has no --dry-run",
    ("plan", "--cap"): "--cap needs a value",
    ("plan", "--profile", "--cap", "4GB"): "--profile needs a value",
    ("sizes", "--extra"): "--extra needs a value",
    ("plan", "--project"): "--project needs a value",
    ("diff", "--profile"): "--profile needs a value",
    ("diff", "a"): "diff needs SECOND",
    ("diff",): "diff needs FIRST, SECOND",
}


def _refused(argv: tuple[str, ...]) -> tuple[ParseError, str | None]:
    """invoke's own error for `argv`, and the token gpurl finds it refused (None: another)."""
    with pytest.raises(ParseError) as info:
        PARSER.parse_argv(list(argv))
    return info.value, refused_token(PARSER, list(argv))


def _said(exc: ParseError, unknown: str | None, argv: tuple[str, ...]) -> ConfigError:
    return usage_error(exc, unknown=unknown, collection=ns, binary="gpurl", argv=list(argv),
                       core=PROGRAM.initial_context.flags.values())


@pytest.mark.parametrize("argv", list(CASES), ids=[" ".join(a) for a in CASES])
def test_each_refused_command_line_is_named_by_what_it_got_wrong(argv: tuple[str, ...]) -> None:
    exc, unknown = _refused(argv)
    error = _said(exc, unknown, argv)
    assert error.message == CASES[argv] and error.hint
    assert (unknown is not None) == ("has no flag" in CASES[argv] or "no task" in CASES[argv]
                                     or "only reads" in CASES[argv])


@settings(max_examples=20, deadline=None)
@given(argv=st.sampled_from(list(CASES)), words=st.text(max_size=40))
def test_any_wording_of_invoke_s_message_gives_the_same_error(argv: tuple[str, ...],
                                                              words: str) -> None:
    """invoke's message replaced by other words (keeping only an Argument's repr it quoted)
    changes nothing gpurl says: nothing is cut out of invoke's wording."""
    exc, unknown = _refused(argv)
    context = exc.context
    flags = [*(context.flags.values() if context is not None else ()),
             *PROGRAM.initial_context.flags.values()]
    quoted = next((repr(a) for a in flags if repr(a) in str(exc)), "")
    reworded = ParseError(f"{words} {quoted} {words[::-1]}", context)
    before, after = _said(exc, unknown, argv), _said(reworded, unknown, argv)
    assert (after.message, after.hint) == (before.message, before.hint)


def test_no_invoke_object_has_its_class_switched_but_the_invoke_program() -> None:
    """`program.adopt` is the one `__class__` assignment (invoke has no hook for its own
    program's class); task arguments are built as their class by invoke's constructor."""
    found = []
    for path in sorted((REPO_ROOT / "gpurl_tasks").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "__class__" not in text:
            continue
        tree = ast.parse(text)
        for function in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
            for node in ast.walk(function):
                if isinstance(node, ast.Assign) and any(
                        isinstance(t, ast.Attribute) and t.attr == "__class__"
                        for t in node.targets):
                    found.append(f"{Path(path).relative_to(REPO_ROOT)}:{function.name}")
    assert found == ["gpurl_tasks/program.py:adopt"]
