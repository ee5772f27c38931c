"""Issue 14, secrets: canary tokens through real task runs.

1. The team's token (GPURL_REGISTRY_TOKEN, GHCR_TOKEN) never reaches a registry other than the
   configured one, nor its token service: `verify-layers` and `pin` against a foreign registry
   (a real `docker-registry` with token auth on loopback) send that host's own config.json
   credentials, and nothing carrying the canary in any form.
2. `invoke watch` prints a failed job's log tail with every form of every secret redacted:
   plain, URL-encoded, base64 at every alignment, base64 of `user:token`, for a token from each
   source (both variables and `gh auth token`). iris and gh are stand-in programs on PATH
   (no cluster here); the tail passes through the real invoke task.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

from gpurl_tasks.redact import redact
from tests.support.pusher import push_image, random_layer, tar_gz_layer
from tests.support.registry_server import running_registry
from tests.support.tasks_runner import REPO_ROOT, run_task
from tests.support.token_auth import TokenService

CANARY = "ghp_CANARY+iss/ue14=x9Qz7%"  # characters that URL-encode
USERS = ("gpurl-bot", "ab", "abc", "penfever", "gpurl")


def _b64(prefix: bytes, secret: str) -> tuple[str, str]:
    """(the base64 of prefix+secret+newline, the part of it made of the secret's bits only)."""
    encoded = base64.b64encode(prefix + secret.encode() + b"\n").decode()
    start = -(-len(prefix) * 8 // 6)
    return encoded, encoded[start:(len(prefix) + len(secret.encode())) * 8 // 6]


def forms(secret: str) -> list[tuple[str, str]]:
    """Every way the secret can be shipped: (the text, the part of it that is the secret's)."""
    quoted = urllib.parse.quote(secret, safe="")
    out = [(secret, secret), (quoted, quoted)]
    out += [_b64(f"{user}:".encode(), secret) for user in USERS]
    out += [_b64(pad, secret) for pad in (b"", b"x", b"xy")]
    out += [_b64(pad, quoted) for pad in (b"", b"x", b"xy")]
    return out


def leaks(text: str, secret: str) -> list[str]:
    """Any 6-character window of the secret's part of any form that is still in `text`."""
    found = []
    for _, core in forms(secret):
        found += [core[i:i + 6] for i in range(len(core) - 5) if core[i:i + 6] in text]
    return found


def test_the_canary_checker_can_fail() -> None:
    """A leak check that cannot fail is no check."""
    for form, _ in forms(CANARY):
        assert leaks(f"before {form} after", CANARY)
        assert not leaks(redact(f"before {form} after", [CANARY, f"gpurl-bot:{CANARY}"]), CANARY)


# --- 1. foreign registries ----------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("variable", ["GHCR_TOKEN", "GPURL_REGISTRY_TOKEN"])
@pytest.mark.parametrize("task", ["verify-layers", "pin"])
def test_the_token_never_reaches_a_foreign_registry(tmp_path: Path, repo_tmp: Path,
                                                    variable: str, task: str) -> None:
    with TokenService(tmp_path, username="foreign", secret="foreign-pass") as tokens, \
            running_registry(tmp_path / "plain") as plain, \
            running_registry(tmp_path / "tok", storage=plain.storage,
                             auth_yaml=tokens.auth_yaml()) as foreign:
        push_image(plain.url, "org/img", [tar_gz_layer({"a": b"a"}, "ADD a /"),
                                          random_layer(10_000, "RUN uv sync", seed=1)],
                   tag="gpu-rl-abcdef1")
        docker = tmp_path / "docker"
        docker.mkdir()
        (docker / "config.json").write_text(json.dumps({"auths": {foreign.host: {
            "auth": base64.b64encode(b"foreign:foreign-pass").decode()}}}))
        launcher = repo_tmp / "launch.py"  # launcher.path may not leave the repository
        launcher.write_text('IMAGE = "old"\n')
        env = {variable: CANARY, "GPURL_REGISTRY_USER": "gpurl-bot", "DOCKER_CONFIG": str(docker),
               "GPURL_REGISTRY_HOST": "ghcr.io", "GPURL_VERIFY_MIN_LAYERS": "1",
               "GPURL_LAUNCHER_PATH": str(launcher), "GPURL_LAUNCHER_VARIABLE": "IMAGE",
               # looked up (the referrers too reach the foreign registry), none attached
               "GPURL_VERIFY_ATTESTATIONS": "if-present"}
        done = run_task(task, "--ref", f"{foreign.host}/org/img:gpu-rl-abcdef1", env=env)
        assert tokens.requests, "the foreign registry asked for a token"
        for header in tokens.authorizations:
            decoded = base64.b64decode(header[6:]).decode() if header.startswith("Basic ") else ""
            assert decoded == "foreign:foreign-pass" and CANARY not in header
            assert not leaks(header, CANARY)
    assert done.returncode == 0, done.stderr
    assert not leaks(done.stdout + done.stderr, CANARY)


# --- 2. watch's log tail ---------------------------------------------------------------------

STANDIN_IRIS = r"""#!/usr/bin/env bash
case "$*" in
  "--help") cat "$IRIS_DATA/help-0.2.35.txt" ;;
  "job --help") cat "$IRIS_DATA/job-help-0.2.35.txt" ;;
  *" job summary "*) cat "$IRIS_DATA/summary-failed.json" ;;
  *" job logs "*) cat "$IRIS_LOG" ;;
  *) exit 2 ;;
esac
"""


@pytest.mark.integration
@pytest.mark.parametrize("source", ["GHCR_TOKEN", "GPURL_REGISTRY_TOKEN", "gh auth token"])
def test_watch_redacts_every_form_of_every_secret(tmp_path: Path, source: str) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "iris").write_text(STANDIN_IRIS)
    (bindir / "gh").write_text(f"#!/bin/sh\n[ \"$*\" = 'auth token' ] && echo {CANARY}\n")
    for program in ("iris", "gh"):
        (bindir / program).chmod(0o755)
    log = tmp_path / "job.log"
    log.write_text("".join(f"[00:00:0{i % 10}] task=/u/j/0 | auth {form} sent\n"
                           for i, (form, _) in enumerate(forms(CANARY))))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPURL_")
           and k not in ("GHCR_TOKEN",)}
    env.update({"PATH": f"{bindir}:{env['PATH']}", "IRIS_LOG": str(log),
                "IRIS_DATA": str(REPO_ROOT / "tests" / "data" / "iris"),
                "GPURL_REGISTRY_USER": "gpurl-bot"})
    if source != "gh auth token":
        env[source] = CANARY
    done = subprocess.run([sys.executable, "-m", "invoke", "watch", "/u/j", "--interval", "1",
                           "--json"], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1, done.stderr
    assert done.stderr.count(" sent") == len(forms(CANARY))  # the tail was printed
    assert not leaks(done.stdout + done.stderr, CANARY), leaks(done.stdout + done.stderr, CANARY)
