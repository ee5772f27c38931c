"""The deterministic layer writer (writer/blob.py, writer/records.py and the tool): same tree,
same bytes; a well-formed tar."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import platform
import random
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpurl_tasks.writer.blob import MTIME, LayerError, compressor, write_layer
from gpurl_tasks.writer.records import record_of, recorded_history, slice_key

ROOT = Path(__file__).resolve().parent.parent
TAG = slice_key(label="x", slice_text=b"x==1\n", created_by="x", python="3.11.2", venv="/opt/venv",
                uv="uv 0.9.0", compressor=compressor(6), arch="x86_64")

_NAME = st.text(alphabet="abcXY-_.0é", min_size=1, max_size=8).filter(
    lambda s: s not in (".", ".."))
# a tree: relative path parts -> (content, executable); symlinks point at a sibling name
_FILES = st.dictionaries(st.lists(_NAME, min_size=1, max_size=4).map(tuple),
                         st.tuples(st.binary(max_size=300), st.booleans()),
                         min_size=1, max_size=12)
_LINKS = st.lists(st.tuples(_NAME, _NAME), max_size=3)


def _consistent(files: dict[tuple[str, ...], tuple[bytes, bool]]) -> dict[tuple[str, ...],
                                                                         tuple[bytes, bool]]:
    """Drop files whose path is another file's directory (a name cannot be both)."""
    dirs = {parts[:i] for parts in files for i in range(1, len(parts))}
    return {p: v for p, v in files.items() if p not in dirs}


def _make(root: Path, files: dict[tuple[str, ...], tuple[bytes, bool]],
          links: list[tuple[str, str]], seed: int) -> None:
    """Create the tree in a seed-chosen order with seed-chosen mtimes and atimes."""
    rng = random.Random(seed)
    order = list(files.items())
    rng.shuffle(order)
    root.mkdir()
    for parts, (content, executable) in order:
        path = root.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        path.chmod(rng.choice([0o700, 0o775, 0o755, 0o711]) if executable
                   else rng.choice([0o600, 0o664, 0o644, 0o444]))
    for name, target in links:
        link = root / f"link-{name}"
        if not link.exists() and not link.is_symlink():
            link.symlink_to(target)
    for top, dirs, names in os.walk(root):
        for name in dirs + names:
            stamp = rng.randrange(10**9, 2 * 10**9)
            os.utime(Path(top) / name, (stamp + rng.randrange(999), stamp),
                     follow_symlinks=False)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files=_FILES, links=_LINKS, seeds=st.tuples(st.integers(), st.integers()),
       level=st.integers(1, 9))
def test_same_tree_same_bytes_whatever_the_order_and_times(
        files: dict[tuple[str, ...], tuple[bytes, bool]], links: list[tuple[str, str]],
        seeds: tuple[int, int], level: int) -> None:
    files = _consistent(files)
    with tempfile.TemporaryDirectory() as tmp:
        blobs = []
        for n, seed in enumerate(seeds):
            _make(Path(tmp) / f"tree{n}", files, links, seed)
            out = Path(tmp) / f"layer{n}.tar.gz"
            blobs.append((write_layer(Path(tmp) / f"tree{n}", out, prefix="opt/venv",
                                      level=level), out.read_bytes()))
        (first, data), (second, again) = blobs
        assert data == again and first == second
        tar = gzip.decompress(data)
        assert first.digest == "sha256:" + hashlib.sha256(data).hexdigest()
        assert first.diff_id == "sha256:" + hashlib.sha256(tar).hexdigest()
        assert first.size == len(data)
        _check_tar(tar, Path(tmp) / "tree0", files)


def _check_tar(tar: bytes, tree: Path, files: dict[tuple[str, ...], tuple[bytes, bool]]) -> None:
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        members = archive.getmembers()
        names = [m.name for m in members]
        keys = [os.fsencode(m.name + "/" if m.isdir() else m.name) for m in members]
        assert keys == sorted(keys), "entries are not sorted"
        assert len(set(names)) == len(names)
        for name in names:  # every parent directory comes before its child
            parent = name.rpartition("/")[0]
            if parent:
                assert parent in names[:names.index(name)], (parent, name)
        for m in members:
            assert (m.mtime, m.uid, m.gid, m.uname, m.gname) == (MTIME, 0, 0, "", "")
            if m.issym() or m.isdir():
                assert m.mode == (0o777 if m.issym() else 0o755)
            assert "atime" not in m.pax_headers and "ctime" not in m.pax_headers
            if len(m.name) < 90 and (m.name + m.linkname).isascii():
                assert not m.pax_headers, m.name
        for parts, (content, executable) in files.items():
            member = archive.getmember("opt/venv/" + "/".join(parts))
            assert member.mode == (0o755 if executable else 0o644)
            handle = archive.extractfile(member)
            assert handle is not None and handle.read() == content
        assert names[:2] == ["opt", "opt/venv"]
        on_disk = {Path(top, entry).relative_to(tree).as_posix()
                   for top, dirs, found in os.walk(tree) for entry in (*dirs, *found)}
        assert set(names[2:]) == {"opt/venv/" + n for n in on_disk}


def test_a_long_name_gets_a_pax_header_and_still_matches(tmp_path: Path) -> None:
    deep = tmp_path / "tree" / ("d" * 120) / ("f" * 130)
    deep.parent.mkdir(parents=True)
    deep.write_bytes(b"x")
    write_layer(tmp_path / "tree", tmp_path / "a.tgz", prefix="opt/venv", level=6)
    with tarfile.open(tmp_path / "a.tgz") as archive:
        member = archive.getmember(f"opt/venv/{'d' * 120}/{'f' * 130}")
        assert member.pax_headers == {"path": member.name}


def test_a_fifo_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    (tmp_path / "tree").mkdir()
    os.mkfifo(tmp_path / "tree" / "pipe")
    with pytest.raises(LayerError, match="neither a file"):
        write_layer(tmp_path / "tree", tmp_path / "out.tgz", prefix="opt/venv", level=6)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tree"]


def test_the_module_runs_as_a_script_and_prints_its_blob(tmp_path: Path) -> None:
    """The form the staging container runs (`python3 -m`), with only the stdlib imported."""
    (tmp_path / "tree" / "bin").mkdir(parents=True)
    (tmp_path / "tree" / "bin" / "tool").write_text("#!/opt/venv/bin/python\n")
    done = subprocess.run(
        [sys.executable, "-S", "-m", "gpurl_tasks.writer.tool", "write", str(tmp_path / "tree"),
         str(tmp_path / "out.tgz"), "--prefix", "opt/venv", "--level", "6"],
        capture_output=True, text=True, check=True, cwd=ROOT)
    said = json.loads(done.stdout)
    data = (tmp_path / "out.tgz").read_bytes()
    assert said["digest"] == "sha256:" + hashlib.sha256(data).hexdigest()
    assert said["size"] == len(data)
    bad = subprocess.run(
        [sys.executable, "-S", "-m", "gpurl_tasks.writer.tool", "write", str(tmp_path / "missing"),
         str(tmp_path / "x.tgz"), "--prefix", "opt/venv", "--level", "6"],
        capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and not bad.stdout


def test_the_job_app_runs_alone_and_records_a_slice_as_the_local_path_does(
        tmp_path: Path) -> None:
    """The zipapp is what the cluster job runs with env-base's python3, from the bundle, with
    no gpurl on its path: its writer modules are this package's own files, it runs with the
    stdlib alone, and it records a slice as the same one-layer image the local path pushes."""
    import zipfile

    from gpurl_tasks.cluster.kaniko import job_app
    from gpurl_tasks.writer import tool as writer_tool
    from gpurl_tasks.writer.blob import Blob
    from gpurl_tasks.writer.records import slice_image

    tool = tmp_path / "job.pyz"
    tool.write_bytes(job_app().data)
    with zipfile.ZipFile(tool) as app:
        assert app.read("gpurl_tasks/writer/tool.py") == Path(writer_tool.__file__).read_bytes()
    (tmp_path / "tree" / "lib").mkdir(parents=True)
    (tmp_path / "tree" / "lib" / "m.py").write_text("x = 1\n")
    base_manifest = tmp_path / "m.json"
    base_config = tmp_path / "c.json"
    media = "application/vnd.docker.distribution.manifest.v2+json"
    base_manifest.write_text(json.dumps({"mediaType": media}))
    base_config.write_text(json.dumps({"architecture": "amd64", "os": "linux",
                                       "config": {"Env": ["PATH=/opt/venv/bin:/usr/bin"]}}))
    docs = ["--base-manifest", str(base_manifest), "--base-config", str(base_config)]
    done = subprocess.run(
        [sys.executable, "-S", str(tool), "image", str(tmp_path / "tree"), str(tmp_path / "out"),
         "--prefix", "opt/venv", "--level", "6", "--created-by", "the install",
         "--record", TAG, *docs],
        capture_output=True, text=True, check=True, cwd=tmp_path)
    blob = json.loads(done.stdout)
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    manifest = (tmp_path / "out" / "blobs" / "sha256" /
                index["manifests"][0]["digest"].removeprefix("sha256:")).read_bytes()
    local, _ = slice_image(Blob(**blob), created_by=recorded_history("the install", TAG),
                           media_type=media, platform={"architecture": "amd64", "os": "linux"})
    assert manifest == local
    assert (tmp_path / "out" / "blobs" / "sha256" / blob["digest"].removeprefix("sha256:")
            ).stat().st_size == blob["size"]
    # the blobs the recorded image names (what the job checks are in the registry)
    (tmp_path / "record.json").write_bytes(manifest)
    blobs = subprocess.run([sys.executable, "-S", str(tool), "blobs", str(tmp_path / "record.json")],
                           capture_output=True, text=True, check=True)
    named = json.loads(manifest)
    assert blobs.stdout.split() == [named["config"]["digest"], blob["digest"]]
    (tmp_path / "bad.json").write_text(json.dumps({"config": {}, "layers": []}))
    bad = subprocess.run([sys.executable, "-S", str(tool), "blobs", str(tmp_path / "bad.json")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and not bad.stdout


def test_the_installers_lock_at_the_prefix_root_is_left_out(tmp_path: Path) -> None:
    """uv pip install --prefix leaves an empty `.lock` at the prefix: bookkeeping, not a file
    of the venv, so no layer holds it, whoever staged the tree (a package's own `.lock`
    deeper down is content and stays)."""
    (tmp_path / "lib" / "pkg").mkdir(parents=True)
    (tmp_path / ".lock").write_bytes(b"")
    (tmp_path / "lib" / "pkg" / ".lock").write_bytes(b"data")
    write_layer(tmp_path, tmp_path.parent / f"{tmp_path.name}.tar.gz", prefix="opt/venv", level=1)
    with tarfile.open(tmp_path.parent / f"{tmp_path.name}.tar.gz") as tar:
        names = tar.getnames()
    assert "opt/venv/.lock" not in names
    assert "opt/venv/lib/pkg/.lock" in names


@given(created_by=st.text(min_size=1, max_size=200),
       label=st.from_regex(r"[a-z0-9][a-z0-9._-]{0,50}", fullmatch=True),
       slice_text=st.binary(max_size=64))
def test_a_history_entry_gives_back_the_record_it_names(created_by: str, label: str,
                                                        slice_text: bytes) -> None:
    """Whatever the entry says before it, the record's tag is read back as written; and an
    entry that names none (or only something shaped like a tag) reads as None."""
    tag = slice_key(label=label, slice_text=slice_text, created_by="x", python="3.11.2", venv="/opt/venv",
                    uv="uv 0.9.0", compressor=compressor(6), arch="x86_64")
    assert record_of(recorded_history(created_by, tag)) == tag
    assert record_of(created_by) is None or "  # record slice-" in created_by
    assert record_of(f"{created_by} {tag}") is None


def test_only_a_cache_tag_can_be_named_as_a_record() -> None:
    for bad in ("latest", "slice-x-abc", TAG + "\nRUN rm -rf /", TAG.upper()):
        with pytest.raises(LayerError, match="not a slice's cache tag"):
            recorded_history("the install", bad)


def test_the_tool_keys_each_indexed_slice_as_the_local_path_does(tmp_path: Path) -> None:
    """The cluster job's `keys` (one probe of the image it runs in, every slice of the index)
    gives each slice the tag the local path computes from its own probe of env-base; a venv
    that is not there is one line and exit 2. Here the "image" is this machine: this
    virtualenv's Python and the uv on PATH."""
    import shutil
    import zlib

    from gpurl_tasks.writer.probe import probe

    need_uv = shutil.which("uv")
    if need_uv is None:
        pytest.skip("no uv on PATH")
    venv = sys.prefix
    from gpurl_tasks.cluster.kaniko import job_app

    (tmp_path / "job.pyz").write_bytes(job_app().data)
    tool = [sys.executable, "-S", str(tmp_path / "job.pyz")]
    said = json.loads(subprocess.run([*tool, "probe", "--venv", venv], capture_output=True,
                                     text=True, check=True).stdout)
    uv = subprocess.run([need_uv, "--version"], capture_output=True, text=True,
                        check=True).stdout.strip()
    assert said == {"python": sys.version.split()[0], "zlib": zlib.ZLIB_RUNTIME_VERSION, "uv": uv,
                    "machine": platform.machine()}
    (tmp_path / "layers").mkdir()
    files = {"00-torch": b"torch==2.9.1 --hash=sha256:aa\n", "01-pkg-a": b"a==1\n"}
    for name, text in files.items():
        (tmp_path / "layers" / f"{name}.txt").write_bytes(text)
    index = tmp_path / "x.slices"
    index.write_text("".join(f"{n}\t{n.split('-', 1)[1]}\tlayers/{n}.txt\tgpurl: install {n}\t\n"
                             for n in files))
    done = subprocess.run([*tool, "keys", "--index", str(index), "--context", str(tmp_path),
                           "--venv", venv, "--level", "6"], capture_output=True, text=True,
                          check=True)
    found = probe(venv)
    assert done.stdout.splitlines() == [
        f"{n} " + slice_key(label=n.split("-", 1)[1], slice_text=text, created_by=f"gpurl: install {n}",
                            python=found.python,
                            venv=venv, uv=found.uv, compressor=compressor(6, found.zlib),
                            arch=found.machine)
        for n, text in files.items()]
    missing = subprocess.run([*tool, "probe", "--venv", str(tmp_path / "none")],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and not missing.stdout
    index.write_bytes(b"\xff\xfe\ttorch\tlayers/00-torch.txt\tx\t\n")  # not UTF-8: one line, no traceback
    bad = subprocess.run([*tool, "keys", "--index", str(index), "--context", str(tmp_path),
                          "--venv", venv, "--level", "6"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "not UTF-8" in bad.stderr
