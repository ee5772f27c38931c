"""The rebuild-needed and check-wheels tasks through the real invoke CLI: help and failures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


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
