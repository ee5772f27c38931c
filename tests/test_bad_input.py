"""Bad input from a user: one clear line on stderr, a non-zero exit, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT


@pytest.fixture(scope="module")
def junk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("junk")
    (root / "binary").write_bytes(bytes(range(256)) * 4)
    (root / "dir").mkdir()
    return root


CASES = [
    (["plan", "--lock", "{junk}/dir"], "cannot read the lock file"),
    (["plan", "--lock", "{junk}/binary"], "is not UTF-8 text: byte 0x80 at offset"),
    (["plan", "--lock", "{junk}/missing.lock"], "missing.lock does not exist"),
    (["plan", "--size-overrides", "{junk}/dir"], "cannot read the size override file"),
    (["plan", "--size-overrides", "{junk}/missing.json"], "size override file"),
    (["plan", "--cap", "4 bananas"], "layers.cap in the command line must be a size"),
    (["plan", "--extra", "no-such-extra"], "extra 'no-such-extra' is not defined"),
    (["plan", "--profile", "gpu_rl"], "unknown profile 'gpu_rl'"),
    (["check-wheels", "--source", "{junk}/binary"], "binary is not UTF-8 text"),
    (["watch", "/someone/job", "--interval", "0"], "must be a positive number of seconds"),
    (["verify-layers", "--ref", "localhost:99999/x:y"], "localhost:99999"),
    (["rebuild-needed", "--since", "no-such-ref"], "no-such-ref"),
]


@pytest.mark.parametrize(("argv", "message"), CASES, ids=[" ".join(a[:2]) for a, _ in CASES])
def test_bad_input_is_one_clear_line(junk: Path, argv: list[str], message: str) -> None:
    args = [a.format(junk=junk) for a in argv]
    proc = subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert message in proc.stderr, proc.stderr
