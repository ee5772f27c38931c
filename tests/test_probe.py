"""Probing wheel sizes from a real HTTP server on 127.0.0.1 (HEAD + range reads)."""

from __future__ import annotations

import json
import socket
import zipfile
from pathlib import Path

import httpx
import pytest

from gpurl_tasks.errors import SizeError
from gpurl_tasks.plan.probe import probe_url, write_cache
from tests.support.pyindex import make_wheel
from tests.support.rangeserver import serve_files
from tests.support.tasks_runner import run_task

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("payload", [0, 150_000, 2_000_000])
def test_probe_reads_exact_installed_size(tmp_path: Path, payload: int) -> None:
    wheel = make_wheel(tmp_path, "probed-pkg", "1.0", payload_bytes=payload)
    with zipfile.ZipFile(wheel) as zf:
        installed = sum(info.file_size for info in zf.infolist())
    with serve_files(tmp_path) as base, httpx.Client(timeout=10) as client:
        found = probe_url(client, f"{base}/{wheel.name}")
    assert found == {"compressed": wheel.stat().st_size, "installed": installed}


def test_server_without_ranges_gives_compressed_only(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "plain", "1.0", payload_bytes=1000)
    with serve_files(tmp_path, ranges=False) as base, httpx.Client(timeout=10) as client:
        assert probe_url(client, f"{base}/{wheel.name}") == {"compressed": wheel.stat().st_size}


def test_missing_and_non_zip_are_clear_errors(tmp_path: Path) -> None:
    (tmp_path / "fake.whl").write_bytes(b"not a zip" * 100)
    with serve_files(tmp_path) as base, httpx.Client(timeout=10) as client:
        with pytest.raises(SizeError, match=r"could not probe .*/absent\.whl"):
            probe_url(client, f"{base}/absent.whl")
        with pytest.raises(SizeError, match="is not a zip file"):
            probe_url(client, f"{base}/fake.whl")


def test_cache_write_merges_and_keeps_old_file_on_bad_json(tmp_path: Path) -> None:
    cache = tmp_path / "probed.json"
    write_cache(cache, {"u1": {"compressed": 1}})
    write_cache(cache, {"u2": {"compressed": 2, "installed": 3}})
    assert json.loads(cache.read_text()) == {"u1": {"compressed": 1},
                                            "u2": {"compressed": 2, "installed": 3}}
    cache.write_text("{broken")
    with pytest.raises(SizeError, match=r"not valid JSON"):
        write_cache(cache, {"u3": {"compressed": 4}})
    assert cache.read_text() == "{broken"
    assert [p.name for p in tmp_path.iterdir()] == ["probed.json"]


def _closed_port() -> int:
    """A loopback port nothing listens on: bound, then released (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _lock_of(good_url: str, bad_url: str) -> str:
    def package(name: str, url: str, size: str) -> str:
        return (f'[[package]]\nname = "{name}"\nversion = "1.0"\n'
                f'source = {{ registry = "https://pypi.org/simple" }}\n'
                f'wheels = [{{ url = "{url}", hash = "sha256:{"0" * 64}"{size} }}]\n')

    return ('version = 1\nrevision = 3\nrequires-python = ">=3.11"\n\n'
            + package("good-pkg", good_url, ", size = 1") + "\n"
            + package("bad-pkg", bad_url, "") + "\n"
            + '[[package]]\nname = "root"\nversion = "0.1.0"\nsource = { editable = "." }\n'
              'dependencies = [{ name = "good-pkg" }]\n'
              '[package.optional-dependencies]\nweb = [{ name = "bad-pkg" }]\n')


def test_sizes_lists_what_is_missing_in_the_right_words(tmp_path: Path) -> None:
    """The lock has good-pkg's compressed size, not bad-pkg's: both lack the installed size."""
    lock = tmp_path / "uv.lock"
    lock.write_text(_lock_of("http://127.0.0.1:1/good_pkg-1.0-py3-none-any.whl",
                             "http://127.0.0.1:1/bad_pkg-1.0-py3-none-any.whl"))
    done = run_task("sizes", "--lock", str(lock), "--extra", "web",
                    env={"GPURL_LAYERS_SIZE_CACHE": str(tmp_path / "cache.json")})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("2 wheel(s) the target installs have no installed size in the "
                               "probe cache"), lines[0]
    assert "1 of them no compressed size either" in lines[0]
    assert "have no size in the lock" not in done.stdout
    assert lines[1:] == ["  http://127.0.0.1:1/bad_pkg-1.0-py3-none-any.whl  (no compressed size)",
                         "  http://127.0.0.1:1/good_pkg-1.0-py3-none-any.whl"]


def test_offline_probe_lists_and_fetches_nothing(tmp_path: Path) -> None:
    """`sizes --probe --offline` (once `--dry-run`): the same list as without --probe, no URL
    fetched (a closed port would fail), no cache written."""
    port = _closed_port()
    lock = tmp_path / "uv.lock"
    lock.write_text(_lock_of(f"http://127.0.0.1:{port}/good_pkg-1.0-py3-none-any.whl",
                             f"http://127.0.0.1:{port}/bad_pkg-1.0-py3-none-any.whl"))
    cache = tmp_path / "cache.json"
    env = {"GPURL_LAYERS_SIZE_CACHE": str(cache)}
    listed = run_task("sizes", "--lock", str(lock), "--extra", "web", env=env)
    done = run_task("sizes", "--probe", "--offline", "--lock", str(lock), "--extra", "web",
                    env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == listed.stdout and "probing" not in done.stderr
    assert not cache.exists()


def test_probe_tries_every_url_caches_what_worked_and_fails(tmp_path: Path) -> None:
    """One URL refuses (a closed port), one works: the working one is cached, the refused one
    is one line with its host and error, and the exit is non-zero."""
    wheel = make_wheel(tmp_path, "good-pkg", "1.0", payload_bytes=5000)
    with zipfile.ZipFile(wheel) as zf:
        installed = sum(info.file_size for info in zf.infolist())
    port = _closed_port()
    bad = f"http://127.0.0.1:{port}/bad_pkg-1.0-py3-none-any.whl"
    cache = tmp_path / "sizes" / "cache.json"
    cache.parent.mkdir()
    cache.write_text(json.dumps({"https://kept.example/x.whl": {"compressed": 3}}))
    with serve_files(tmp_path) as base:
        good = f"{base}/{wheel.name}"
        lock = tmp_path / "uv.lock"
        lock.write_text(_lock_of(good, bad))
        done = run_task("sizes", "--probe", "--lock", str(lock), "--extra", "web",
                        env={"GPURL_LAYERS_SIZE_CACHE": str(cache)})
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert json.loads(cache.read_text()) == {
        "https://kept.example/x.whl": {"compressed": 3},
        good: {"compressed": wheel.stat().st_size, "installed": installed}}
    assert [p.name for p in cache.parent.iterdir()] == ["cache.json"]  # no temp file left
    assert f"probing {bad}" in done.stderr and f"probing {good}" in done.stderr
    failed = [line for line in done.stdout.splitlines() if "failed" in line]
    assert len(failed) == 1 and failed[0].startswith(f"  failed  127.0.0.1:{port}: "), failed
    assert "ConnectError" in failed[0]
    assert done.stdout.startswith(f"probed 1 of 2 wheel(s) into {cache}")
    assert done.stderr.splitlines()[-2:] == [  # exit 2 is an `error:` line and its hint
        f"error: 1 of 2 probe(s) failed; the 1 that worked are cached in {cache}",
        "  hint: check that this machine reaches the hosts named above (or record the sizes in "
        "layers.size-overrides), then run `invoke sizes --probe` again"]
    assert "Traceback" not in done.stderr
