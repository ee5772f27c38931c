"""`invoke verify-layers` end to end against a real `docker-registry` on 127.0.0.1."""

from __future__ import annotations

import http.server
import threading
import time
from pathlib import Path
from typing import ClassVar

import pytest

from gpurl_tasks.dockerfile.provenance import LABEL_PLAN_FINGERPRINT
from tests.support.pusher import push_image, random_layer, repeated_layer, tar_gz_layer
from tests.support.registry_server import RegistryServer, running_registry
from tests.support.tasks_runner import head_short_sha, one_variant, run_task
from tests.support.token_auth import TokenService

pytestmark = pytest.mark.integration

CANARY = "canary-verify-91f3a7"


def env_for(server: RegistryServer, tmp: Path | None = None) -> dict[str, str]:
    env = {"GPURL_REGISTRY_HOST": server.host, "GPURL_REGISTRY_REPOSITORY": "org/img",
           "GPURL_LAYERS_CAP": "1MB", "GPURL_VERIFY_HARD_LIMIT": "2MB",
           "GPURL_VERIFY_MIN_LAYERS": "5",
           # the tests' pusher attaches no SBOM or provenance (as an image built before gpurl
           # attached them): checked when attached (tests/test_attestations.py requires them)
           "GPURL_VERIFY_ATTESTATIONS": "if-present"}
    if tmp is not None:
        env["HOME"] = str(tmp)  # no docker config.json: anonymous
    return env


def six_layers() -> list:  # type: ignore[type-arg]
    return [tar_gz_layer({"etc/os-release": b"ID=debian\n"}, "ADD rootfs /")] + [
        random_layer(100_000 * (i + 1),
                     f"RUN /bin/sh -c uv sync --frozen --no-install-project # step {i}", seed=i)
        for i in range(5)]


def test_passing_image_prints_the_table_and_exits_zero(registry: RegistryServer,
                                                       tmp_path: Path) -> None:
    pushed = push_image(registry.url, "org/img", six_layers(), tag="gpu-rl-1111111")
    done = run_task("verify-layers", "--ref", f"{registry.host}/org/img:gpu-rl-1111111",
                    env=env_for(registry, tmp_path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1] == f"manifest {pushed.manifest_digest} (linux/amd64)"
    for index, layer in enumerate(pushed.layers):
        row = next(line for line in lines if line.startswith(f"{index:>3}"))
        assert layer.digest.removeprefix("sha256:")[:12] in row
    assert lines[-1] == "OK: every layer rule holds"
    assert "sizes are not predicted" in done.stdout  # no plan label on this image


def test_oversized_layer_fails_with_json(registry: RegistryServer, tmp_path: Path) -> None:
    """One 40 MB layer of repeated bytes, against a 10 MB cap and a 30 MB hard limit."""
    layers = [tar_gz_layer({"a": b"a"}, "ADD a /"), repeated_layer(40_000_000, "RUN big"),
              tar_gz_layer({"b": b"b"}, "RUN b")]
    pushed = push_image(registry.url, "org/img", layers, tag="gpu-rl-2222222")
    done = run_task("verify-layers", "--ref", f"{registry.host}/org/img:gpu-rl-2222222", "--json",
                    "--cap", "10MB", "--hard-limit", "30MB", "--min-layers", "3",
                    env=env_for(registry, tmp_path))
    assert done.returncode == 1
    report = one_variant(done.stdout)
    assert report["manifest_digest"] == pushed.manifest_digest
    assert [layer["size"] for layer in report["layers"]] == [layer.size for layer in layers]
    assert [f["code"] for f in report["findings"]] == ["hard-limit", "single-huge-layer"]
    assert report["rules"] == {"cap": 10**7, "hard_limit": 3 * 10**7, "min_layers": 3,
                               "tolerance": 0.25}
    assert "fails the layer rules" in done.stderr and "Traceback" not in done.stderr


def test_too_few_layers_from_config(registry: RegistryServer, tmp_path: Path) -> None:
    push_image(registry.url, "org/img", six_layers()[:3], tag="gpu-rl-3333333")
    done = run_task("verify-layers", "--ref", f"{registry.host}/org/img:gpu-rl-3333333",
                    env=env_for(registry, tmp_path))
    assert done.returncode == 1
    assert "FAIL [too-few-layers] 3 layers, fewer than the minimum 5" in done.stdout


def test_no_reference_means_this_commits_immutable_tag(registry: RegistryServer,
                                                       tmp_path: Path) -> None:
    tag = f"gpu-rl-{head_short_sha()}"
    pushed = push_image(registry.url, "org/img", six_layers(), tag=tag)
    done = run_task("verify-layers", "--variant", "standard", env=env_for(registry, tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"image    {registry.host}/org/img:{tag}"
    assert pushed.manifest_digest in done.stdout


def test_no_variant_verifies_each_variants_image(registry: RegistryServer,
                                                 tmp_path: Path) -> None:
    """gpu-rl has two variants; a missing variant image fails, it is never skipped."""
    sha = head_short_sha()
    push_image(registry.url, "org/img", six_layers(), tag=f"gpu-rl-{sha}")
    missing = run_task("verify-layers", env=env_for(registry, tmp_path))
    assert missing.returncode != 0 and f"gpu-rl-megatron-{sha}" in missing.stderr
    push_image(registry.url, "org/img", six_layers(), tag=f"gpu-rl-megatron-{sha}")
    done = run_task("verify-layers", env=env_for(registry, tmp_path))
    assert done.returncode == 0, done.stderr
    assert "== variant standard ==" in done.stdout and "== variant megatron ==" in done.stdout
    assert f"org/img:gpu-rl-megatron-{sha}" in done.stdout


def test_plan_label_without_a_matching_plan_is_a_note(registry: RegistryServer,
                                                      tmp_path: Path) -> None:
    push_image(registry.url, "org/img", six_layers(), tag="gpu-rl-4444444",
               labels={LABEL_PLAN_FINGERPRINT: "sha256:" + "0" * 64})
    done = run_task("verify-layers", "--ref", f"{registry.host}/org/img:gpu-rl-4444444",
                    env=env_for(registry, tmp_path))
    assert done.returncode == 0, done.stderr
    note = next(line for line in done.stdout.splitlines() if line.startswith("note:"))
    assert "sizes are not predicted" in note


def test_missing_tag_is_one_clear_line(registry: RegistryServer, tmp_path: Path) -> None:
    done = run_task("verify-layers", "--ref", f"{registry.host}/org/img:gpu-rl-0000000",
                    env=env_for(registry, tmp_path))
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {registry.host}/org/img:gpu-rl-0000000 was not found")
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_bad_flag_value_is_one_clear_line(registry: RegistryServer, tmp_path: Path) -> None:
    done = run_task("verify-layers", "--ref", f"{registry.host}/org/img:gpu-rl-1111111",
                    "--cap", "4 bananas", env=env_for(registry, tmp_path))
    assert done.returncode == 2
    assert "verify.cap in the command line must be a size" in done.stderr
    assert "Traceback" not in done.stderr


def test_registry_down_is_a_clear_error(tmp_path: Path) -> None:
    with running_registry(tmp_path / "r") as server:
        push_image(server.url, "org/img", six_layers(), tag="gpu-rl-5555555")
        env = env_for(server, tmp_path)
    done = run_task("verify-layers", "--ref", f"{server.host}/org/img:gpu-rl-5555555", env=env)
    assert done.returncode == 2
    assert f"cannot reach the registry at {server.host} for" in done.stderr
    assert "Traceback" not in done.stderr


def test_token_from_the_environment_never_appears(registry: RegistryServer,
                                                  tmp_path: Path) -> None:
    push_image(registry.url, "org/img", six_layers(), tag="gpu-rl-6666666")
    with TokenService(tmp_path, username="penfever", secret=CANARY) as tokens, \
            running_registry(tmp_path / "tok", storage=registry.storage,
                             auth_yaml=tokens.auth_yaml()) as server:
        env = {**env_for(server, tmp_path), "GPURL_REGISTRY_USER": "penfever"}
        good = run_task("verify-layers", "--ref", f"{server.host}/org/img:gpu-rl-6666666",
                        env={**env, "GPURL_REGISTRY_TOKEN": CANARY})
        bad = run_task("verify-layers", "--ref", f"{server.host}/org/img:gpu-rl-6666666", "--json",
                       env={**env, "GPURL_REGISTRY_TOKEN": CANARY + "-wrong"})
        assert tokens.requests[-2]["authorized"] and not tokens.requests[-1]["authorized"]
    assert good.returncode == 0, good.stderr
    assert bad.returncode == 2 and "refused the credentials" in bad.stderr
    for output in (good.stdout, good.stderr, bad.stdout, bad.stderr):
        assert CANARY not in output


def test_a_reference_picks_the_profile_whose_registry_it_names(registry: RegistryServer,
                                                               tmp_path: Path) -> None:
    """`nox -s verify-layers -- REGISTRY/gpurl/demo:demo-SHA` applied the gpu-rl rules (20
    layers) to the demo image (issue 13): the demo profile's repository picks its rules."""
    push_image(registry.url, "gpurl/demo", six_layers()[:4], tag="demo-2222222")
    env = {"GPURL_REGISTRY_HOST": registry.host, "HOME": str(tmp_path),
           "GPURL_VERIFY_ATTESTATIONS": "if-present"}
    done = run_task("verify-layers", "--ref", f"{registry.host}/gpurl/demo:demo-2222222", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rules of profile 'demo'" in done.stderr
    assert "at least 3 layers" in done.stdout
    push_image(registry.url, "elsewhere/img", six_layers()[:4], tag="x-2222222")
    other = run_task("verify-layers", "--ref", f"{registry.host}/elsewhere/img:x-2222222", env=env)
    assert other.returncode == 1
    assert (f"no profile's registry is {registry.host}/elsewhere/img: the rules of profile "
            "'gpu-rl' (the default) apply") in other.stderr
    assert "at least 20 layers" in other.stdout
    chosen = run_task("verify-layers", "--profile", "demo", "--ref",
                      f"{registry.host}/elsewhere/img:x-2222222", env=env)
    assert chosen.returncode == 0 and "no profile's registry" not in chosen.stderr


@pytest.mark.parametrize(("count", "code", "exit_code"), [
    (119, None, 0), (120, "near-layer-limit", 0), (127, "near-layer-limit", 0),
    (128, "too-many-layers", 1)])
def test_the_layer_limit_over_a_pushed_image(registry: RegistryServer, tmp_path: Path,
                                             count: int, code: str | None,
                                             exit_code: int) -> None:
    """Images of tiny distinct layers pushed to the registry: 128 fails, 120-127 warn."""
    layers = [tar_gz_layer({f"f{i}": str(i).encode()}, f"RUN step {i}") for i in range(count)]
    tag = f"gpu-rl-{count:07d}"
    push_image(registry.url, "org/img", layers, tag=tag)
    ref = f"{registry.host}/org/img:{tag}"
    flags = ("--min-layers", "1")
    done = run_task("verify-layers", "--ref", ref, "--json", *flags, env=env_for(registry, tmp_path))
    assert done.returncode == exit_code, done.stderr
    report = one_variant(done.stdout)
    assert report["layer_count"] == count
    assert [f["code"] for f in report["findings"]
            if f["code"] in ("near-layer-limit", "too-many-layers")] == ([code] if code else [])
    text = run_task("verify-layers", "--ref", ref, *flags, env=env_for(registry, tmp_path))
    assert text.returncode == exit_code
    if code:
        assert f"[{code}] {count} layers" in text.stdout
    else:
        assert "near-layer-limit" not in text.stdout and "too-many-layers" not in text.stdout


def test_a_layer_blob_the_registry_lost_fails_naming_the_layer(registry: RegistryServer,
                                                              tmp_path: Path) -> None:
    """The manifest and its tag are there, one layer's bytes are not (deleted from the
    registry's storage): the sizes in the manifest would pass every rule, the HEAD of each
    blob fails the check, naming the layer."""
    layers = [tar_gz_layer({"etc/os-release": b"ID=debian\n"}, "ADD rootfs /")] + [
        random_layer(100_000, f"RUN uv sync --frozen --no-install-project # lost {i}",
                     seed=7100 + i) for i in range(5)]
    push_image(registry.url, "org/img", layers, tag="gpu-rl-7171717")
    ref = f"{registry.host}/org/img:gpu-rl-7171717"
    before = run_task("verify-layers", "--ref", ref, "--json", env=env_for(registry, tmp_path))
    assert before.returncode == 0, before.stderr
    registry.remove_blob(layers[3].digest)
    done = run_task("verify-layers", "--ref", ref, "--json", env=env_for(registry, tmp_path))
    assert done.returncode == 1, done.stdout + done.stderr
    report = one_variant(done.stdout)
    missing = [f for f in report["findings"] if f["code"] == "missing-blob"]
    assert [(f["layer"], f["failing"]) for f in missing] == [(3, True)]
    assert layers[3].digest[:19] in missing[0]["message"]
    assert "fails the layer rules" in done.stderr and "Traceback" not in done.stderr


class _Overloaded(http.server.BaseHTTPRequestHandler):
    """A registry that answers every request 503 with Retry-After: a stand-in for an overloaded
    ghcr.io (docker-registry cannot be made to fail), counting what it was asked."""

    seen: ClassVar[list[str]] = []

    def _answer(self) -> None:
        self.seen.append(self.command)
        self.send_response(503)
        self.send_header("Retry-After", "20")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD = _answer

    def log_message(self, *_: object) -> None:
        pass


@pytest.mark.parametrize("retries", [0, 2])
def test_the_retries_on_a_failing_registry_are_the_configs(retries: int, tmp_path: Path) -> None:
    """registry.retries bounds the attempts (one, then `retries` more), registry.retry-max-wait
    caps the wait a Retry-After asks for (20 s asked, 0 allowed here); the failure says how
    many attempts were made, in one line."""
    _Overloaded.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Overloaded)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = f"127.0.0.1:{server.server_address[1]}"
    try:
        env = {"GPURL_REGISTRY_HOST": host, "GPURL_REGISTRY_REPOSITORY": "org/img",
               "HOME": str(tmp_path), "GPURL_REGISTRY_RETRIES": str(retries),
               "GPURL_REGISTRY_RETRY_MAX_WAIT": "0", "GPURL_REGISTRY_INSECURE": "true"}
        started = time.monotonic()
        done = run_task("verify-layers", "--ref", f"{host}/org/img:gpu-rl-5035035", env=env)
        seconds = time.monotonic() - started
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode != 0
    assert (f"answered 503 to HEAD /v2/org/img/manifests/gpu-rl-5035035 for "
            f"{host}/org/img:gpu-rl-5035035 after {retries + 1} attempts") \
        in done.stderr, done.stderr
    assert len(_Overloaded.seen) == retries + 1, _Overloaded.seen
    assert "Traceback" not in done.stderr and seconds < 30
