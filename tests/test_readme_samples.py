"""The README's command samples against real output, so they cannot drift.

A sample is a fenced block whose first line is `$ invoke ...`, followed by the output. The
samples that can be produced here are run for real (`invoke build --dry-run` with a stand-in
KUBECONFIG file and token: a dry run touches no cluster and no registry; `invoke plan` on the
real SkyRL lock of the skyrl fixture). The rest need a cluster, GHCR or a particular git
history and are listed in NOT_REPRODUCIBLE, so a new sample must be sorted into one or the other.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

NOT_REPRODUCIBLE = {
    "invoke rebuild-needed --since HEAD~1",  # three scenarios, each a particular git history
}


def samples() -> list[tuple[str, str]]:
    """(command, expected output) for each `$ invoke` sample in the README."""
    found = []
    for block in re.findall(r"```\n(.*?)```", (REPO_ROOT / "README.md").read_text(), re.S):
        for part in re.split(r"^(?=\$ invoke )", block, flags=re.M):
            if part.startswith("$ invoke "):
                command, _, output = part.partition("\n")
                found.append((command[2:].split("#")[0].strip(), output.strip("\n")))
    return found


def _normalize(text: str) -> str:
    """Only what depends on the checkout: its commit id and the script's base64 length."""
    text = re.sub(r"\b[0-9a-f]{7}(?:-dirty-[0-9a-f]{12})?\b", "<sha>", text)
    return re.sub(r"\.\.\.<\d+ chars>", "...<N chars>", text)


def _run(command: str, env: dict[str, str]) -> str:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GPURL_", "GHCR_"))}
    done = subprocess.run([sys.executable, "-m", *shlex.split(command)], cwd=REPO_ROOT,
                          env={**base, **env}, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip("\n")


def test_every_sample_is_checked_or_known_to_need_a_cluster() -> None:
    commands = {command for command, _ in samples()}
    checked = {"invoke build --dry-run", PLAN_COMMAND}
    assert checked <= commands, "a checked sample is gone from the README"
    assert commands - checked <= NOT_REPRODUCIBLE, commands - checked - NOT_REPRODUCIBLE


def test_build_dry_run_sample_is_the_real_output(tmp_path: Path) -> None:
    kube = tmp_path / "kubeconfig"
    kube.write_text("apiVersion: v1\n")
    (expected,) = [out for command, out in samples() if command == "invoke build --dry-run"]
    real = _run("invoke build --dry-run", {"KUBECONFIG": str(kube), "HOME": str(tmp_path),
                                           "GPURL_REGISTRY_TOKEN": "ghp_" + "x" * 36})
    assert len(real.splitlines()) == 1 and "...<" in real  # the script is elided, one line
    assert _normalize(real) == _normalize(expected)


PLAN_COMMAND = "invoke plan --profile skyrl --variant standard"


def test_plan_sample_is_the_real_output() -> None:
    (expected,) = [out for command, out in samples() if command == PLAN_COMMAND]
    assert _run(PLAN_COMMAND, {}) == expected
