"""The rebuild-needed and check-wheels tasks through the real invoke CLI: help and failures."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpurl_tasks.cli import EachVariant
from gpurl_tasks.errors import ExitCode

# The last commit before gpu-rl had variants: docker/Dockerfile.gpu-rl-megatron is absent there.
BEFORE_VARIANTS = "db8f7d0f86a9f016b4fe3270081d16c8940b5c25"


def invoke(repo_root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=repo_root,
                          capture_output=True, text=True, check=False, timeout=120)


@pytest.mark.integration
def test_help_documents_the_exit_codes(repo_root: Path) -> None:
    done = invoke(repo_root, "--help", "rebuild-needed")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    for phrase in ("0 none", "10 image", "11 wheels+image", "--since", "--json", "--profile"):
        assert phrase in text


@pytest.mark.integration
def test_unknown_ref_is_one_line_and_exit_2(repo_root: Path) -> None:
    done = invoke(repo_root, "rebuild-needed", "--since", "no-such-ref-for-gpurl")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("error: git ref 'no-such-ref-for-gpurl' does not name a commit")
    assert "Traceback" not in done.stderr


@pytest.mark.integration
def test_check_wheels_bad_source_is_exit_2(repo_root: Path, tmp_path: Path) -> None:
    done = invoke(repo_root, "check-wheels", "--source", str(tmp_path / "absent"))
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and "Traceback" not in done.stderr


def _has_commit(repo_root: Path, sha: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=repo_root,
                          capture_output=True, check=False).returncode == 0


@pytest.mark.integration
def test_each_variant_line_says_its_decision(repo_root: Path) -> None:
    """Exit codes 10 and 11 are answers: the closing line names each variant's decision (never
    "failed") and the exit code is the most severe decision."""
    if not _has_commit(repo_root, BEFORE_VARIANTS):
        pytest.skip(f"{BEFORE_VARIANTS[:12]} is not in this clone's history")
    done = invoke(repo_root, "rebuild-needed", "--since", BEFORE_VARIANTS)
    decisions = dict(re.findall(r"^== variant (\S+) ==\nrebuild: (\S+)", done.stdout, re.M))
    assert list(decisions) == ["standard", "megatron"], done.stdout
    assert decisions["megatron"] == "wheels+image"  # its Dockerfile is absent at --since
    assert done.stderr.splitlines()[-1] == "; ".join(f"{n}: {d}" for n, d in decisions.items())
    assert "failed" not in done.stderr and "Traceback" not in done.stderr
    assert done.returncode == ExitCode.REBUILD_WHEELS  # the most severe: megatron's


@pytest.mark.integration
def test_every_variant_none_is_exit_0_and_silent(repo_root: Path) -> None:
    done = invoke(repo_root, "rebuild-needed", "--since", "HEAD")
    decisions = re.findall(r"^rebuild: (\S+)", done.stdout, re.M)
    assert len(decisions) == 2, done.stdout
    if set(decisions) != {"none"}:
        pytest.skip("the working tree has edits to the baked inputs")
    assert done.returncode == 0 and done.stderr == ""


@dataclasses.dataclass(frozen=True)
class _Outcome:
    """An outcome whose exit code is an answer (`verdict`) or a failure (`failure`)."""

    exit_code: int
    verdict: str | None = None
    failure: str | None = None

    def human(self) -> str:
        return self.verdict or self.failure or ""

    def to_json(self) -> str:
        return self.human()


@pytest.mark.parametrize(("outcomes", "code", "line"), [
    ((_Outcome(10, verdict="image"), _Outcome(0, verdict="none")), 10, "a: image; b: none"),
    ((_Outcome(10, verdict="image"), _Outcome(11, verdict="wheels+image")), 11,
     "a: image; b: wheels+image"),
    ((_Outcome(0, verdict="none"), _Outcome(0, verdict="none")), 0, None),
    ((_Outcome(11, verdict="wheels+image"), _Outcome(2, failure="no lock")), 2,
     "a: wheels+image; b: no lock"),
    ((_Outcome(1, failure="bad"), _Outcome(10, verdict="image")), 1, "a: bad; b: image"),
])
def test_answers_rank_below_failures(outcomes: tuple[_Outcome, ...], code: int,
                                     line: str | None) -> None:
    each = EachVariant(tuple(zip(("a", "b"), outcomes, strict=True)))
    assert (each.exit_code, each.failure) == (code, line)
