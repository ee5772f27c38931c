"""The gpurl the cluster job runs: a zipapp of the installed package's own module files, the
same bytes (so the same sha256) wherever and whenever it is built, running on a bare python3."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gpurl_tasks.attest import tool as attest_tool
from gpurl_tasks.cluster import jobmain, jobstart
from gpurl_tasks.cluster.bundle import MAX_BUNDLE_BYTES
from gpurl_tasks.cluster.jobapp import ZIP_TIME, build_job_app, module_closure
from gpurl_tasks.cluster.kaniko import job_app
from gpurl_tasks.writer import tool as writer_tool
from tests.conftest import REPO_ROOT
from tests.test_architecture import SHIPPED

PACKAGE = REPO_ROOT / "gpurl_tasks"


def test_it_carries_the_shipped_modules_byte_for_byte_and_nothing_else(tmp_path: Path) -> None:
    app = job_app()
    path = tmp_path / "job.pyz"
    path.write_bytes(app.data)
    shipped = {f"gpurl_tasks.{m}" for m in SHIPPED["writer"] | SHIPPED["attest"]
               | SHIPPED["cluster"]}
    assert set(app.modules) <= shipped and "gpurl_tasks.writer.tool" in app.modules \
        and "gpurl_tasks.attest.tool" in app.modules
    with zipfile.ZipFile(path) as archive:
        entries = archive.infolist()
        assert [e.filename for e in entries] == sorted(e.filename for e in entries)
        assert {e.date_time for e in entries} == {ZIP_TIME}
        assert {e.compress_type for e in entries} == {zipfile.ZIP_STORED}
        assert archive.read("__main__.py") == Path(jobmain.__file__).read_bytes()
        for module in app.modules:
            name = module.replace(".", "/") + ".py"
            assert archive.read(name) == (REPO_ROOT / name).read_bytes(), name
        inits = {e.filename for e in entries if e.filename.endswith("__init__.py")}
        assert inits == {"gpurl_tasks/__init__.py", "gpurl_tasks/writer/__init__.py",
                         "gpurl_tasks/attest/__init__.py", "gpurl_tasks/cluster/__init__.py"}
        assert all(archive.read(n) == b"" for n in inits)  # no package's own imports run
    assert app.size < MAX_BUNDLE_BYTES // 100  # far inside the bundle's cap


def test_the_same_package_gives_the_same_sha256_in_another_process(tmp_path: Path) -> None:
    """Another interpreter, hash seed and working directory, and module files with other
    mtimes (a fresh copy of the package): the same bytes."""
    copy = tmp_path / "copy"
    (copy / "gpurl_tasks").mkdir(parents=True)
    for source in PACKAGE.rglob("*.py"):
        target = copy / "gpurl_tasks" / source.relative_to(PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read_bytes())
        os.utime(target, (1_000_000_000, 1_000_000_000))
    code = ("import gpurl_tasks; from gpurl_tasks.cluster.jobapp import build_job_app; "
            "from gpurl_tasks.attest import tool as a; from gpurl_tasks.writer import tool as w; "
            "from gpurl_tasks.cluster import jobstart as s; "
            "print(build_job_app((s, w, a)).sha256, gpurl_tasks.__file__)")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, check=True,
                          env={**os.environ, "PYTHONHASHSEED": "7", "PYTHONPATH": str(copy)})
    sha, where = done.stdout.split()
    assert where == str(copy / "gpurl_tasks" / "__init__.py")  # built from the copy
    assert sha == build_job_app((jobstart, writer_tool, attest_tool)).sha256 == job_app().sha256


def test_it_runs_on_a_bare_python_and_each_tool_answers(tmp_path: Path) -> None:
    """`python3 -S -I` (no site, no environment, no gpurl importable: this venv's editable
    install would answer what the zip lacks): the layer tool by default,
    `attest` for the attestation writer, each its own command line."""
    path = tmp_path / "job.pyz"
    path.write_bytes(job_app().data)
    for args, prog in (([], "gpurl-layer"), (["attest"], "gpurl-attest")):
        done = subprocess.run([sys.executable, "-S", "-I", "-B", str(path), *args, "--help"],
                              cwd=tmp_path, capture_output=True, text=True, check=False)
        assert done.returncode == 0 and done.stdout.startswith(f"usage: {prog} "), done.stderr
    bad = subprocess.run([sys.executable, "-S", "-I", "-B", str(path), "nonsense"], cwd=tmp_path,
                         capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "usage: gpurl-layer" in bad.stderr


def test_the_gpu_checks_zipapp_carries_the_check_alone_and_runs_on_a_bare_python(
        tmp_path: Path) -> None:
    """verify-gpu's zipapp is the same kind, built from the GPU check's closure: the check,
    the modules it imports and `__main__`, none of the build job's tools; on `python3 -I` it
    runs the check by its tool name and refuses, in one line, a tool it does not carry (-S:
    this venv's editable gpurl would answer what the zip lacks)."""
    from gpurl_tasks.cluster.gpujob import gpu_app
    from gpurl_tasks.gpu import check

    app = gpu_app()
    assert app.modules == tuple(sorted(m.__name__ for m in module_closure(check.__name__)))
    assert "gpurl_tasks.gpu.check" in app.modules
    assert {m.removeprefix("gpurl_tasks.") for m in app.modules} <= SHIPPED["gpu"]
    assert app.data == build_job_app((check,)).data != job_app().data
    path = tmp_path / "gpu.pyz"
    path.write_bytes(app.data)
    with zipfile.ZipFile(path) as archive:
        assert archive.read("__main__.py") == Path(jobmain.__file__).read_bytes()
        assert not {n for n in archive.namelist() if n.startswith(("gpurl_tasks/writer/",
                                                                   "gpurl_tasks/attest/"))}
    done = subprocess.run([sys.executable, "-S", "-I", str(path), "gpu-check", "--help"],
                          cwd=tmp_path, capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout.startswith("usage: gpurl-gpu-check "), done.stderr
    for args, tool in (([], jobmain.LAYER), (["attest", "--help"], jobmain.TOOLS["attest"])):
        refused = subprocess.run([sys.executable, "-S", "-I", str(path), *args], cwd=tmp_path,
                                 capture_output=True, text=True, check=False)
        assert (refused.returncode, refused.stdout) == (2, "")
        assert refused.stderr == f"{path}: error: this zipapp does not carry {tool}\n"


def test_a_python3_older_than_the_package_allows_is_refused_in_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A task image's python3 3.10 (ubuntu:22.04's): one line naming cluster.task-image, exit 2,
    before any tool is imported (their modules may use what 3.10 lacks)."""
    monkeypatch.setattr(sys, "version_info", (3, 10, 12, "final", 0))
    monkeypatch.setattr(sys, "version", "3.10.12 (main) [GCC 11.4.0]")
    assert jobmain.main(["start", "prepare"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith("error: this python3 is 3.10.12; gpurl's job steps need 3.11 or newer "
                         "(cluster.task-image)")
