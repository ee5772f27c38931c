"""rebuild-needed over SkyRL's real lock history, replayed as a user would replay it.

Each of the shared history's 20 versions of skyrl-train's uv.lock (../shared/data, absent
from a user's clone: the test then skips and says so) is put into a scratch copy of this
checkout with the compiled wheels' pins (torch, vllm, flash-attn) configured to match the
lock, generated with `invoke generate`'s own function and committed; then
`rebuild_needed(--since HEAD~1)` answers. The truth is computed apart from the Dockerfiles:
wheels+image when the lock moved torch, vllm or flash-attn (the compiled wheels' versions),
image when the install closure changed otherwise, none when it did not.

Many of these bumps add or drop a package's own slice, which once answered wheels+image (a
slice's own stage was taken for part of the wheel recipe).
"""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import pytest

from gpurl_tasks.config import PythonSelection, TargetSpec, load_config
from gpurl_tasks.dockerfile.generate import generate_profiles
from gpurl_tasks.errors import LockError
from gpurl_tasks.plan.lock import install_closure, parse_lock
from gpurl_tasks.rebuild.inputs import rebuild_needed
from tests.conftest import REPO_ROOT
from tests.support.checkout import SKYRL_PROFILE_HEADER, repo_copy
from tests.support.git import git

pytestmark = pytest.mark.integration

HISTORY = REPO_ROOT.parent / "shared" / "data" / "skyrl-train-lock-history.tar.xz"
COMPILED = ("torch", "vllm", "flash-attn")  # what the wheel-builder compiles, or against
WORKSPACE = "examples/skyrl/skyrl-train"
TARGET = TargetSpec(glibc="2.35")
STALE: list[str] = []  # versions whose lock is stale against their pyproject (not replayed)


def _versions(tmp: Path) -> list[tuple[str, str, str]]:
    """(commit, lock text, pyproject text) of the history, oldest first."""
    with tarfile.open(HISTORY) as tar:
        tar.extractall(tmp, filter="data")
    top = next(tmp.iterdir())
    order = [line.split()[0] for line in (top / "ORDER").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    return [(c, (top / f"{c}.uv.lock").read_text(), (top / f"{c}.pyproject.toml").read_text())
            for c in order]


def _closure(lock_text: str) -> dict[str, tuple[str, str]]:
    """name -> (version, source) of the vllm extra's install closure."""
    lock = parse_lock(lock_text)
    return {p.name: (p.version, json.dumps(p.source, sort_keys=True))
            for p in install_closure(lock, TARGET, PythonSelection(extras=("vllm",))).packages}


def _truth(old: dict[str, tuple[str, str]], new: dict[str, tuple[str, str]]) -> str:
    if any(old.get(name, ("",))[0] != new.get(name, ("",))[0] for name in COMPILED):
        return "wheels+image"
    return "image" if old != new else "none"


def _profile(committed: str, closure: dict[str, tuple[str, str]]) -> str:
    """The committed skyrl profile with one variant (vllm) and the pins the lock asks for."""
    section = committed[committed.index(SKYRL_PROFILE_HEADER):]
    section = re.sub(r"\[tool\.gpurl\.profiles\.skyrl\.variants\.megatron[^\n]*\n(?:[^\[\n][^\n]*\n|\n)*",
                     "", section)
    section = section.replace('extras = ["vllm", "harbor"]', 'extras = ["vllm"]')
    section = section.replace('size-overrides = "sizes/skyrl-train.json"',
                              'size-overrides = "sizes/replay.json"')
    torch = closure["torch"][0].split("+")[0]
    for key, value in (("torch-version", torch), ("flash-attn-version", closure["flash-attn"][0]),
                       ("vllm-version", closure["vllm"][0])):
        section = re.sub(rf'^{key} = "[^"]*"', f'{key} = "{value}"', section, flags=re.M)
    return re.sub(r"^import-asserts = \[\n(?:  [^\n]*\n)*\]\n",
                  'import-asserts = ["import torch, vllm, flash_attn"]\n', section, flags=re.M)


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, str, str, str]]:
    """(commit, truth, decision, reasons) for each bump of the history."""
    if not HISTORY.exists():
        pytest.skip(f"the shared lock history is absent ({HISTORY}): this replay runs in CI "
                    "and in a session's checkout beside ../shared")
    tmp = tmp_path_factory.mktemp("history")
    versions = _versions(tmp / "src")
    root = repo_copy(tmp / "repo")
    sizes = {**json.loads((REPO_ROOT / "sizes" / "skyrl-train.json").read_text()),
             **json.loads((REPO_ROOT / "benchmarks" / "data" / "history-sizes.json").read_text())}
    (root / "sizes" / "replay.json").write_text(json.dumps(sizes, indent=1, sort_keys=True))
    committed = (root / "pyproject.toml").read_text()
    head = committed[:committed.index(SKYRL_PROFILE_HEADER)]
    # the older locks name the gym package's directory skygym: the same sibling, linked
    (root / WORKSPACE / "skygym").symlink_to("../skyrl-gym")
    git(root, "init", "-q")
    rows = []
    previous: dict[str, tuple[str, str]] | None = None
    for commit, lock_text, pyproject_text in versions:
        closure = _closure(lock_text)
        (root / WORKSPACE / "uv.lock").write_text(lock_text)
        (root / WORKSPACE / "pyproject.toml").write_text(pyproject_text)
        (root / "pyproject.toml").write_text(head + _profile(committed, closure))
        try:
            generate_profiles(root, "skyrl", check=False)
        except LockError as exc:  # the history holds a commit whose lock is stale against
            # its own pyproject (SkyRL relocked in the next one): generate refuses it, as a
            # user's would; the replay goes on from the last version that generated
            assert "is stale against" in exc.message, exc.message
            STALE.append(commit)
            git(root, "checkout", "-q", "--", ".")
            continue
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", commit)
        if previous is not None:
            config = load_config(root, profile="skyrl", variant="standard", env={})
            report = rebuild_needed(config, since="HEAD~1", env={})
            reasons = "; ".join(f"{r.kind}: {r.detail}" for r in report.decision.reasons
                                if r.decision == report.verdict)
            rows.append((commit, _truth(previous, closure), report.verdict, reasons))
        previous = closure
    return rows


def test_every_bump_of_the_real_history_gets_the_true_decision(
        replay: list[tuple[str, str, str, str]]) -> None:
    wrong = [f"{c}: truth {t}, answered {d} ({why[:300]})" for c, t, d, why in replay if t != d]
    assert not wrong, "\n".join(wrong)
    answers = {t for _, t, _, _ in replay}
    assert len(replay) + len(STALE) == 19 and answers == {"none", "image", "wheels+image"}, replay
    # 825f2e82e: its pyproject's flashrl extra names a vllm wheel URL, its lock still the
    # flashrl git branch; 22993692e: its pyproject asks for mini-swe-agent from git
    assert STALE == ["825f2e82e", "22993692e"], STALE


def test_the_history_adds_and_drops_slices_without_a_wheel_decision(
        replay: list[tuple[str, str, str, str]]) -> None:
    """The bumps that add or drop slices are there (else the first test proves nothing about
    them: env-chain gains or loses a slice file's COPY), and none is answered wheels+image."""
    moved = re.compile(r"stage env-chain: .*[+-] COPY docker/layers/")
    slice_moves = [row for row in replay if row[2] == "image" and moved.search(row[3])]
    assert slice_moves, "no bump of the history added or dropped a slice"
    assert not any("wheel-recipe" in why for *_, why in replay)
