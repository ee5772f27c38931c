"""Probing wheel sizes from a real HTTP server on 127.0.0.1 (HEAD + range reads)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import httpx
import pytest

from gpurl_tasks.errors import SizeError
from gpurl_tasks.plan.probe import probe_url, write_cache
from tests.support.pyindex import make_wheel
from tests.support.rangeserver import serve_files

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
