"""Pinning the launcher: byte-exact rewrite, idempotence, refusals and the atomic write."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpurl_tasks.config import RegistrySettings
from gpurl_tasks.errors import PinError
from gpurl_tasks.files import write_atomic
from gpurl_tasks.imageref import ImageRef, parse_reference
from gpurl_tasks.release.pin import (
    PIN_MARKER,
    Provenance,
    check_immutable,
    pinned_value,
    provenance_comment,
    rewrite_assignment,
    unified_diff,
)
from tests.conftest import REPO_ROOT

VAR = "DEFAULT_RL_DOCKER_IMAGE"
OLD = "ghcr.io/open-thoughts/openthoughts-agent@sha256:" + "e8" * 32
NEW = "ghcr.io/open-thoughts/openthoughts-agent@sha256:" + "7c" * 32
INFO = Provenance(tag="gpu-rl-abc1234", layer_count=48, largest_bytes=3_460_000_000,
                  total_bytes=22_660_000_000, date=dt.date(2026, 11, 29))
COMMENT = provenance_comment(INFO)

LAUNCHER = textwrap.dedent(f'''\
    """RL launcher.   Mentions {VAR} = "not this one" in a docstring."""
    import os   ;  ÄNDERUNG = 1

    # {VAR} = "{OLD}"  (a comment that merely mentions it)
    OTHER_IMAGE   =   "ghcr.io/x/y:gpu-rl"  # keep   odd spacing
    {VAR} = (
        '{OLD}'
    )   # trailing   comment survives
    def launch(image: str = {VAR}) -> str:
        return os.environ.get("IMAGE", image)\t# tab before comment
    ''')


def strip_comment_lines(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True)
                   if not line.lstrip().startswith(PIN_MARKER))


def test_only_the_value_and_the_comment_change() -> None:
    new = rewrite_assignment(LAUNCHER, VAR, NEW, COMMENT)
    assert strip_comment_lines(new).replace(NEW, OLD) == LAUNCHER
    assert new.count(NEW) == 1 and f"'{NEW}'" in new  # quote style kept
    lines = new.splitlines()
    assert lines[lines.index(f"{VAR} = (") - 1] == COMMENT
    assert f'# {VAR} = "{OLD}"' in new  # the comment mentioning it is untouched


def test_second_pin_is_a_no_op_and_repin_replaces_the_comment() -> None:
    once = rewrite_assignment(LAUNCHER, VAR, NEW, COMMENT)
    later = provenance_comment(dataclass_replace_date(INFO, dt.date(2027, 1, 1)))
    assert rewrite_assignment(once, VAR, NEW, later) == once  # same digest: unchanged
    third = "ghcr.io/open-thoughts/openthoughts-agent@sha256:" + "01" * 32
    again = rewrite_assignment(once, VAR, third, later)
    assert again.count(PIN_MARKER) == 1 and later in again and COMMENT not in again
    assert strip_comment_lines(again).replace(third, OLD) == LAUNCHER


def dataclass_replace_date(info: Provenance, date: dt.date) -> Provenance:
    import dataclasses

    return dataclasses.replace(info, date=date)


def test_indentation_crlf_and_unicode_columns() -> None:
    source = (f"if True:\r\n    ü = 'ö'; {VAR}: str = \"{OLD}\"\r\n"
              f"else:\r\n    pass\r\n")
    new = rewrite_assignment(source, VAR, NEW, COMMENT, line_length=200)
    assert new == (f"if True:\r\n    {COMMENT}\r\n    ü = 'ö'; {VAR}: str = \"{NEW}\"\r\n"
                   f"else:\r\n    pass\r\n")


DEMO_VALUE = "127.0.0.1:5005/gpurl/demo@sha256:" + "ab" * 32
LONG_COMMENT = provenance_comment(Provenance(
    tag="demo-abc1234-dirty-0123abcd", layer_count=16, largest_bytes=165_710_000,
    total_bytes=285_450_000, date=dt.date(2026, 11, 29)))


def test_a_long_value_is_wrapped_to_fit_the_line_length() -> None:
    """The demo's pin line was 125 characters, over ruff's 110 (issue 13)."""
    source = f'"""Launcher."""\n\n{VAR} = "127.0.0.1:5005/gpurl/demo:demo"\nX = 1\n'
    new = rewrite_assignment(source, VAR, DEMO_VALUE, LONG_COMMENT, line_length=110)
    assert all(len(line) <= 110 for line in new.splitlines()), new
    assert f'{VAR} = (\n    "{DEMO_VALUE}"\n)\nX = 1\n' in new
    assert new.count(PIN_MARKER) == 2 and strip_comment_lines(new).startswith('"""Launcher."""\n\n')
    namespace: dict[str, object] = {}
    exec(compile(new, "launcher", "exec"), namespace)
    assert namespace[VAR] == DEMO_VALUE
    # idempotent, and a re-pin replaces every comment line and keeps the wrapped form
    assert rewrite_assignment(new, VAR, DEMO_VALUE, "# gpurl pin: other", line_length=110) == new
    other = DEMO_VALUE.replace("ab", "cd")
    again = rewrite_assignment(new, VAR, other, COMMENT, line_length=110)
    assert again == new.replace(DEMO_VALUE, other).replace(
        "\n".join(line for line in new.splitlines() if line.startswith(PIN_MARKER)), COMMENT)


def test_a_short_value_stays_on_its_line() -> None:
    source = f"{VAR} = 'x'\n"
    assert rewrite_assignment(source, VAR, "y", "# gpurl pin: t", line_length=110) == \
        f"# gpurl pin: t\n{VAR} = 'y'\n"


def test_the_pinned_demo_launcher_passes_the_projects_ruff(tmp_path: Path) -> None:
    """Real ruff with the repository's own config, on the real demo launcher after a pin."""
    from gpurl_tasks.release.flow import line_length_for

    ruff = Path(sys.executable).with_name("ruff")
    if not ruff.exists():
        pytest.skip("ruff is not installed in this environment (the lint group has it)")
    repo = REPO_ROOT
    launcher = repo / "examples/demo/cloud/iris/launch_rl_iris.py"
    assert line_length_for(launcher, repo) == 110
    new = rewrite_assignment(launcher.read_text(), VAR, DEMO_VALUE, LONG_COMMENT,
                             line_length=line_length_for(launcher, repo))
    target = tmp_path / "launch_rl_iris.py"
    target.write_text(new)
    done = subprocess.run([str(ruff), "check", "--config", str(repo / "pyproject.toml"),
                           "--no-cache", str(target)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@given(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=0x2FF,
                                      blacklist_characters='"\'\\'), max_size=30)
       .filter(str.isprintable))
def test_any_value_round_trips_through_ast(value: str) -> None:
    new = rewrite_assignment(LAUNCHER, VAR, value, COMMENT)
    namespace: dict[str, object] = {}
    exec(compile(new.split("def launch")[0], "launcher", "exec"), namespace)
    assert namespace[VAR] == value
    assert rewrite_assignment(new, VAR, value, "# gpurl pin: other") == new


@pytest.mark.parametrize(("source", "message"), [
    ("OTHER = 'x'\n", "has no assignment to DEFAULT_RL_DOCKER_IMAGE"),
    (f"{VAR} = 'a'\nif x:\n    {VAR} = 'b'\n",
     "assigns DEFAULT_RL_DOCKER_IMAGE 2 times (lines 1, 3)"),
    (f"{VAR}, B = 'a', 'b'\n", "assigned together with other names"),
    (f"A = {VAR} = 'a'\n", "assigned together with other names"),
    (f"{VAR} = os.environ['X']\n", "not assigned a plain string literal"),
    (f"{VAR} = 'a'\ndef f(:\n", "not valid Python"),
    ("", "has no assignment"),
])
def test_refusals(source: str, message: str) -> None:
    with pytest.raises(PinError) as info:
        rewrite_assignment(source, VAR, NEW, COMMENT, where="launch.py")
    assert message in str(info.value)


REGISTRY = RegistrySettings(host="ghcr.io", repository="org/img", tag_prefix="gpu-rl",
                            floating_tag="gpu-rl")


@pytest.mark.parametrize("text", ["org/img:gpu-rl-abc1234", "org/img:gpu-rl-0123456789abcdef",
                                  "org/img@sha256:" + "ab" * 32,
                                  "org/img:gpu-rl@sha256:" + "ab" * 32])
def test_immutable_references_are_accepted(text: str) -> None:
    check_immutable(parse_reference(text, default_host="ghcr.io"), REGISTRY)


def test_floating_tag_is_refused_with_the_reason() -> None:
    with pytest.raises(PinError) as info:
        check_immutable(parse_reference("org/img:gpu-rl", default_host="ghcr.io"), REGISTRY)
    assert "floating tag 'gpu-rl'" in info.value.message
    assert "IfNotPresent" in info.value.message


@given(st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,30}", fullmatch=True))
def test_other_tags_are_refused(tag: str) -> None:
    ref = ImageRef(host="ghcr.io", repository="org/img", tag=tag)
    import re

    if re.fullmatch(r"gpu-rl-[0-9a-f]{7,40}", tag):
        check_immutable(ref, REGISTRY)
    else:
        with pytest.raises(PinError):
            check_immutable(ref, REGISTRY)


def test_pinned_value_and_comment() -> None:
    ref = parse_reference("ghcr.io/org/img:gpu-rl-abc1234", default_host="x")
    assert pinned_value(ref, "sha256:" + "7c" * 32) == "ghcr.io/org/img@sha256:" + "7c" * 32
    assert COMMENT == ("# gpurl pin: gpu-rl-abc1234, linux/amd64, 48 layers, largest 3.46 GB, "
                       "total 22.66 GB, 2026-11-29")


def test_unified_diff_shows_the_change() -> None:
    new = rewrite_assignment(LAUNCHER, VAR, NEW, COMMENT)
    diff = unified_diff(LAUNCHER, new, "cloud/iris/launch_rl_iris.py")
    assert diff.startswith("--- a/cloud/iris/launch_rl_iris.py\n+++ b/cloud/iris/launch_rl_iris.py")
    assert f"-    '{OLD}'\n" in diff and f"+    '{NEW}'\n" in diff and f"+{COMMENT}\n" in diff
    assert unified_diff(LAUNCHER, LAUNCHER, "x") == ""


def test_write_atomic_replaces_and_keeps_mode(tmp_path: Path) -> None:
    target = tmp_path / "launch.py"
    target.write_text("old\n")
    target.chmod(0o640)
    write_atomic(target, "new\n")
    assert target.read_text() == "new\n" and (target.stat().st_mode & 0o777) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["launch.py"]


def test_write_atomic_failure_leaves_the_old_file_and_no_temp(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "launch.py"
    target.write_text("old\n")

    def broken_replace(src: str, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        write_atomic(target, "new\n")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["launch.py"]


KILL_LOOP = """
import sys
from pathlib import Path
from gpurl_tasks.files import write_atomic
target = Path(sys.argv[1])
texts = [Path(sys.argv[2]).read_text(), Path(sys.argv[3]).read_text()]
print("ready", flush=True)
i = 0
while True:
    write_atomic(target, texts[i % 2])
    i += 1
"""


def test_kill_during_writes_leaves_old_or_new_never_a_mix(tmp_path: Path) -> None:
    """SIGKILL a process that rewrites the file in a loop at random moments."""
    import random

    old = LAUNCHER * 2000  # ~1 MB so a kill often lands mid-write
    new = rewrite_assignment(LAUNCHER, VAR, NEW, COMMENT) * 2000
    (tmp_path / "a").write_text(old)
    (tmp_path / "b").write_text(new)
    target = tmp_path / "work" / "launch.py"
    target.parent.mkdir()
    target.write_text(old)
    repo = REPO_ROOT
    env = {**os.environ, "PYTHONPATH": str(repo)}
    rng = random.Random(7)
    seen = set()
    leftovers = 0
    for _ in range(16):
        proc = subprocess.Popen([sys.executable, "-c", KILL_LOOP, str(target),
                                 str(tmp_path / "a"), str(tmp_path / "b")],
                                stdout=subprocess.PIPE, env=env)
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0.0, 0.15))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        content = target.read_text()
        assert content in (old, new)
        seen.add(content == new)
        for leftover in target.parent.glob(".launch.py.*.gpurl-tmp"):
            leftovers += 1  # killed mid-write: the temp file is left, the target is whole
            leftover.unlink()
    assert seen == {True, False}  # the kills landed at different points of the loop
    assert leftovers > 0  # ...and at least one inside a write, the case under test
