"""setup-local: pure helpers, and the real steps against the real engine and registry."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest

from gpurl_tasks import proc
from gpurl_tasks.config import load_config
from gpurl_tasks.errors import BuildError, ConfigError
from gpurl_tasks.local import base_image, engine, registry_server, setup
from tests.conftest import REPO_ROOT
from tests.support.local_parts import free_port, need


def test_mirror_from_one_line_sources() -> None:
    text = ("# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian/ "
            "bookworm main contrib\ndeb http://security.example bookworm-security main\n")
    assert base_image.parse_mirror([text]) == "http://mirror.example/debian"


def test_mirror_from_deb822_sources_skips_other_suites() -> None:
    security = ("Types: deb\nURIs: http://sec.example/debian-security\n"
                "Suites: bookworm-security\nComponents: main\n")
    main = ("Types: deb\nURIs: http://deb.example/debian\nSuites: bookworm bookworm-updates\n"
            "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")
    assert base_image.parse_mirror([security + "\n" + main]) == "http://deb.example/debian"
    assert base_image.parse_mirror([security]) is None
    assert base_image.parse_mirror([main], suite="trixie") is None


def test_registry_config_binds_loopback_and_keeps_storage_where_asked(tmp_path: Path) -> None:
    text = registry_server.registry_config(tmp_path / "data", 5123)
    assert "addr: 127.0.0.1:5123" in text
    assert f"rootdirectory: {tmp_path / 'data'}" in text
    assert "auth" not in text


@pytest.mark.parametrize("host", ["ghcr.io", "127.0.0.1", "10.0.0.1:5000", "localhost:x"])
def test_loopback_port_rejects_non_loopback_hosts(host: str) -> None:
    with pytest.raises(ConfigError):
        registry_server.loopback_port(host)
    assert registry_server.loopback_port("127.0.0.1:5005") == 5005


def test_cache_dir_prefers_the_environment(tmp_path: Path) -> None:
    assert setup.cache_dir(tmp_path, {}) == tmp_path / ".cache" / "gpurl"
    assert setup.cache_dir(tmp_path, {"GPURL_CACHE_DIR": str(tmp_path / "c")}) \
        == tmp_path / "c"


def test_image_tool_pins_carry_the_uv_gpurl_runs() -> None:
    from importlib.metadata import version

    assert f"uv=={version('uv')}" in setup.image_tool_pins()


def test_explicit_client_is_tried_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPURL_DOCKER_CLIENT", "/opt/custom/docker")
    assert engine.client_candidates()[0] == "/opt/custom/docker"


def test_missing_program_says_what_to_install() -> None:
    with pytest.raises(BuildError, match="couldn't find 'gpurl-no-such-tool'") as caught:
        proc.run_quiet(["gpurl-no-such-tool", "--version"])
    assert caught.value.hint == "install gpurl-no-such-tool"


def test_spawned_daemon_outlives_the_call_and_is_seen_exiting(tmp_path: Path) -> None:
    pid = proc.spawn_detached(["sleep", "30"], tmp_path / "log")
    assert proc.alive(pid)
    os.kill(pid, signal.SIGTERM)
    assert engine.wait_until(lambda: None if proc.alive(pid) else "gone", timeout=10) \
        == "gone"


# --- real engine and registry --------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.docker
def test_buildkit_client_is_found_and_a_buildx_less_client_is_rejected() -> None:
    need(engine.engine_answers("docker") or engine.engine_answers("/usr/bin/docker"),
         "no Docker engine answers (run `invoke setup-local`)")
    client, rejected = engine.find_buildkit_client()
    assert engine.probe_buildkit(client) is None
    for line in rejected:
        assert "buildx" in line.lower() or "buildkit" in line.lower()


@pytest.mark.integration
def test_registry_starts_once_and_refuses_a_foreign_port(tmp_path: Path) -> None:
    need(shutil.which("docker-registry"), "docker-registry is not installed")
    port = free_port()
    paths = registry_server.RegistryPaths(tmp_path, port)
    pid = registry_server.start_registry(paths, port)
    try:
        assert registry_server.probe_registry(port) == "registry/2.0"
        assert int(paths.pid.read_text()) == pid
        assert str(tmp_path) in paths.config.read_text()
        response = httpx.get(f"http://127.0.0.1:{port}/v2/_catalog")
        assert response.json() == {"repositories": []}
    finally:
        os.kill(pid, signal.SIGTERM)


_LOCK = """version = 1
[[package]]
name = "iniconfig"
version = "2.0.0"
source = {{ registry = "http://127.0.0.1:{port}/simple" }}
wheels = [{{ url = "http://127.0.0.1:{port}/files/{wheel}" }}]
"""


@pytest.mark.integration
@pytest.mark.docker
def test_setup_local_twice_finds_everything_the_first_run_made(tmp_path: Path) -> None:
    need(engine.engine_answers("docker") or engine.engine_answers("/usr/bin/docker")
         or engine.can_self_install(), "no Docker engine and no way to start one here")
    need(shutil.which("docker-registry"), "docker-registry is not installed")
    port, index_port = free_port(), free_port()
    lock = tmp_path / "uv.lock"
    lock.write_text(_LOCK.format(port=index_port, wheel="iniconfig-2.0.0-py3-none-any.whl"))
    config = load_config(REPO_ROOT, profile="demo", env={}, overrides={
        "registry.host": f"127.0.0.1:{port}",
        "build.index-url": f"http://127.0.0.1:{index_port}/simple",
        "lock": str(lock),
    })
    cache = tmp_path / "cache"
    planned = setup.setup_local(config, cache=cache, dry_run=True)
    assert not cache.exists()  # a dry run writes nothing
    assert {s.name: s.status for s in planned.steps}["registry"] == "would"

    first = setup.setup_local(config, cache=cache)
    try:
        status = {s.name: s.status for s in first.steps}
        assert status["registry"] == "started"
        assert status["package index"] == "downloaded"
        assert status["engine"] in ("found", "started", "installed")
        assert status["base image"] in ("found", "pulled", "built")
        assert first.steps[-1].detail.startswith("4/4 pins")  # uv, pip, setuptools, the lock's
        started = time.monotonic()
        second = setup.setup_local(config, cache=cache)
        wall = time.monotonic() - started
        assert [s.status for s in second.steps] == ["found"] * 5
        assert second.client == first.client
        # each step's time is its own share of the call: together no more than the call took
        assert all(s.seconds >= 0 for s in second.steps)
        assert sum(s.seconds for s in second.steps) <= wall

        lock.write_text(_LOCK.format(port=index_port, wheel="iniconfig-2.0.0-cp311-x.whl"))
        with pytest.raises(BuildError, match="none of their recorded files"):
            setup.setup_local(config, cache=cache)
    finally:
        pid = int(registry_server.RegistryPaths(cache, port).pid.read_text())
        os.kill(pid, signal.SIGTERM)


@pytest.mark.integration
@pytest.mark.docker
@pytest.mark.slow
def test_debootstrap_makes_an_image_that_runs_python(tmp_path: Path) -> None:
    """The fallback when the base image cannot be pulled: a real debootstrap + docker import."""
    need(engine.engine_answers("/usr/bin/docker") and shutil.which("debootstrap")
         and engine.can_self_install(), "needs the engine, debootstrap and root on Debian")
    name = f"gpurl-test/debootstrap-{uuid.uuid4().hex[:8]}:1"
    client = engine.find_buildkit_client()[0]
    image = base_image.debootstrap_import(client, name, mirror=base_image.debian_mirror(),
                                          packages=("python3-minimal",), workdir=tmp_path)
    try:
        assert base_image.image_id(client, name) == image
        done = subprocess.run([client, "run", "--rm", name, "python3", "-c",
                               "import sys, os; print(sys.version_info[:2], os.listdir('/dev'))"],
                              capture_output=True, text=True, check=True)
        assert done.stdout.startswith("(3, 11)")
        assert list(tmp_path.iterdir()) == []  # the root filesystem was cleaned up
    finally:
        subprocess.run([client, "rmi", name], capture_output=True)
