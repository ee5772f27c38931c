"""One config, two platforms: the multiarch profile (examples/multiarch, locked for linux x86_64
and aarch64) planned for an amd64 and an arm64 variant from the same uv.lock."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from gpurl_tasks.config import load_config, platform_groups
from gpurl_tasks.errors import LockError
from gpurl_tasks.plan.lock import load_lock
from gpurl_tasks.plan.profile import plan_profile
from tests.conftest import REPO_ROOT
from tests.support.checkout import repo_copy


def test_each_platform_is_planned_from_its_own_wheels() -> None:
    """The gb200 plan's sizes are the lock's aarch64 wheels', the h100 plan's the x86_64 ones':
    each package of the fixture has one wheel per machine, so its planned size is the size the
    lock records for the one wheel whose file name names the variant's machine (read here
    from the lock by name, not through the planner's wheel choice)."""
    config = load_config(REPO_ROOT, profile="multiarch", env={})
    plans = plan_profile(config)
    lock = {p.name: p for p in load_lock(config.lock).packages}
    for variant in config.variants:
        planned = {p.name: p.compressed_bytes for p in plans[variant.name].closure}
        assert planned, variant.name
        for name, size in planned.items():
            (wheel,) = [w for w in lock[name].wheels
                        if w.filename.endswith(f"_{variant.target.arch}.whl")]
            assert size == wheel.size, (variant.name, name)
    h100, gb200 = (plans[v] for v in ("h100", "gb200"))
    assert h100.total_compressed_bytes != gb200.total_compressed_bytes


def test_platforms_share_no_slice_and_the_plan_says_so() -> None:
    """A slice file lists every platform's hashes, so only planning apart keeps an arm64 image
    off amd64 slices: each platform is its own group, with its own shared directory, and each
    plan names the platforms it shares nothing with (text and JSON)."""
    config = load_config(REPO_ROOT, profile="multiarch", env={})
    groups = platform_groups(config.variants)
    assert [[v.name for v in g] for g in groups] == [["h100"], ["gb200"]]
    h100, gb200 = config.variants
    assert h100.shared_slices != gb200.shared_slices
    assert gb200.shared_slices.name == "shared-aarch64"
    plans = plan_profile(config)
    assert (plans["h100"].platform, plans["gb200"].platform) == ("linux/amd64", "linux/arm64")
    assert plans["gb200"].apart_from == ("linux/amd64",) and plans["gb200"].shared == 0
    assert plans["h100"].fingerprint != plans["gb200"].fingerprint
    done = subprocess.run([sys.executable, "-m", "invoke", "plan", "--profile", "multiarch",
                           "--variant", "gb200", "--json"], cwd=REPO_ROOT, capture_output=True,
                          text=True, check=True)
    body = json.loads(done.stdout)["variants"]["gb200"]
    assert body["platform"] == "linux/arm64" and body["shares_no_slice_with"] == ["linux/amd64"]
    assert body["native_slices"] == []
    text = subprocess.run([sys.executable, "-m", "invoke", "plan", "--profile", "multiarch"],
                          cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    assert "platform linux/arm64: shares no slice with the profile's linux/amd64" in text


def test_variants_of_one_platform_still_share() -> None:
    """Two x86_64 variants and one aarch64 variant of the same selection: the x86_64 pair share
    their slices (the same blobs), the aarch64 one shares none with them."""
    text = (REPO_ROOT / "pyproject.toml").read_text()
    text = text.replace("[tool.gpurl.profiles.multiarch.variants.gb200]\n",
                        "[tool.gpurl.profiles.multiarch.variants.h100b]\n"
                        'launcher-variable = "DEFAULT_RL_H100B_DOCKER_IMAGE"\n\n'
                        "[tool.gpurl.profiles.multiarch.variants.gb200]\n")
    config = load_config(REPO_ROOT, profile="multiarch", env={}, pyproject_text=text)
    plans = plan_profile(config, repack=True)
    assert plans["h100"].shared == plans["h100b"].shared == len(plans["h100"].layers) > 0
    assert plans["gb200"].shared == 0
    h100 = {p.name for p in plans["h100"].closure}
    assert h100 == {p.name for p in plans["gb200"].closure}


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})


@pytest.mark.integration
def test_rebuild_needed_answers_per_platform(tmp_path: Path) -> None:
    """A GB200-only pin edit (its CUDA arch list) asks for the arm64 image, and nothing of the
    amd64 one, in a copy of this repository with that edit committed. The profile compiles no
    wheels, so a key of the wheels' class rebuilds the image alone, never wheels+image."""
    root = repo_copy(tmp_path / "repo")
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "fixture")
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text()
    assert text.count('cuda-arch-list = "10.0"') == 1
    pyproject.write_text(text.replace('cuda-arch-list = "10.0"', 'cuda-arch-list = "10.0;10.3"'))
    _git(root, "commit", "-qam", "gb200: another arch list")
    done = subprocess.run([sys.executable, "-m", "invoke", "rebuild-needed", "--profile",
                           "multiarch", "--since", "HEAD~1", "--json"], cwd=root,
                          capture_output=True, text=True)
    body = json.loads(done.stdout)["variants"]
    assert (body["h100"]["decision"], body["gb200"]["decision"]) == ("none", "image")
    assert any("build.cuda-arch-list" in r["detail"] for r in body["gb200"]["reasons"])
    assert done.returncode == 10, done.stderr


def test_a_package_without_a_wheel_for_the_platform_is_left_to_its_native_build(
        tmp_path: Path) -> None:
    """pyyaml with only an x86_64 wheel and an sdist: the amd64 image installs the wheel, the
    arm64 one must build the sdist, so its slice is written on an arm64 builder only, never
    staged from this x86_64 machine; the plan names it (text and JSON), and only for gb200."""
    root = repo_copy(tmp_path / "repo")
    lock = root / "examples" / "multiarch" / "uv.lock"
    text = lock.read_text()
    aarch64 = next(line for line in text.splitlines()
                   if "pyyaml-6.0.4-" in line and "aarch64" in line)
    sdist = ('sdist = { url = "http://127.0.0.1:5008/files/pyyaml-6.0.4.tar.gz", '
             'hash = "sha256:' + "0" * 64 + '", size = 130000 }')
    lock.write_text(text.replace(aarch64 + "\n", "").replace(
        'name = "pyyaml"\nversion = "6.0.4"\nsource = { registry = "http://127.0.0.1:5008/simple" }\n',
        'name = "pyyaml"\nversion = "6.0.4"\nsource = { registry = "http://127.0.0.1:5008/simple" }\n'
        + sdist + "\n"))
    overrides = root / "sizes" / "overrides.json"
    sizes = json.loads(overrides.read_text())
    overrides.write_text(json.dumps({**sizes, "pyyaml==6.0.4": 820_000}))  # what a user adds
    plans = plan_profile(load_config(root, profile="multiarch", env={}))
    assert plans["h100"].native_slices == ()
    (native,) = plans["gb200"].native_slices
    layer = next(la for la in plans["gb200"].layers if la.name == native)
    assert [p.name for p in layer.packages] == ["pyyaml"]
    shown = subprocess.run([sys.executable, "-m", "invoke", "plan", "--profile", "multiarch",
                            "--variant", "gb200"], cwd=root, capture_output=True, text=True,
                           check=True).stdout
    assert f"written on a linux/arm64 builder only (uv builds a package): {native}" in shown


def test_a_lock_resolved_for_another_platform_says_how_to_relock() -> None:
    """The team's rl/ lock is resolved for x86_64 only: planning it for aarch64 says so in one
    line with the re-lock step, instead of listing every package whose wheel is missing."""
    config = load_config(REPO_ROOT, profile="gpu-rl", env={}, overrides={"target.arch": "aarch64"})
    with pytest.raises(LockError, match=r"uv\.lock is resolved for .*x86_64.* only, not linux/arm64") as err:
        plan_profile(config)
    assert "platform_machine == 'aarch64'" in (err.value.hint or "")
    assert "\n" not in err.value.message


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the check is of an x86_64 machine")
def test_the_local_engine_refuses_another_platforms_image() -> None:
    """This x86_64 machine cannot build the gb200 image (no emulation): `invoke build
    --backend local` refuses it, its dry run too, in one line naming its cluster; the h100
    variant of the same profile dry-runs."""
    def build(variant: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "invoke", "build", "--profile", "multiarch",
                               "--variant", variant, "--backend", "local", "--dry-run"],
                              cwd=REPO_ROOT, capture_output=True, text=True)
    refused = build("gb200")
    assert refused.returncode == 2 and not refused.stdout
    first = refused.stderr.splitlines()[0]
    assert "linux/arm64 image and this machine is x86_64" in first
    assert "cw-us-east-08a" in refused.stderr
    assert build("h100").returncode == 0
