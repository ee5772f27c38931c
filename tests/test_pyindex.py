"""The loopback package index: pure page rendering, and real uv installing from it."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.utils import canonicalize_name

from gpurl_tasks.errors import BuildError, ConfigError, GpurlError
from gpurl_tasks.local import download, pyindex
from gpurl_tasks.plan.lock import parse_lock
from tests.conftest import REPO_ROOT
from tests.support.local_parts import free_port, need

PIN = "iniconfig==2.0.0"  # a tiny pure-Python wheel on PyPI

_NAME = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,20}[A-Za-z0-9])?", fullmatch=True)


@given(name=_NAME, version=st.from_regex(r"[0-9]{1,3}(\.[0-9]{1,3}){0,2}", fullmatch=True))
def test_project_of_a_wheel_or_sdist_is_its_normalized_name(name: str, version: str) -> None:
    escaped = canonicalize_name(name).replace("-", "_")
    assert pyindex.project_of(f"{escaped}-{version}-py3-none-any.whl") == canonicalize_name(name)
    assert pyindex.project_of(f"{escaped}-{version}.tar.gz") == canonicalize_name(name)


def test_project_of_other_files_is_none() -> None:
    assert pyindex.project_of("MANIFEST") is None
    assert pyindex.project_of("not-a-wheel.whl") is None


def test_project_page_links_files_with_their_hash() -> None:
    page = pyindex.render_project([("b-1.0-py3-none-any.whl", "ab" * 32), ("b-1.0.tar.gz", "cd")])
    assert f'href="../../files/b-1.0-py3-none-any.whl#sha256={"ab" * 32}"' in page
    assert page.index("b-1.0-py3-none-any.whl") < page.index("b-1.0.tar.gz")


def test_json_project_page_carries_sizes_and_versions() -> None:
    import json

    page = json.loads(pyindex.render_project_json("b", [("b-1.0.tar.gz", "cd", 7),
                                                        ("b-2.0-py3-none-any.whl", "ab", 9)]))
    assert page["meta"]["api-version"] == "1.1"
    assert page["versions"] == ["1.0", "2.0"]
    assert [(f["filename"], f["size"], f["hashes"]["sha256"]) for f in page["files"]] \
        == [("b-1.0.tar.gz", 7, "cd"), ("b-2.0-py3-none-any.whl", 9, "ab")]
    assert page["files"][1]["url"] == "../../files/b-2.0-py3-none-any.whl"


def test_unsatisfied_specs_and_build_requires(tmp_path: Path) -> None:
    (tmp_path / "setuptools-80.9.0-py3-none-any.whl").write_bytes(b"")
    (tmp_path / "uv_build-0.13.6-py3-none-any.whl").write_bytes(b"")
    specs = ["setuptools>=77", "setuptools<70", "uv_build>=0.9,<0.14", "wheel"]
    assert download.unsatisfied(specs, tmp_path) == ["setuptools<70", "wheel"]
    assert download.build_requires('[build-system]\nrequires = ["uv_build>=0.9,<0.14"]\n') \
        == ["uv_build>=0.9,<0.14"]
    assert download.build_requires("[project]\nname = 'x'\n") == []


def test_port_of_accepts_only_loopback_simple_urls() -> None:
    assert pyindex.port_of("http://127.0.0.1:5006/simple") == 5006
    assert pyindex.port_of("http://localhost:7/simple/") == 7
    for bad in ("https://pypi.org/simple", "http://127.0.0.1/simple", "http://127.0.0.1:5/x"):
        with pytest.raises(ConfigError):
            pyindex.port_of(bad)


def test_pins_from_lock_take_only_registry_packages() -> None:
    lock = """
version = 1
[[package]]
name = "demo"
version = "0.1.0"
source = { virtual = "." }
[[package]]
name = "iniconfig"
version = "2.0.0"
source = { registry = "http://127.0.0.1:5006/simple" }
[[package]]
name = "ext"
version = "0.1"
source = { directory = "ext" }
"""
    assert download.pins_from_lock(parse_lock(lock)) == ["iniconfig==2.0.0"]


def test_pins_are_downloaded_from_the_index_the_lock_names() -> None:
    """A pin of a private index (a PyTorch build) comes from that index; one of PyPI, or of
    the loopback index being filled (it serves nothing yet), from pip's own."""
    lock = parse_lock("""
version = 1
[[package]]
name = "torch"
version = "2.13.0+cu132"
source = { registry = "http://127.0.0.1:5010/simple/" }
[[package]]
name = "iniconfig"
version = "2.0.0"
source = { registry = "https://pypi.org/simple" }
[[package]]
name = "filelock"
version = "3.16.1"
source = { registry = "http://127.0.0.1:5006/simple" }
[[package]]
name = "vllm"
version = "0.1"
source = { url = "http://127.0.0.1:5009/vllm-0.1-py3-none-any.whl" }
""")
    assert download.pin_indexes(lock, filling="http://127.0.0.1:5006/simple") == {
        "torch==2.13.0+cu132": "http://127.0.0.1:5010/simple", "iniconfig==2.0.0": None,
        "filelock==3.16.1": None}
    assert download.pin_indexes(lock, filling="http://127.0.0.1:5010/simple")[
        "filelock==3.16.1"] == "http://127.0.0.1:5006/simple"


def test_lock_files_and_unmatched_pins(tmp_path: Path) -> None:
    lock = """
version = 1
[[package]]
name = "a"
version = "1.0"
source = { registry = "http://127.0.0.1:5006/simple" }
sdist = { url = "http://127.0.0.1:5006/files/a-1.0.tar.gz", hash = "sha256:00", size = 1 }
wheels = [
    { url = "http://127.0.0.1:5006/files/a-1.0-py3-none-any.whl", hash = "sha256:01", size = 1 },
]
[[package]]
name = "b"
version = "2.0"
source = { registry = "http://127.0.0.1:5006/simple" }
wheels = [
    { url = "http://127.0.0.1:5006/files/b-2.0-cp311-cp311-manylinux_2_28_x86_64.whl" },
]
""".replace('"sha256:00"', f'"sha256:{"00" * 32}"').replace('"sha256:01"', f'"sha256:{"01" * 32}"')
    assert download.lock_files(parse_lock(lock)) == {
        "a==1.0": {"a-1.0.tar.gz", "a-1.0-py3-none-any.whl"},
        "b==2.0": {"b-2.0-cp311-cp311-manylinux_2_28_x86_64.whl"},
    }
    (tmp_path / "a-1.0-py3-none-any.whl").write_bytes(b"")
    (tmp_path / "b-2.0-cp311-cp311-manylinux_2_17_x86_64.whl").write_bytes(b"")  # other tag
    assert download.unmatched_lock_files(parse_lock(lock), tmp_path) == ["b==2.0"]


def test_missing_pins_match_name_and_version_normalized(tmp_path: Path) -> None:
    (tmp_path / "Foo_Bar-1.0-py3-none-any.whl").write_bytes(b"")
    assert download.missing_pins(["foo-bar==1.0", "foo.bar==1.0.0", "foo-bar==2"], tmp_path) \
        == ["foo-bar==2"]


def test_wheel_machines_read_linux_platform_tags() -> None:
    assert download.wheel_machines(
        "pyyaml-6.0.4-cp311-cp311-manylinux2014_aarch64.manylinux_2_17_aarch64.whl") \
        == {"aarch64"}
    assert download.wheel_machines("a-1-cp311-cp311-manylinux1_x86_64.linux_x86_64.whl") \
        == {"x86_64"}
    assert download.wheel_machines("a-1-py3-none-any.whl") == frozenset()
    assert download.wheel_machines("a-1-cp311-cp311-musllinux_1_2_aarch64.whl") == frozenset()
    assert download.wheel_machines("a-1-cp311-cp311-macosx_11_0_arm64.whl") == frozenset()
    assert download.wheel_machines("a-1.tar.gz") == frozenset()


def test_missing_platform_pins_are_checked_per_machine(tmp_path: Path) -> None:
    lock = """
version = 1
[[package]]
name = "a"
version = "1.0"
source = { registry = "http://127.0.0.1:5008/simple" }
wheels = [
    { url = "http://127.0.0.1:5008/files/a-1.0-cp311-cp311-manylinux_2_17_x86_64.whl" },
    { url = "http://127.0.0.1:5008/files/a-1.0-cp311-cp311-manylinux_2_17_aarch64.whl" },
    { url = "http://127.0.0.1:5008/files/a-1.0-cp312-cp312-manylinux_2_17_aarch64.whl" },
]
[[package]]
name = "b"
version = "2.0"
source = { registry = "http://127.0.0.1:5008/simple" }
wheels = [{ url = "http://127.0.0.1:5008/files/b-2.0-py3-none-any.whl" }]
[[package]]
name = "c"
version = "3.0"
source = { directory = "c" }
"""
    parsed = parse_lock(lock)
    assert download.missing_platform_pins(parsed, tmp_path / "none") \
        == {"aarch64": ["a==1.0"], "x86_64": ["a==1.0"]}
    (tmp_path / "a-1.0-cp311-cp311-manylinux_2_17_x86_64.whl").write_bytes(b"")
    (tmp_path / "b-2.0-py3-none-any.whl").write_bytes(b"")
    # the x86_64 wheel satisfies `missing_pins` (name and version) but serves no aarch64 sync
    assert download.missing_pins(["a==1.0"], tmp_path) == []
    assert download.missing_platform_pins(parsed, tmp_path) == {"aarch64": ["a==1.0"]}
    (tmp_path / "a-1.0-cp311-cp311-manylinux_2_17_aarch64.whl").write_bytes(b"")
    assert download.missing_platform_pins(parsed, tmp_path) == {}


def test_download_target_lists_every_older_manylinux_tag() -> None:
    target = download.DownloadTarget.for_target(python="3.11", glibc="2.36", arch="x86_64")
    assert target.platforms[0] == "manylinux_2_36_x86_64"
    assert "manylinux_2_17_x86_64" in target.platforms
    assert "manylinux2014_x86_64" in target.platforms
    assert "manylinux_2_37_x86_64" not in target.platforms
    args = target.pip_args()
    assert args[args.index("--python-version") + 1] == "3.11"
    assert "cp311" in args


def test_download_refuses_loose_pins(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="exact"):
        download.download(["iniconfig>=2"], tmp_path, target=download.DownloadTarget())


def test_serving_a_missing_directory_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="does not exist"), pyindex.serve(tmp_path / "nope"):
        pass


# --- against real uv ---------------------------------------------------------------------


def _uv() -> str:
    from uv import find_uv_bin

    return find_uv_bin()


def _uv_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "VIRTUAL_ENV"))}
    return {**env, "UV_NO_CACHE": "1", "UV_PYTHON_DOWNLOADS": "never", **extra}


@pytest.fixture(scope="module")
def wheel_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real wheel downloaded from PyPI with pip, as setup-local does on the host."""
    dest = tmp_path_factory.mktemp("wheels")
    try:
        download.download([PIN], dest, target=download.DownloadTarget())
    except GpurlError as exc:
        need(False, f"cannot download {PIN} from the package index: {exc}")
    return dest


@pytest.fixture
def served(wheel_dir: Path) -> Iterator[pyindex.IndexServer]:
    with pyindex.serve(wheel_dir) as server:
        yield server


@pytest.mark.integration
def test_pages_and_files_over_http(served: pyindex.IndexServer, wheel_dir: Path) -> None:
    root = httpx.get(served.url + "/")
    assert root.status_code == 200 and 'href="iniconfig/"' in root.text
    assert httpx.get(served.url + "/IniConfig/").status_code == 301
    page = httpx.get(served.url + "/iniconfig/").text
    wheel = next(wheel_dir.glob("*.whl"))
    assert wheel.name in page
    as_json = httpx.get(served.url + "/iniconfig/", headers={"Accept": pyindex.JSON_TYPE})
    assert as_json.headers["content-type"] == pyindex.JSON_TYPE
    assert as_json.json()["files"][0]["size"] == wheel.stat().st_size
    href = page.split('href="')[1].split("#")[0]
    got = httpx.get(f"{served.url}/iniconfig/{href}")
    assert got.content == wheel.read_bytes()
    assert httpx.get(f"http://127.0.0.1:{served.port}/files/..%2F..%2Fetc%2Fpasswd").status_code \
        == 404
    assert httpx.get(served.url + "/nothing-here/").status_code == 404


@pytest.mark.integration
def test_uv_pip_install_from_the_loopback_index(served: pyindex.IndexServer,
                                                tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([_uv(), "venv", "--python", sys.executable, str(venv)], check=True,
                   env=_uv_env(), capture_output=True)
    subprocess.run([_uv(), "pip", "install", "--python", str(venv / "bin" / "python"),
                    "--index-url", served.url, PIN], check=True, env=_uv_env(),
                   capture_output=True)
    done = subprocess.run([str(venv / "bin" / "python"), "-c",
                           "import iniconfig; print(iniconfig.__file__)"],
                          capture_output=True, text=True, check=True)
    assert str(venv) in done.stdout


def _project(path: Path) -> Path:
    path.mkdir()
    (path / "pyproject.toml").write_text(
        '[project]\nname = "tiny"\nversion = "0.1.0"\nrequires-python = ">=3.11"\n'
        f'dependencies = ["{PIN}"]\n[tool.uv]\npackage = false\n'
    )
    return path


@pytest.mark.integration
def test_sync_frozen_installs_from_the_url_the_lock_recorded(wheel_dir: Path,
                                                            tmp_path: Path) -> None:
    """The demo's scheme: lock against the index at a fixed port, serve there again to build."""
    port = free_port()
    project = _project(tmp_path / "tiny")
    with pyindex.serve(wheel_dir, port=port) as server:
        subprocess.run([_uv(), "lock", "--python", sys.executable, "--default-index", server.url],
                       cwd=project, check=True, env=_uv_env(), capture_output=True)
    lock = (project / "uv.lock").read_text()
    wheel = next(wheel_dir.glob("iniconfig-*.whl"))
    assert f'url = "http://127.0.0.1:{port}/files/{wheel.name}"' in lock
    assert f"size = {wheel.stat().st_size}" in lock  # from the JSON page: the planner needs it

    sync = [_uv(), "sync", "--frozen", "--python", sys.executable]
    with pyindex.serve(wheel_dir, port=port):  # a new server, same port: the build's view
        subprocess.run(sync, cwd=project, check=True, env=_uv_env(), capture_output=True)
    assert list((project / ".venv").glob("lib/python*/site-packages/iniconfig"))

    shutil.rmtree(project / ".venv")  # with the index gone, the same sync cannot install
    failed = subprocess.run(sync, cwd=project, env=_uv_env(), capture_output=True, text=True)
    assert failed.returncode != 0
    assert f"127.0.0.1:{port}" in failed.stderr


def test_lock_files_are_named_as_on_disk_not_as_url_quoted() -> None:
    """A local version's `+` is `%2B` in the URL uv records and `+` in the file pip writes."""
    url = "https://download.pytorch.org/whl/cu124/torch-2.5.1%2Bcu124-cp311-cp311-linux_x86_64.whl"
    lock = f"""
version = 1
[[package]]
name = "torch"
version = "2.5.1+cu124"
source = {{ registry = "https://download.pytorch.org/whl/cu124" }}
wheels = [
    {{ url = "{url}", hash = "sha256:{"ab" * 32}" }},
]
"""
    assert download.lock_files(parse_lock(lock)) == {
        "torch==2.5.1+cu124": {"torch-2.5.1+cu124-cp311-cp311-linux_x86_64.whl"}}



_HOLD = """
import sys, time
from pathlib import Path
from gpurl_tasks.local.builder import serving_index
url, directory, ready, release = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
with serving_index(url, directory, on_wait=lambda line: print(line, flush=True)):
    ready.touch()
    while not release.exists():
        time.sleep(0.05)
"""


@contextlib.contextmanager
def _two_builds(tmp_path: Path) -> Iterator[tuple[str, dict[str, subprocess.Popen[str]]]]:
    """Two real processes each inside `serving_index` on one free port, the first serving
    it and the second joined; each leaves its block when `<name>.release` appears."""
    url = f"http://127.0.0.1:{free_port()}/simple"
    (tmp_path / "files").mkdir()
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        for name in ("first", "second"):
            ready = tmp_path / f"{name}.ready"
            procs[name] = process = subprocess.Popen(
                [sys.executable, "-c", _HOLD, url, str(tmp_path / "files"), str(ready),
                 str(tmp_path / f"{name}.release")], stdout=subprocess.PIPE, text=True,
                env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
            for _ in range(600):
                if ready.exists() or process.poll() is not None:
                    break
                time.sleep(0.05)
            assert ready.exists(), f"{name} never entered its block"
        yield url, procs
    finally:
        for process in procs.values():
            process.kill()
            process.wait()
            if process.stdout is not None:
                process.stdout.close()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url + "/", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.integration
def test_two_builds_share_the_index_and_it_outlives_the_one_that_started_it(tmp_path: Path) -> None:
    """The first build's block ends first: it keeps serving, says why, until the second's
    block ends; then the port is free."""
    with _two_builds(tmp_path) as (url, procs):
        (tmp_path / "first.release").touch()
        first = procs["first"]
        assert first.stdout is not None
        assert "up for 1 other build(s) on this machine" in first.stdout.readline()
        assert first.poll() is None and _answers(url)  # the second still has its index
        (tmp_path / "second.release").touch()
        assert procs["second"].wait(timeout=30) == 0
        assert first.wait(timeout=30) == 0
        assert not _answers(url)


@pytest.mark.integration
def test_a_killed_builds_lease_does_not_keep_the_index_up(tmp_path: Path) -> None:
    """A joined build killed with SIGKILL leaves its lease file behind; the serving build
    ends anyway, because a lease counts only while its process lives."""
    with _two_builds(tmp_path) as (url, procs):
        procs["second"].kill()
        procs["second"].wait()
        (tmp_path / "first.release").touch()
        assert procs["first"].wait(timeout=30) == 0
        assert not _answers(url)


def test_an_index_that_cannot_start_leaves_no_lease(tmp_path: Path) -> None:
    """serve() failing (here: no such directory) removes this build's lease, so a later build
    of the same process never waits for itself."""
    from gpurl_tasks.local.builder import serving_index

    port = free_port()
    url = f"http://127.0.0.1:{port}/simple"
    with pytest.raises(BuildError, match="does not exist"), serving_index(url, tmp_path / "none"):
        pass
    leases = Path(tempfile.gettempdir()) / f"gpurl-index-{port}"
    assert not list(leases.glob(f"lease-{os.getpid()}-*"))
    (tmp_path / "files").mkdir()
    with serving_index(url, tmp_path / "files"):
        assert _answers(url)
    assert not _answers(url)  # it ended at once: no leftover lease of its own kept it up
