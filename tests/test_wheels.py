"""check-wheels: expected names from the Dockerfile pins against real wheel files and MANIFESTs.

The wheels are real zip archives with a .dist-info (METADATA, WHEEL, RECORD) as a build
backend writes them, MANIFESTs are written by the real `sha256sum`, and URL checks fetch
from a real HTTP server on 127.0.0.1.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpurl_tasks.config import BuildSettings, Config, TargetSpec, load_committed_config, load_config
from gpurl_tasks.dockerfile.inputs import parse_dockerfile_inputs
from gpurl_tasks.dockerfile.wheels import (
    ABI_KEY_PREFIX,
    FoundWheel,
    Mismatch,
    WheelCheckError,
    abi_key,
    check_wheels,
    configured_globs,
    expected_filenames,
    manifest_abi_key,
    parse_manifest,
    pins_from_args,
    wheel_specs,
)
from gpurl_tasks.errors import ExitCode
from gpurl_tasks.rebuild.wheelhouse import check_source, read_manifest_keyed, read_wheelhouse
from tests.conftest import REPO_ROOT
from tests.support.pyindex import make_wheel
from tests.support.rebuild_fixtures import dockerfile

GPU_RL_BUILD = load_committed_config(REPO_ROOT, "gpu-rl").build  # its pins and globs, as committed
PINS = pins_from_args(parse_dockerfile_inputs(dockerfile()).effective_args, GPU_RL_BUILD,
                      TargetSpec())
GOOD_VLLM = "vllm-0.11.1+g76259c63a.cu128-cp312-cp312-linux_x86_64.whl"
GOOD_FA = "flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl"
LABELLED_FA = "flash_attn-2.8.3+cu128torch2.11-cp312-cp312-linux_x86_64.whl"
GLOBS = parse_dockerfile_inputs(dockerfile()).wheel_globs


def write_wheel(directory: Path, filename: str, *, version: str | None = None,
                tag: str | None = None) -> Path:
    """A valid wheel; `version`/`tag` put different values inside than the name claims."""
    dist, file_version, *tag_parts = filename[: -len(".whl")].split("-")
    version = version or file_version
    tag = tag or "-".join(tag_parts)
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{dist}/__init__.py": b"VALUE = 1\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\n"
                         f"Tag: {tag}\n".encode(),
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = directory / filename
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def sha256sum_manifest(directory: Path, key: str | None = None) -> None:
    """MANIFEST exactly as the real sha256sum prints it, after the ABI key line `key`."""
    exe = shutil.which("sha256sum")
    if exe is None:
        pytest.fail("sha256sum (coreutils) is missing")
    names = sorted(p.name for p in directory.glob("*.whl"))
    out = subprocess.run([exe, *names], cwd=directory, check=True, capture_output=True,
                         text=True).stdout
    (directory / "MANIFEST").write_text((f"{ABI_KEY_PREFIX}{key}\n" if key else "") + out)


def problems(mismatches: tuple[Mismatch, ...]) -> list[str]:
    return [m.line() for m in mismatches]


def test_expected_names_follow_the_dockerfile_pins() -> None:
    assert expected_filenames(PINS) == {"vllm": GOOD_VLLM, "flash-attn": GOOD_FA}
    bumped = pins_from_args(parse_dockerfile_inputs(dockerfile(
        {"VLLM_FORK_COMMIT": "abcdef1234", "TORCH_VERSION": "2.12.0",
         "BASE_IMAGE": "nvidia/cuda:12.9.0-devel-ubuntu22.04"})).effective_args,
        BuildSettings(), TargetSpec())
    names = expected_filenames(bumped)
    assert "+gabcdef1234.cu129-" in names["vllm"]
    assert names["flash-attn"] == GOOD_FA


def test_expected_names_match_the_dockerfiles_install_patterns() -> None:
    assert GLOBS == ("vllm-*g76259c63a*.whl", "flash_attn-2.8.3-*.whl")
    assert check_wheels(PINS, [FoundWheel(filename=n) for n in expected_filenames(PINS).values()],
                        GLOBS) == ()


def test_missing_args_fall_back_to_config() -> None:
    pins = pins_from_args({}, BuildSettings(flash_attn_version="9.9.9"),
                          TargetSpec(python="3.11"))
    assert pins.flash_attn_version == "9.9.9"
    assert expected_filenames(pins)["vllm"].endswith("-cp311-cp311-linux_x86_64.whl")


def test_correct_wheelhouse_with_manifest_passes(tmp_path: Path) -> None:
    write_wheel(tmp_path, GOOD_VLLM)
    write_wheel(tmp_path, GOOD_FA)
    sha256sum_manifest(tmp_path)
    found = read_wheelhouse(tmp_path)
    assert {w.filename for w in found} == {GOOD_VLLM, GOOD_FA}
    assert all(w.sha256 == w.manifest_sha256 for w in found)
    assert check_wheels(PINS, found) == ()


def test_abi3_and_manylinux_wheels_are_accepted(tmp_path: Path) -> None:
    name = "vllm-0.11.1+g76259c63a1234.cu128-cp38-abi3-manylinux_2_28_x86_64.whl"
    write_wheel(tmp_path, name)
    write_wheel(tmp_path, GOOD_FA)
    assert check_wheels(PINS, read_wheelhouse(tmp_path)) == ()


def test_wrong_fork_commit_is_named(tmp_path: Path) -> None:
    write_wheel(tmp_path, GOOD_VLLM.replace("g76259c63a", "g1234567ab"))
    write_wheel(tmp_path, GOOD_FA)
    lines = problems(check_wheels(PINS, read_wheelhouse(tmp_path)))
    assert lines == [f"vllm: fork commit 1234567ab is not 76259c63a: expected {GOOD_VLLM}, "
                     f"found {GOOD_VLLM.replace('g76259c63a', 'g1234567ab')}"]


def test_wrong_python_tag_is_named(tmp_path: Path) -> None:
    cp311 = GOOD_FA.replace("cp312-cp312", "cp311-cp311")
    write_wheel(tmp_path, GOOD_VLLM)
    write_wheel(tmp_path, cp311)
    lines = problems(check_wheels(PINS, read_wheelhouse(tmp_path)))
    assert len(lines) == 1
    assert "tag cp311-cp311-linux_x86_64 does not install on cp312 linux_x86_64" in lines[0]
    assert cp311 in lines[0]


def test_wrong_arch_torch_and_cuda_labels_are_named(tmp_path: Path) -> None:
    write_wheel(tmp_path, GOOD_VLLM.replace("linux_x86_64", "linux_aarch64"))
    write_wheel(tmp_path, LABELLED_FA.replace("torch2.11", "torch2.8").replace("cu128", "cu126"))
    lines = problems(check_wheels(PINS, read_wheelhouse(tmp_path)))
    assert any("linux_aarch64" in line and line.startswith("vllm: tag") for line in lines)
    assert any(line.startswith("flash-attn: built for torch 2.8, not 2.11.0") for line in lines)
    assert any(line.startswith("flash-attn: built for cu126, not cu128") for line in lines)


def test_labels_are_optional_but_the_dockerfile_pattern_is_not(tmp_path: Path) -> None:
    """A labelled flash-attn wheel agrees with the pins but the RUN's glob would not install it."""
    write_wheel(tmp_path, GOOD_VLLM.replace(".cu128", ""))
    write_wheel(tmp_path, LABELLED_FA)
    assert check_wheels(PINS, read_wheelhouse(tmp_path)) == ()
    lines = problems(check_wheels(PINS, read_wheelhouse(tmp_path), GLOBS))
    assert lines == ["flash-attn: the Dockerfile's install pattern matches no wheel: expected "
                     "one wheel matching flash_attn-2.8.3-*.whl, found none"]


def test_renamed_wheel_is_caught_from_its_dist_info(tmp_path: Path) -> None:
    """A wheel built for another commit and renamed to the expected name."""
    write_wheel(tmp_path, GOOD_VLLM, version="0.11.1+g1234567ab.cu128")
    write_wheel(tmp_path, GOOD_FA, tag="cp311-cp311-linux_x86_64")
    lines = problems(check_wheels(PINS, read_wheelhouse(tmp_path)))
    assert any("vllm: " in line and "was renamed" in line and "g1234567ab" in line
               for line in lines)
    assert any("flash-attn: " in line and "WHEEL tags differ" in line for line in lines)


def test_unparseable_name_and_missing_wheel(tmp_path: Path) -> None:
    write_wheel(tmp_path, GOOD_FA)
    (tmp_path / GOOD_FA).rename(tmp_path / "vllm-latest.whl")
    lines = problems(check_wheels(PINS, read_wheelhouse(tmp_path)))
    assert any(line.startswith("?: unparseable") and "vllm-latest.whl" in line
               for line in lines)
    assert f"vllm: missing: expected {GOOD_VLLM}, found nothing" in lines
    assert f"flash-attn: missing: expected {GOOD_FA}, found nothing" in lines


def test_stale_extra_wheel_is_reported(tmp_path: Path) -> None:
    write_wheel(tmp_path, GOOD_VLLM)
    write_wheel(tmp_path, GOOD_FA)
    write_wheel(tmp_path, GOOD_VLLM.replace("g76259c63a", "g00000000a"))
    lines = problems(check_wheels(PINS, read_wheelhouse(tmp_path), GLOBS))
    assert any("several wheels of one project" in line for line in lines)
    assert not any("install pattern" in line for line in lines)  # the glob picks one
    write_wheel(tmp_path, GOOD_VLLM.replace("0.11.1+", "0.11.0+"))
    lines = problems(check_wheels(PINS, read_wheelhouse(tmp_path), GLOBS))
    assert any(line.startswith("vllm: the Dockerfile's install pattern matches several wheels")
               for line in lines)


def test_manifest_sha_and_listing_are_checked(tmp_path: Path) -> None:
    write_wheel(tmp_path, GOOD_VLLM)
    sha256sum_manifest(tmp_path)
    write_wheel(tmp_path, GOOD_FA)  # not in the MANIFEST
    write_wheel(tmp_path, GOOD_VLLM, version="0.11.1+g76259c63a.cu128")  # same name, new bytes
    with zipfile.ZipFile(tmp_path / GOOD_VLLM, "a") as zf:
        zf.writestr("extra.txt", "changed")
    lines = problems(check_wheels(PINS, read_wheelhouse(tmp_path)))
    assert any("sha256 differs from the MANIFEST" in line for line in lines)
    assert any(line.startswith("flash-attn: wheel is not listed in the MANIFEST")
               for line in lines)


def test_manifest_entry_without_its_file(tmp_path: Path) -> None:
    write_wheel(tmp_path, GOOD_VLLM)
    write_wheel(tmp_path, GOOD_FA)
    sha256sum_manifest(tmp_path)
    (tmp_path / GOOD_FA).unlink()
    lines = problems(check_wheels(PINS, read_wheelhouse(tmp_path), GLOBS))
    assert f"?: listed in the MANIFEST but absent from the wheelhouse: expected the file " \
           f"{GOOD_FA}, found none" in lines
    assert f"flash-attn: missing: expected {GOOD_FA}, found nothing" in lines


def test_malformed_manifest_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "MANIFEST"
    path.write_text("deadbeef\n")
    with pytest.raises(WheelCheckError, match=r"MANIFEST:1: expected '<sha256>  <filename>'"):
        read_manifest_keyed(str(path))


@given(st.lists(st.tuples(st.text("0123456789abcdef", min_size=64, max_size=64),
                          st.from_regex(r"[a-z_]{1,8}-[0-9]\.[0-9]-py3-none-any\.whl",
                                        fullmatch=True)), max_size=5),
       st.booleans())
def test_manifest_round_trips_sha256sum_format(entries: list[tuple[str, str]],
                                               binary: bool) -> None:
    text = "".join(f"{sha} {'*' if binary else ' '}{name}\n" for sha, name in entries)
    assert parse_manifest(text, source="m") == {name: sha for sha, name in entries}


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A real HTTP server on 127.0.0.1 (random port) serving `tmp_path/www`."""
    root = tmp_path / "www"
    root.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.integration
def test_manifest_over_http(http_root: tuple[Path, str]) -> None:
    root, base = http_root
    write_wheel(root, GOOD_VLLM.replace("g76259c63a", "gfeedface1"))
    write_wheel(root, GOOD_FA)
    sha256sum_manifest(root)
    found = read_manifest_keyed(base + "/")[0]
    assert sorted(w.filename for w in found) == sorted(p.name for p in root.glob("*.whl"))
    lines = problems(check_wheels(PINS, found))
    assert len(lines) == 1 and "fork commit feedface1 is not 76259c63a" in lines[0]
    with pytest.raises(WheelCheckError, match="HTTP 404"):
        read_manifest_keyed(base + "/nope/MANIFEST")


def test_check_source_reads_the_configured_dockerfile(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        "[tool.gpurl.build]\ndockerfile = 'Dockerfile'\nwheelhouse = 'wh'\n"
        "wheel-globs = ['vllm-*g${VLLM_FORK_COMMIT}*.whl', 'flash_attn-${FLASH_ATTN_VERSION}-*.whl']\n")
    (tmp_path / "Dockerfile").write_text(dockerfile({"FLASH_ATTN_VERSION": "2.8.4"}))
    (tmp_path / "wh").mkdir()
    write_wheel(tmp_path / "wh", GOOD_VLLM)
    write_wheel(tmp_path / "wh", GOOD_FA)
    report = check_source(load_config(tmp_path, env={}), None)
    assert report.expected["flash-attn"].startswith("flash_attn-2.8.4-")
    assert [m.problem for m in report.mismatches] == [
        "the Dockerfile's install pattern matches no wheel", "version 2.8.3 is not 2.8.4"]
    assert report.to_json()["ok"] is False
    assert os.path.basename(report.source) == "wh"


@pytest.mark.integration
def test_manifest_url_credentials_never_appear(http_root: tuple[Path, str]) -> None:
    root, base = http_root
    canary = "gpurl-canary-7f3a9c"
    write_wheel(root, GOOD_VLLM)
    write_wheel(root, GOOD_FA)
    sha256sum_manifest(root)
    authed = base.replace("http://", f"http://user:{canary}@") + f"/MANIFEST?token={canary}"
    found = read_manifest_keyed(authed)[0]
    assert check_wheels(PINS, found) == ()
    with pytest.raises(WheelCheckError) as info:
        read_manifest_keyed(authed.replace("/MANIFEST", "/missing/MANIFEST"))
    assert canary not in str(info.value) and "HTTP 404" in str(info.value)
    closed = f"http://user:{canary}@127.0.0.1:9/MANIFEST"  # discard port: nothing listens
    with pytest.raises(WheelCheckError) as info:
        read_manifest_keyed(closed)
    assert canary not in str(info.value)


# --- config-driven expected set: the demo profile's own compiled wheel ------------------

DEMO_TAG = "cp311-cp311-linux_x86_64"


def demo_config(**overrides: object) -> Config:
    """The real demo profile, reading the committed docker/Dockerfile.demo."""
    return load_config(REPO_ROOT, profile="demo", env={}, overrides=overrides)


# what the demo's wheel-builder writes for its pins (docker/Dockerfile.demo's MANIFEST line)
DEMO_KEY = "fork=- flash-attn=- torch=- cuda=cu128 py=cp311 platform=linux_x86_64 arch-list=8.0;9.0"


def test_a_manifest_abi_key_other_than_the_pins_is_one_mismatch_with_both(tmp_path: Path) -> None:
    """Wheels compiled for another arch list fail check-wheels; a MANIFEST without a key too;
    a wheelhouse without a MANIFEST has nothing to compare."""
    demo_wheel(tmp_path)
    sha256sum_manifest(tmp_path, DEMO_KEY.replace("8.0;9.0", "8.0"))
    assert problems(check_source(demo_config(), str(tmp_path)).mismatches) == [
        "MANIFEST: the wheels' ABI key differs (rebuild or refetch the wheels): expected "
        f"{DEMO_KEY}, found {DEMO_KEY.replace('8.0;9.0', '8.0')}"]
    sha256sum_manifest(tmp_path)
    assert [m.found for m in check_source(demo_config(), str(tmp_path)).mismatches] == [
        "no ABI key line"]
    (tmp_path / "MANIFEST").unlink()
    assert check_source(demo_config(), str(tmp_path)).mismatches == ()


def test_abi_key_reads_every_pin() -> None:
    key = abi_key(PINS)
    assert key == (f"fork={GPU_RL_BUILD.vllm_fork_commit} flash-attn=2.8.3 torch=2.11.0 "
                   "cuda=cu128 py=cp312 platform=linux_x86_64 arch-list=8.0;9.0")
    assert manifest_abi_key(f"{ABI_KEY_PREFIX}{key}\nabc  x.whl\n") == key
    assert manifest_abi_key("abc  x.whl\n") is None
    assert parse_manifest(f"{ABI_KEY_PREFIX}{key}\n{'a' * 64}  x.whl\n", source="m") == {
        "x.whl": "a" * 64}  # the key line is not a wheel


def demo_wheel(directory: Path, *, version: str = "0.1.0", tag: str = DEMO_TAG) -> Path:
    return make_wheel(directory, "gpurl-demo-ext", version, tag=tag)


def test_demo_profile_expects_its_own_wheel_not_the_gpu_rl_pair(tmp_path: Path) -> None:
    wheel = demo_wheel(tmp_path)
    assert wheel.name == f"gpurl_demo_ext-0.1.0-{DEMO_TAG}.whl"
    sha256sum_manifest(tmp_path, DEMO_KEY)
    report = check_source(demo_config(), str(tmp_path))
    assert report.expected == {"gpurl-demo-ext": "gpurl_demo_ext-*.whl"}
    assert report.mismatches == ()
    assert report.found == (wheel.name,)
    assert report.to_json()["ok"] is True
    gpu_rl_config = load_config(REPO_ROOT, profile="gpu-rl", env={})
    gpu_rl = check_source(gpu_rl_config, str(tmp_path))
    b, py = gpu_rl_config.build, "cp" + gpu_rl_config.target.python.replace(".", "")
    vllm = f"vllm-{b.vllm_version}+g{b.vllm_fork_commit}.{b.cuda_tag}-{py}-{py}-linux_x86_64.whl"
    flash = f"flash_attn-{b.flash_attn_version}-{py}-{py}-linux_x86_64.whl"  # pins as configured
    assert f"gpurl-demo-ext: unexpected wheel: expected {vllm} or {flash}, " \
           f"found {wheel.name}" in problems(gpu_rl.mismatches)


@pytest.mark.parametrize(("tag", "accepted"), [
    ("cp311-cp311-manylinux_2_28_x86_64", True),
    ("cp311-abi3-manylinux_2_36_x86_64", True),
    ("cp312-cp312-linux_x86_64", False),  # the demo targets python 3.11
    ("cp311-cp311-linux_aarch64", False),
    ("cp311-cp311-manylinux_2_38_x86_64", False),  # newer than the target's glibc 2.36
])
def test_demo_wheel_tags_must_install_on_the_target(tmp_path: Path, tag: str,
                                                    accepted: bool) -> None:
    wheel = demo_wheel(tmp_path, tag=tag)
    lines = problems(check_source(demo_config(), str(tmp_path)).mismatches)
    if accepted:
        assert lines == []
    else:
        assert lines == [f"gpurl-demo-ext: tag {tag} does not install on cp311 linux_x86_64: "
                         f"expected gpurl_demo_ext-*.whl, found {wheel.name}"]


def test_demo_wheel_missing_or_doubled(tmp_path: Path) -> None:
    (tmp_path / ".keep").touch()
    lines = problems(check_source(demo_config(), str(tmp_path)).mismatches)
    assert lines == [
        "gpurl-demo-ext: the Dockerfile's install pattern matches no wheel: expected one "
        "wheel matching gpurl_demo_ext-*.whl, found none",
        "gpurl-demo-ext: missing: expected gpurl_demo_ext-*.whl, found nothing"]
    old, new = demo_wheel(tmp_path, version="0.0.9"), demo_wheel(tmp_path)
    lines = problems(check_source(demo_config(), str(tmp_path)).mismatches)
    assert lines[0] == ("gpurl-demo-ext: the Dockerfile's install pattern matches several "
                        f"wheels: expected one wheel matching gpurl_demo_ext-*.whl, found "
                        f"{old.name}, {new.name}")
    assert "gpurl-demo-ext: several wheels of one project in the wheelhouse: expected one " \
           "gpurl-demo-ext wheel, found 2" in lines


def test_demo_wheel_renamed_or_off_manifest_is_caught(tmp_path: Path) -> None:
    built = demo_wheel(tmp_path, version="0.2.0")
    renamed = built.rename(tmp_path / built.name.replace("0.2.0", "0.1.0"))
    sha256sum_manifest(tmp_path)
    with zipfile.ZipFile(renamed, "a") as zf:
        zf.writestr("extra.txt", "changed after the MANIFEST was written")
    lines = problems(check_source(demo_config(), str(tmp_path)).mismatches)
    assert any(line.startswith("gpurl-demo-ext: ") and "was renamed" in line
               and "found 0.2.0" in line for line in lines)
    assert any("sha256 differs from the MANIFEST" in line for line in lines)


def test_a_configured_glob_the_dockerfile_lacks_is_still_expected(tmp_path: Path) -> None:
    """The expected set comes from build.wheel_globs, not only from the Dockerfile's RUNs."""
    demo_wheel(tmp_path)
    config = demo_config(**{"build.wheel-globs": ["gpurl_demo_ext-*.whl", "extra_ext-*.whl"]})
    report = check_source(config, str(tmp_path))
    assert report.expected == {"gpurl-demo-ext": "gpurl_demo_ext-*.whl",
                               "extra-ext": "extra_ext-*.whl"}
    assert problems(report.mismatches) == [
        "extra-ext: the configured wheel glob matches no wheel: expected one wheel matching "
        "extra_ext-*.whl, found none",
        "extra-ext: missing: expected extra_ext-*.whl, found nothing"]


def test_configured_globs_take_the_dockerfile_args_then_the_pins() -> None:
    build = BuildSettings(wheel_globs=("vllm-*g${VLLM_FORK_COMMIT}*.whl",
                                       "flash_attn-$FLASH_ATTN_VERSION-*.whl",
                                       "x-${NOT_AN_ARG}-*.whl"))
    assert configured_globs(build, {"VLLM_FORK_COMMIT": "abcdef1"}, PINS) == (
        "vllm-*gabcdef1*.whl", "flash_attn-2.8.3-*.whl", "x-${NOT_AN_ARG}-*.whl")


def test_gpu_rl_globs_keep_the_pinned_checks() -> None:
    """gpu-rl's globs resolve to the vLLM/flash-attn specs: fork commit still checked."""
    expected = configured_globs(GPU_RL_BUILD, {}, PINS)
    assert [(s.project, s.pinned) for s in wheel_specs(PINS, expected)] == [
        ("vllm", True), ("flash-attn", True)]
    wrong = GOOD_VLLM.replace("g76259c63a", "g1234567ab")
    found = [FoundWheel(filename=wrong), FoundWheel(filename=GOOD_FA)]
    lines = problems(check_wheels(PINS, found, GLOBS, expected_globs=expected))
    assert f"vllm: fork commit 1234567ab is not 76259c63a: expected {GOOD_VLLM}, " \
           f"found {wrong}" in lines
    assert check_wheels(PINS, [FoundWheel(filename=GOOD_VLLM), FoundWheel(filename=GOOD_FA)],
                        GLOBS, expected_globs=expected) == ()


@given(st.lists(st.from_regex(r"[a-z][a-z0-9]{0,4}(_[a-z0-9]{1,4}){0,2}", fullmatch=True)
                .filter(lambda p: p not in ("vllm", "flash_attn")),
                min_size=1, max_size=4, unique=True))
def test_one_matching_wheel_per_glob_passes(projects: list[str]) -> None:
    """Invariant: one target-tagged wheel per configured glob is exactly a clean check.

    Names are valid, normalised wheel names other than the pinned pair (whose globs bring
    the fork-commit and version checks).
    """
    globs = [f"{p}-*.whl" for p in projects]
    found = [FoundWheel(filename=f"{p}-1.0-cp312-cp312-linux_x86_64.whl") for p in projects]
    assert check_wheels(PINS, found, expected_globs=globs) == ()
    assert [m.problem for m in check_wheels(PINS, found[1:], expected_globs=globs)] == [
        "the configured wheel glob matches no wheel", "missing"]


def invoke(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=False, timeout=600,
                          env={**os.environ, **(env or {})})


@pytest.mark.integration
def test_check_wheels_names_each_wheel_once_and_says_what_to_run(tmp_path: Path) -> None:
    """An empty wheelhouse: each expected wheel on one line (it was listed twice: expected,
    then missing, then its pattern matching nothing), and the fix names build-wheels."""
    done = invoke("check-wheels", "--profile", "demo", "--source", str(tmp_path))
    assert done.returncode == ExitCode.CHECK_FAILED, done.stderr
    lines = done.stdout.splitlines()
    report = json.loads(invoke("check-wheels", "--profile", "demo", "--source", str(tmp_path),
                               "--json").stdout)
    for label, pattern in report["expected"].items():
        assert sum(pattern in line for line in lines) == 1, lines
        assert sum(line.startswith(f"  {label}:") for line in lines) == 1, lines
    assert "invoke build-wheels --profile demo" in lines[-1]


@pytest.mark.integration
def test_check_wheels_task_follows_the_profile(tmp_path: Path) -> None:
    wheel = demo_wheel(tmp_path)
    done = invoke("check-wheels", "--profile", "demo", "--source", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [f"wheels in {tmp_path}: OK",
                                        "  gpurl-demo-ext: ok (gpurl_demo_ext-*.whl)"]
    wheel.rename(tmp_path / wheel.name.replace("cp311-cp311", "cp310-cp310"))
    done = invoke("check-wheels", "--profile", "demo", "--source", str(tmp_path), "--json")
    assert done.returncode == ExitCode.CHECK_FAILED
    report = json.loads(done.stdout)
    assert report["ok"] is False
    assert [m["problem"] for m in report["mismatches"]] == [
        "tag cp310-cp310-linux_x86_64 does not install on cp311 linux_x86_64",
        f"{wheel.name.replace('cp311-cp311', 'cp310-cp310')} was renamed: its WHEEL tags "
        "differ from its filename"]
