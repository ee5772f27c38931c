"""A venv made of written slice layers is a whole venv: what uv installs into a staging prefix,
written by gpurl's writer and laid over the venv layer by layer (as the image's layers overlay
env-base), keeps entry points with the venv's shebang, `.pth` files, a namespace package split
across slices, and each package's RECORD; uv then finds nothing to change.

Real parts: real uv (the staging install both paths run, `oci/layered.install_command`), real
wheels from a loopback index, gpurl's writer. The overlay is the one thing emulated: each
layer's entries are extracted under the venv's own path, in order (the image tests in
test_written_layers.py and test_kaniko_e2e.py run the real overlay, on the demo's packages,
which have no entry points, `.pth` files or namespace packages)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from gpurl_tasks.writer.blob import write_layer
from gpurl_tasks.writer.staging import install_command
from tests.support.pyindex import make_wheel, serve_index

pytestmark = pytest.mark.integration

NAMESPACE = {"ns-a": "nspkg/a/__init__.py", "ns-b": "nspkg/b/__init__.py"}


def _uv() -> str:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("no uv on PATH")
    return uv


def _wheels(directory: Path) -> dict[str, Path]:
    wheels = {name: make_wheel(directory, name, "1.0", extra_files={path: b"PART = 1\n"})
              for name, path in NAMESPACE.items()}
    wheels["tool-x"] = make_wheel(
        directory, "tool-x", "2.0", requires=["ns-a"],
        extra_files={"tool_x/cli.py": b"def main():\n    print('tool-x ran')\n",
                     "tool_x_extra.pth": b"extra_dir\n",
                     "extra_dir/extra_mod.py": b"FOUND = True\n"},
        console_scripts={"tool-x": "tool_x.cli:main"})
    return wheels


def _overlay(layer: Path, venv: Path) -> None:
    """Extract a layer's entries under the venv's path into the venv (names outside it are
    the prefix's parent directories, which the image's filesystem already has)."""
    inside = venv.as_posix().strip("/") + "/"
    with tarfile.open(layer, "r:gz") as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(inside)]
        for member in members:
            member.name = member.name.removeprefix(inside)
        tar.extractall(venv, members=members, filter="tar")


def _run(*argv: str | Path) -> str:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_a_venv_of_written_slices_is_what_uv_installs(tmp_path: Path) -> None:
    uv = _uv()
    venv = tmp_path / "opt" / "venv"
    _run(uv, "venv", "--quiet", "--python", sys.executable, venv)
    wheels = _wheels(tmp_path / "wheels")
    pins = {name: f"{name}=={'2.0' if name == 'tool-x' else '1.0'} --hash=sha256:"
            f"{hashlib.sha256(path.read_bytes()).hexdigest()}" for name, path in wheels.items()}
    with serve_index(tmp_path / "wheels", tmp_path / "index") as url:
        for n, (name, pin) in enumerate(pins.items()):  # one slice per package, as the plan has
            slice_file = tmp_path / f"{n:02d}-{name}.txt"
            slice_file.write_text(f"--index-url {url}\n{pin}\n")
            stage = tmp_path / "stage" / name
            argv = install_command(prefix=str(stage), venv=str(venv), slice_file=str(slice_file))
            _run(uv, *argv[1:])
            layer = write_layer(stage, tmp_path / f"{name}.tar.gz",
                                prefix=venv.as_posix().strip("/"), level=6)
            assert layer.size > 0
            _overlay(tmp_path / f"{name}.tar.gz", venv)
        every = tmp_path / "all.txt"
        every.write_text(f"--index-url {url}\n" + "\n".join(pins.values()) + "\n")
        said = _run(uv, "pip", "sync", "--dry-run", "--python", venv / "bin" / "python", every)
    assert "Would make no changes" in said, said
    script = venv / "bin" / "tool-x"
    assert script.read_text().splitlines()[0] == f"#!{venv}/bin/python"
    assert _run(script).strip() == "tool-x ran"
    python = venv / "bin" / "python"
    _run(python, "-I", "-c", "import nspkg.a, nspkg.b, extra_mod; assert extra_mod.FOUND")
    _run(uv, "pip", "check", "--python", python)
    # every file each RECORD lists is there, and no installer bookkeeping was written
    listed = _run(python, "-I", "-c", (
        "import importlib.metadata as m, sys\n"
        "for d in m.distributions():\n"
        "    missing = [str(f) for f in d.files if not f.locate().exists()]\n"
        "    extra = {'INSTALLER', 'REQUESTED', 'direct_url.json'} & "
        "{f.name for f in d.files}\n"
        "    print(d.metadata['Name'], len(d.files), missing, sorted(extra))\n"))
    rows = {line.split()[0]: line for line in listed.splitlines()}
    assert set(rows) == set(wheels), listed
    assert all(line.endswith("[] []") for line in rows.values()), listed
