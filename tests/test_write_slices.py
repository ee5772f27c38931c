"""Slices written for another platform without emulation (issue 43, part D).

The checks (writer/check.py) on layers made here, uv's platform words, the cache key of a
slice staged on another machine; then, with the real Docker engine, real uv and the multiarch
fixture's real PyPI wheels from its loopback index: the gb200 (aarch64) slices written on this
x86_64 machine, checked, written again from nothing with the same digests, and set against
the h100 slices of the same packages.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import platform
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from gpurl_tasks.config import Config, load_config
from gpurl_tasks.errors import BuildError
from gpurl_tasks.local.write_slices import SlicesWritten, staging_variant, write_slices
from gpurl_tasks.writer.blob import LayerError
from gpurl_tasks.writer.check import ELF_MACHINES, check_layer, elf_machine
from gpurl_tasks.writer.records import slice_key, uv_on
from gpurl_tasks.writer.staging import cross_platform, install_command, python_platform
from tests.conftest import REPO_ROOT
from tests.support.local_parts import docker_ready, need

VENV = "/opt/multiarch/envs/rl"


def _elf(machine: int, *, big: bool = False) -> bytes:
    head = b"\x7fELF" + bytes([2, 2 if big else 1, 1]) + bytes(9)  # 64-bit, byte order, v1
    return head + (3).to_bytes(2, "big" if big else "little") \
        + machine.to_bytes(2, "big" if big else "little") + bytes(40)


def _layer(tmp: Path, files: dict[str, bytes]) -> Path:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path = tmp / "layer.tar.gz"
    path.write_bytes(gzip.compress(raw.getvalue()))
    return path


_SITE = "opt/multiarch/envs/rl/lib/python3.11/site-packages"
_GOOD = {f"{_SITE}/pkg/_core.cpython-311-aarch64-linux-gnu.so": _elf(183),
         f"{_SITE}/pkg-1.0.dist-info/entry_points.txt": b"[console_scripts]\npkg = pkg:main\n",
         "opt/multiarch/envs/rl/bin/pkg": f"#!{VENV}/bin/python\nimport pkg\n".encode(),
         "opt/multiarch/envs/rl/bin/helper.sh": b"#!/bin/sh\necho shell scripts are left alone\n"}


def test_an_aarch64_layer_passes_and_is_counted(tmp_path: Path) -> None:
    checked = check_layer(_layer(tmp_path, _GOOD), arch="aarch64", venv=VENV)
    assert (checked.files, checked.elf, checked.scripts) == (4, 1, 2)


def test_an_x86_64_object_in_an_aarch64_layer_fails_naming_it(tmp_path: Path) -> None:
    files = {**_GOOD, f"{_SITE}/pkg/_x.so": _elf(62)}
    with pytest.raises(LayerError, match=r"/opt/.*/pkg/_x\.so is an x86_64 ELF object, not "
                                         r"aarch64 \(e_machine 62, want 183\)"):
        check_layer(_layer(tmp_path, files), arch="aarch64", venv=VENV)
    assert check_layer(_layer(tmp_path, {f"{_SITE}/x.so": _elf(62)}), arch="x86_64",
                       venv=VENV).elf == 1


def test_the_elf_byte_order_is_read_from_its_header() -> None:
    assert elf_machine(_elf(183, big=True)[:20]) == 183 == elf_machine(_elf(183)[:20])
    assert elf_machine(b"#!/bin/sh\n" + bytes(10)) is None
    assert ELF_MACHINES == {"x86_64": 62, "aarch64": 183}


@pytest.mark.parametrize(("script", "ok"), [
    (b"#!/usr/bin/python3\nimport pkg\n", False),  # the staging machine's interpreter
    (b"#!/opt/other/bin/python\n", False),
    (f"#!/bin/sh\n'''exec' {VENV}/bin/python \"$0\" \"$@\"\n' '''\n".encode(), True),  # uv's long-path form
    (b"#!/bin/sh\n'''exec' /usr/bin/python3 \"$0\" \"$@\"\n", False),
])
def test_an_entry_point_must_name_the_venvs_python(tmp_path: Path, script: bytes, ok: bool) -> None:
    layer = _layer(tmp_path, {**_GOOD, "opt/multiarch/envs/rl/bin/pkg": script})
    if ok:
        assert check_layer(layer, arch="aarch64", venv=VENV).scripts == 2
    else:
        with pytest.raises(LayerError, match=r"/opt/multiarch/envs/rl/bin/pkg starts .*, not "
                                             r"#!/opt/multiarch/envs/rl/bin/python"):
            check_layer(layer, arch="aarch64", venv=VENV)


def test_an_undeclared_script_in_uvs_long_path_form_is_checked_too(tmp_path: Path) -> None:
    """A wheel's own `scripts` (no entry point declares them) in uv's `#!/bin/sh` trampoline
    naming the staging machine's interpreter: refused, as a `#!python` line would be."""
    tool = b"#!/bin/sh\n'''exec' /usr/bin/python3 \"$0\" \"$@\"\n"
    layer = _layer(tmp_path, {**_GOOD, "opt/multiarch/envs/rl/bin/tool": tool})
    with pytest.raises(LayerError, match=r"/opt/multiarch/envs/rl/bin/tool starts '#!/bin/sh'"):
        check_layer(layer, arch="aarch64", venv=VENV)


def test_a_declared_entry_point_without_its_script_fails(tmp_path: Path) -> None:
    files = {k: v for k, v in _GOOD.items() if not k.endswith("/bin/pkg")}
    with pytest.raises(LayerError, match="entry point 'pkg' has no script"):
        check_layer(_layer(tmp_path, files), arch="aarch64", venv=VENV)


def test_a_blob_that_is_no_layer_is_one_error(tmp_path: Path) -> None:
    (tmp_path / "junk.tar.gz").write_bytes(b"not gzip")
    with pytest.raises(LayerError, match=r"is not a readable tar\.gz layer"):
        check_layer(tmp_path / "junk.tar.gz", arch="aarch64", venv=VENV)


def test_uvs_platform_words() -> None:
    assert python_platform("aarch64", "2.36") == "aarch64-manylinux_2_36"
    assert python_platform("x86_64", "2.17") == "x86_64-manylinux_2_17"
    with pytest.raises(ValueError, match=r"uv stages no aarch64 glibc 2\.29 target"):
        python_platform("aarch64", "2.29")
    assert cross_platform(arch="x86_64", glibc="2.29", machine="x86_64") is None  # native: as before
    assert cross_platform(arch="aarch64", glibc="2.36", machine="x86_64") == "aarch64-manylinux_2_36"
    argv = install_command(prefix="/stage", venv=VENV, slice_file="/s.txt",
                           platform="aarch64-manylinux_2_36")
    assert argv[argv.index("--python-platform") + 1] == "aarch64-manylinux_2_36"
    assert "--python-platform" not in install_command(prefix="/stage", venv=VENV, slice_file="/s.txt")


def test_uv_help_names_the_platforms_gpurl_uses() -> None:
    """The words python_platform makes are ones the real uv accepts."""
    need(shutil.which("uv"), "uv is not on PATH")
    said = subprocess.run(["uv", "pip", "install", "--help"], capture_output=True, text=True,
                          check=True).stdout
    assert all(python_platform(arch, "2.36") in said for arch in ("x86_64", "aarch64"))


_KEY: dict[str, Any] = dict(label="group-26", slice_text=b"numpy==2.4.6 --hash=sha256:00\n", created_by="c",
            python="3.11.2", venv=VENV, compressor="zlib-1.2.13-6")


def test_an_aarch64_key_is_its_own_and_the_same_on_either_builder() -> None:
    """The slice text is the same for both platforms (it lists every platform's hashes), so
    only the arch tells the h100 and gb200 slices apart; staged here or natively on the
    GB200 cluster (whose uv names aarch64), the key is one."""
    here = slice_key(**_KEY, uv="uv 0.13.9 (x86_64-unknown-linux-gnu)", arch="aarch64")
    native = slice_key(**_KEY, uv="uv 0.13.9 (aarch64-unknown-linux-gnu)", arch="aarch64")
    x86 = slice_key(**_KEY, uv="uv 0.13.9 (x86_64-unknown-linux-gnu)", arch="x86_64")
    assert here == native != x86
    assert uv_on("uv 0.13.9 (x86_64-unknown-linux-gnu)", "aarch64") == "uv 0.13.9 (aarch64-unknown-linux-gnu)"
    assert uv_on("uv 0.13.9", "aarch64") == "uv 0.13.9"


def _multiarch(variant: str = "gb200") -> Config:
    return load_config(REPO_ROOT, profile="multiarch", variant=variant, env={})


def test_the_staging_image_is_the_x86_64_sibling_with_the_same_python_and_venv() -> None:
    config = _multiarch()
    assert staging_variant(config, "x86_64").name == "h100"
    assert staging_variant(config, "aarch64").name == "gb200"  # native on the GB200 cluster
    h100 = config.variant_named("h100")
    other = dataclasses.replace(h100, build=dataclasses.replace(h100.build, venv="/opt/venv"))
    lonely = dataclasses.replace(config, variants=(other, config.variant))
    with pytest.raises(BuildError, match=r"^variant 'gb200' \(aarch64\) cannot be staged on "
                                         r"this x86_64 machine: profile 'multiarch' has no "
                                         r"x86_64 variant with python 3.11 and venv "
                                         r"/opt/multiarch/envs/rl \(hint: add such a variant"):
        staging_variant(lonely, "x86_64")


def test_the_dry_run_names_the_target_platform_and_runs_nothing(tmp_path: Path) -> None:
    from gpurl_tasks.steps import DryRun
    out = tmp_path / "never"
    done = write_slices(_multiarch(), output=out, dry_run=True, say=lambda _: None)
    assert isinstance(done, DryRun) and not out.exists()
    build, *stages = done.commands
    assert "docker/Dockerfile.multiarch" in " ".join(build) and "env-base" in build
    assert len(stages) == 5 and all("--python-platform 'aarch64-manylinux_2_36'" in argv[-1]
                                    or "--python-platform aarch64-manylinux_2_36" in argv[-1]
                                    for argv in stages)


def _docker_ready() -> None:
    docker_ready()
    need(platform.machine() == "x86_64", "the cross-platform test stages aarch64 on x86_64")


@pytest.mark.integration
@pytest.mark.docker
@pytest.mark.slow
def test_gb200_slices_written_here_are_aarch64_and_reproducible(tmp_path: Path) -> None:
    """The real thing: the gb200 slices staged on this x86_64 machine hold only aarch64
    objects, their entry points name the venv's python, a second run from nothing (another
    output directory; env-base sets UV_NO_CACHE, each container starts empty) gives the same
    digests, and the h100 slices of the same packages are other bytes, which the aarch64
    check refuses."""
    _docker_ready()
    from gpurl_tasks.local.setup import cache_dir, package_index
    config = _multiarch()
    package_index(config, cache_dir(config.root))  # setup-local's step: every platform's wheels
    runs = [write_slices(config, output=tmp_path / f"gb200-{n}", dry_run=False, say=print)
            for n in (1, 2)]
    first, second = runs
    assert isinstance(first, SlicesWritten) and isinstance(second, SlicesWritten)
    assert first.platform == "aarch64-manylinux_2_36" and first.staged_on == "h100"
    assert len(first.slices) == 5 and not first.native
    for s in first.slices:  # check again here, from the blob on disk
        checked = check_layer(s.path, arch="aarch64", venv=VENV)
        assert checked.elf >= 1 and checked == s.check
    numpy = next(s for s in first.slices if s.name == "02-group-26")
    assert numpy.check.scripts == 2 and numpy.check.elf > 10  # f2py, numpy-config; its .so files
    assert [s.blob for s in first.slices] == [s.blob for s in second.slices]
    assert [s.key for s in first.slices] == [s.key for s in second.slices]
    assert all(s.path.parent == tmp_path / "gb200-2" for s in second.slices)

    h100 = write_slices(_multiarch("h100"), output=tmp_path / "h100", dry_run=False, say=print)
    assert isinstance(h100, SlicesWritten) and h100.platform is None
    assert [s.name for s in h100.slices] == [s.name for s in first.slices]
    for x86, arm in zip(h100.slices, first.slices, strict=True):
        assert x86.blob.digest != arm.blob.digest and x86.key != arm.key
    with pytest.raises(LayerError, match=r"is an x86_64 ELF object, not aarch64"):
        check_layer(h100.slices[2].path, arch="aarch64", venv=VENV)  # the honest negative


@pytest.mark.parametrize("output", ["/tmp/a:b", "/tmp/x\ny"])
def test_an_output_docker_would_read_as_another_mount_is_refused(output: str) -> None:
    """A colon or a line break in the host path of a `-v` mount is docker's own syntax: the
    dry run refuses it in one line, as the real run would, before any container runs."""
    with pytest.raises(BuildError, match=r"cannot be mounted into a container") as err:
        write_slices(_multiarch(), output=Path(output), dry_run=True, say=lambda _: None)
    assert "\n" not in err.value.message
