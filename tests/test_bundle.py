"""The iris workspace bundle, measured on real git repositories in temp dirs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpurl_tasks.cluster.bundle import Bundle, bundle_files, check_bundle, measure_bundle
from gpurl_tasks.errors import BuildError
from gpurl_tasks.git import dirty_tracked_files, ls_bundle_files, short_sha
from tests.support.git import git

pytestmark = pytest.mark.integration


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "docker" / "wheelhouse").mkdir(parents=True)
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / ".gitignore").write_text("docker/wheelhouse/*\n!docker/wheelhouse/.keep\n*.whl\n"
                                     "ignored.txt\n")
    (root / "docker" / "wheelhouse" / ".keep").write_text("")
    (root / "docker" / "wheelhouse" / "flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl").write_bytes(
        b"x" * 1000)
    (root / "pkg" / "mod.py").write_text("x = 1\n")
    (root / "pkg" / "__pycache__" / "mod.cpython-312.pyc").write_bytes(b"\0" * 10)
    (root / "ignored.txt").write_text("no")
    git(root, "init", "-q")
    git(root, "add", ".gitignore", "docker/wheelhouse/.keep", "pkg/mod.py")
    git(root, "commit", "-qm", "init")
    (root / "untracked.py").write_text("y = 2\n")  # not ignored: iris bundles it
    return root


def test_files_are_what_iris_bundles(repo: Path) -> None:
    assert bundle_files(repo, ls_bundle_files) == (
        ".gitignore", "docker/wheelhouse/.keep", "pkg/mod.py", "untracked.py")


def test_gitignored_wheels_do_not_ride(repo: Path) -> None:
    bundle = measure_bundle(repo, ls_bundle_files)
    assert bundle.wheels == ()
    check_bundle(bundle)


def test_force_added_wheel_is_refused(repo: Path) -> None:
    git(repo, "add", "-f", "docker/wheelhouse/flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl")
    bundle = measure_bundle(repo, ls_bundle_files)
    with pytest.raises(BuildError, match="wheel file"):
        check_bundle(bundle)


def test_zip_size_is_measured_and_capped(repo: Path) -> None:
    (repo / "noise.bin").write_bytes(os.urandom(200_000))
    bundle = measure_bundle(repo, ls_bundle_files)
    assert 200_000 < bundle.zip_bytes < 210_000  # random bytes do not compress
    check_bundle(bundle, limit=bundle.zip_bytes)
    with pytest.raises(BuildError, match="over iris's hard cap"):
        check_bundle(bundle, limit=bundle.zip_bytes - 1)


def test_compressible_files_count_compressed(repo: Path) -> None:
    """iris caps the zipped bundle: 30 MiB of text that zips to a few kB rides it."""
    (repo / "zeros.txt").write_bytes(b"0" * 30 * 1024 * 1024)  # 30 MiB raw, tiny zipped
    bundle = measure_bundle(repo, ls_bundle_files)
    assert "zeros.txt" in bundle.files  # untracked and not ignored: iris bundles it
    assert 0 < bundle.zip_bytes < 1024 * 1024  # deflated, not the raw 30 MiB
    check_bundle(bundle)


def test_check_bundle_message_counts_wheels() -> None:
    bundle = Bundle(files=("a.whl", "b.whl", "c.whl", "d.whl"), zip_bytes=1,
                    wheels=("a.whl", "b.whl", "c.whl", "d.whl"))
    with pytest.raises(BuildError, match=r"4 wheel file\(s\): a.whl, b.whl, c.whl \.\.\."):
        check_bundle(bundle)


def test_git_queries(repo: Path, tmp_path: Path) -> None:
    sha = short_sha(repo)
    assert sha is not None and len(sha) >= 7
    assert dirty_tracked_files(repo) == []
    (repo / "pkg" / "mod.py").write_text("x = 2\n")
    assert dirty_tracked_files(repo) == ["pkg/mod.py"]
    assert short_sha(tmp_path) is None


def test_the_staged_workspace_is_the_bundle_and_the_jobs_files_even_inside_a_repository(
        repo: Path) -> None:
    """Staged where git would find the repository above it (a TMPDIR inside a checkout), git
    in the iris call's environment finds none, so iris bundles the staged files as they are
    (its walk when git lists nothing), and its measure is the bundle's plus the job's files."""
    import subprocess

    from gpurl_tasks.cluster.bundle import stage_workspace, staged_env, with_job_files

    files = bundle_files(repo, ls_bundle_files)
    job = {".gpurl/job.pyz": b"PK" * 500, ".gpurl/slices": b"00-torch torch x\n"}
    alone = measure_bundle(repo, ls_bundle_files)
    measured = with_job_files(alone, job)
    dest = repo / "tmp" / "workspace"
    dest.mkdir(parents=True)
    stage_workspace(repo, files, job, dest)
    staged = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert staged == sorted([*files, *job])
    assert (dest / "pkg" / "mod.py").read_bytes() == (repo / "pkg" / "mod.py").read_bytes()
    env = staged_env({**os.environ, "GIT_DIR": str(repo / ".git")}, dest)
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=dest, env=env, capture_output=True, text=True, check=False)
    assert listed.returncode != 0 and "not a git repository" in listed.stderr
    assert set(measured.files) == set(staged) and measured.zip_bytes > alone.zip_bytes


def test_a_repository_file_where_the_jobs_files_go_is_refused(repo: Path, tmp_path: Path) -> None:
    from gpurl_tasks.cluster.bundle import stage_workspace

    with pytest.raises(BuildError, match=r"the repository has \.gpurl/notes\.txt, where invoke "
                                         r"build stages the job's own files") as info:
        stage_workspace(repo, (".gpurl/notes.txt",), {".gpurl/job.pyz": b""}, tmp_path / "ws2")
    assert "rename or gitignore it" in (info.value.hint or "")
