"""A committed copy of this checkout for end-to-end tests, the task CLI run in it, and the
demo's small lock bump (one tail package moved to another release on the loopback index)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Mapping
from pathlib import Path

from gpurl_tasks.config import load_config
from gpurl_tasks.local.builder import serving_index
from gpurl_tasks.local.setup import index_dir
from tests.conftest import REPO_ROOT
from tests.support.checkout import repo_copy

__all__ = ["BUMPED", "CACHE", "DEMO_ABI_LINE", "copy_tree", "demo_wheelhouse", "invoke", "relock"]

CACHE = REPO_ROOT / ".cache" / "gpurl"
BUMPED = "pycparser==3.11"  # the demo lock pins 3.12 (a tail package)
# the ABI key line the demo's wheel-builder writes for its pins (its MANIFEST's first line),
# written by hand here as the wheel dataset holds it, so a change to the key format fails
DEMO_ABI_LINE = ("# gpurl-abi fork=- flash-attn=- torch=- cuda=cu128 py=cp311 "
                 "platform=linux_x86_64 arch-list=8.0;9.0")


def copy_tree(dest: Path) -> Path:
    """The working tree's tracked and unignored files, committed in a fresh repository."""
    repo_copy(dest, untracked=True)
    for argv in (["git", "init", "-q"], ["git", "add", "-A"],
                 ["git", "-c", "user.name=gpurl", "-c", "user.email=gpurl@localhost",
                  "commit", "-qm", "demo workspace"]):
        subprocess.run(argv, cwd=dest, check=True)
    return dest


def demo_wheelhouse(dest: Path, work: Path, *, module_doc: str = "", payload_bytes: int = 0
                    ) -> Path:
    """The demo's compiled wheel, built from its source (in `work`) as the wheel-builder builds
    it, in `dest` with a MANIFEST shaped like the wheel dataset's: a prebuilt wheelhouse to
    serve at the cluster profile's wheel-base-url. `module_doc`: the module's docstring
    instead of its own, so the same wheel name and version holds other compiled bytes (a
    rebuilt wheel). `payload_bytes`: one more file of that many incompressible bytes in the
    package, a stand-in for the size of real compiled kernels (the vLLM fork, flash-attn)."""
    from tests.support.local_parts import build_source_wheel

    demo = load_config(REPO_ROOT, profile="demo", env={})
    (spec,) = demo.build.wheel_specs
    source = REPO_ROOT / spec[2:]
    if module_doc:
        edited = work / "edited" / source.name
        shutil.copytree(source, edited)
        code = next(edited.glob("*.c"))
        text = code.read_text()
        assert '"Demo C extension."' in text
        code.write_text(text.replace('"Demo C extension."', json.dumps(module_doc)))
        source = edited
    wheel = build_source_wheel(source, demo.target.python, work,
                               arch_list=demo.build.cuda_arch_list)
    if payload_bytes:
        _add_payload(wheel, payload_bytes)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(wheel, dest)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    (dest / "MANIFEST").write_text(f"{DEMO_ABI_LINE}\n{digest}  {wheel.name}\n")
    return dest


def _add_payload(wheel: Path, size: int) -> None:
    """Add `gpurl_demo_ext_payload/kernels.bin` (`size` bytes from a seeded generator: the same
    bytes on every run, and gzip cannot shrink them) to the wheel, with its RECORD line."""
    name = "gpurl_demo_ext_payload/kernels.bin"
    rng = random.Random(size)
    data = b"".join(rng.randbytes(min(1 << 20, size - at)) for at in range(0, size, 1 << 20))
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")
    with zipfile.ZipFile(wheel) as archive:
        entries = {info.filename: archive.read(info) for info in archive.infolist()}
    record = next(n for n in entries if n.endswith(".dist-info/RECORD"))
    entries[record] = entries[record] + f"{name},sha256={digest},{size}\n".encode()
    entries[name] = data
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for entry, content in entries.items():
            archive.writestr(entry, content)


def invoke(root: Path, *args: str, timeout: int = 1800,
           env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`invoke ARGS` in the copy at `root` (its own gpurl_tasks), sharing the local cache."""
    run_env = {**(os.environ if env is None else env), "PYTHONPATH": str(root),
               "GPURL_CACHE_DIR": str(CACHE)}
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=root, env=run_env,
                          capture_output=True, text=True, timeout=timeout)


def relock(tree: Path, pyproject_edit: tuple[str, str], *, upgrade: str = "") -> None:
    """Edit the copy's demo pyproject, `uv lock` it against the loopback index, regenerate the
    Dockerfile and slices from the committed ones, and commit (the tag names a commit)."""
    config = load_config(tree, profile="demo", env={})
    pyproject = config.workspace / "pyproject.toml"
    old, new = pyproject_edit
    assert old in pyproject.read_text()
    pyproject.write_text(pyproject.read_text().replace(old, new, 1))
    uv = shutil.which("uv")
    assert uv
    with serving_index(config.build.index_url, index_dir(CACHE)):
        argv = [uv, "lock", *(["--upgrade-package", upgrade] if upgrade else [])]
        done = subprocess.run(argv, cwd=config.workspace, capture_output=True, text=True,
                              env={**os.environ, "UV_NO_CACHE": "1"})
    assert done.returncode == 0, done.stderr
    generated = invoke(tree, "generate", "--profile", "demo")
    assert generated.returncode == 0, generated.stderr
    for argv in (["git", "add", "-A"], ["git", "-c", "user.name=gpurl", "-c",
                                        "user.email=gpurl@localhost", "commit", "-qm", "bump"]):
        subprocess.run(argv, cwd=tree, check=True)
