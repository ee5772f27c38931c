"""The subprocess helper and credential handling, against real programs."""

from __future__ import annotations

import base64
import sys

import pytest

from gpurl_tasks.cluster.jobs import kill_job
from gpurl_tasks.config import load_config
from gpurl_tasks.errors import IrisError
from gpurl_tasks.proc import CommandFailed, ProgramNotFound, find_program, format_command, run
from gpurl_tasks.redact import Secret, find_registry_token, looks_like_docker_hub, redact

CANARY = "ghp_CANARYproc0099"


def test_missing_program_is_named() -> None:
    with pytest.raises(ProgramNotFound, match="couldn't find no-such-tool-xyz in PATH"):
        run(["no-such-tool-xyz", "--help"])


def test_find_program_accepts_a_path() -> None:
    assert find_program(sys.executable) == sys.executable


def test_echo_is_redacted_and_output_captured() -> None:
    lines: list[str] = []
    out = run([sys.executable, "-c", "import sys; print(sys.argv[1])", CANARY],
              secrets=[Secret(CANARY)], echo=lines.append)
    assert lines and CANARY not in lines[0] and lines[0].startswith("+ ")
    assert out.stdout.strip() == "***"  # output is redacted too


def test_nonzero_exit_raises_with_redacted_stderr() -> None:
    code = f"import sys; sys.stderr.write('bad token {CANARY}\\n'); sys.exit(3)"
    with pytest.raises(CommandFailed) as info:
        run([sys.executable, "-c", code], secrets=[CANARY], echo=None)
    assert info.value.returncode == 3
    assert CANARY not in str(info.value) + info.value.stderr
    assert "exited with status 3" in info.value.message


def test_unchecked_exit_returns() -> None:
    result = run([sys.executable, "-c", "raise SystemExit(4)"], check=False, echo=None)
    assert result.returncode == 4


def test_timeout_is_a_command_failure() -> None:
    with pytest.raises(CommandFailed, match=r"did not finish within 0\.5s"):
        run([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.5, echo=None)


def test_format_command_quotes_and_redacts() -> None:
    assert format_command(["a", "b c", CANARY], [CANARY]) == "a 'b c' '***'"


def test_secret_never_renders() -> None:
    s = Secret(CANARY)
    assert CANARY not in f"{s} {s!r} {[s]}"
    assert s.reveal() == CANARY


def test_redact_covers_base64() -> None:
    encoded = base64.b64encode(CANARY.encode()).decode()
    assert redact(f"x {encoded} {CANARY}", [CANARY]) == "x *** ***"


def test_token_lookup_order() -> None:
    gh_calls: list[int] = []

    def gh() -> str:
        gh_calls.append(1)
        return "from-gh"

    both = {"GPURL_REGISTRY_TOKEN": "a", "GHCR_TOKEN": "b"}
    found = find_registry_token(both, gh_token=gh)
    assert found is not None
    assert found.token.reveal() == "a" and found.source == "$GPURL_REGISTRY_TOKEN"
    found = find_registry_token({"GHCR_TOKEN": "b"}, gh_token=gh)
    assert found is not None and found.token.reveal() == "b"
    assert gh_calls == []
    found = find_registry_token({}, gh_token=gh)
    assert found is not None and found.source == "`gh auth token`"
    assert find_registry_token({}, gh_token=lambda: None) is None


def test_docker_hub_token_shape() -> None:
    assert looks_like_docker_hub(Secret("dckr_pat_abc"))
    assert not looks_like_docker_hub(Secret("ghp_abc"))


def test_kill_is_job_scoped(repo_root: object, capsys: pytest.CaptureFixture[str]) -> None:
    config = load_config(repo_root, env={})  # type: ignore[arg-type]
    for bad in ("", "/", "/alice", "alice/job", "--all"):
        with pytest.raises(IrisError, match="is not a job id"):
            kill_job(config, bad, dry_run=True)
    assert kill_job(config, "/alice/gpurl-kaniko-0123abc", dry_run=True).human() == (
        "iris --cluster=cw-us-east-02a job kill --no-include-children "
        "/alice/gpurl-kaniko-0123abc")


def test_a_long_step_says_it_is_alive_and_ends_with_its_duration() -> None:
    """The one step timer: start line, heartbeats while it runs (debootstrap took 66 s with
    no other sign of life), end line with detail, duration and a tick; a cross on failure."""
    import time

    from gpurl_tasks.steps import timed

    lines: list[str] = []
    with timed("base image", lines.append, heartbeat=0.05) as record:
        time.sleep(0.18)
        record.detail = "built"
    assert lines[0] == "==> base image"
    assert any(line.startswith("    ... base image: still running (") for line in lines[1:-1])
    assert lines[-1].startswith("<== base image: built (") and lines[-1].endswith("s) ✓")
    count = len(lines)
    time.sleep(0.12)
    assert len(lines) == count  # the heartbeat stopped with the step
    failed: list[str] = []
    with pytest.raises(RuntimeError), timed("build", failed.append, heartbeat=10):
        raise RuntimeError("boom")
    assert failed[-1].startswith("<== build: failed after ") and failed[-1].endswith("✗")


def test_kill_targets_the_configured_controller_url(repo_root: object) -> None:
    from pathlib import Path

    from gpurl_tasks.config import load_config

    config = load_config(Path(str(repo_root)),
                         env={"GPURL_CLUSTER_CONTROLLER_URL": "http://127.0.0.1:18765"})
    assert kill_job(config, "/alice/j-1", dry_run=True).human() == (
        "iris --controller-url=http://127.0.0.1:18765 job kill --no-include-children /alice/j-1")
