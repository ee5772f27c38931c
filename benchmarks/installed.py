"""gpurl as a user installs it: the wheel's size, and the wall time of `gpurl --version` and
`gpurl plan` run from the wheel installed by uv into a fresh virtualenv, against the floor
every invoke-based command pays in that same venv (the interpreter starting and importing
invoke), measured in the same run.

`python -m benchmarks.installed [--runs N]` (or `nox -s bench-installed`) prints a table and
writes benchmarks/out/installed.json. The project planned is examples/multiarch in a scratch
git repository outside the checkout with gpurl's own `multiarch` profile (`scratch_project`);
tests/test_installed.py runs the installed gpurl on the same project.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import REPO_ROOT

__all__ = ["build_wheel", "install", "main", "scratch_project", "user_env"]

MULTIARCH = REPO_ROOT / "examples" / "multiarch"
PROFILE_HEADER = "[tool.gpurl.profiles.multiarch]\n"
OUT = REPO_ROOT / "benchmarks" / "out" / "installed.json"


def user_env(venv: Path) -> dict[str, str]:
    """A user's shell with the venv first on PATH: no PYTHONPATH, no GPURL_* setting (uv reaches
    PyPI through the system's certificates)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPURL_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            "UV_SYSTEM_CERTS": "1"}


def _run(argv: Sequence[str | Path], *, cwd: Path, env: Mapping[str, str]) -> str:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    if done.returncode:
        raise RuntimeError(f"{' '.join(map(str, argv))} exited {done.returncode}: {done.stderr}")
    return done.stdout


def _uv() -> str:
    return shutil.which("uv") or str(Path(sys.executable).parent / "uv")


def build_wheel(out: Path) -> Path:
    """`uv build` of this checkout into `out` (the sdist, then the wheel from the sdist, so
    nothing but what the sdist ships reaches the wheel): the wheel."""
    _run([_uv(), "build", "--quiet", "--out-dir", out, REPO_ROOT], cwd=out.parent,
         env={**os.environ, "UV_SYSTEM_CERTS": "1"})
    (wheel,) = out.glob("gpurl-*.whl")
    return wheel


def install(wheel: Path, venv: Path) -> Path:
    """A fresh virtualenv at `venv` (this interpreter's Python) with the wheel installed by uv,
    its dependencies from PyPI."""
    env = user_env(venv)
    _run([_uv(), "venv", "--quiet", "--python", sys.executable, venv], cwd=venv.parent, env=env)
    _run([_uv(), "pip", "install", "--quiet", "--python", venv / "bin" / "python", wheel],
         cwd=venv.parent, env=env)
    return venv


def scratch_project(root: Path) -> Path:
    """examples/multiarch (pyproject, lock, sources, launcher) at `root`, a git repository of its
    own, with gpurl's `multiarch` profile as its [tool.gpurl] (its own tables, workspace ".")."""
    root.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", "uv.lock"):
        shutil.copy(MULTIARCH / name, root / name)
    for name in ("src", "cloud"):
        shutil.copytree(MULTIARCH / name, root / name)
    ours = (REPO_ROOT / "pyproject.toml").read_text()
    start = ours.index(PROFILE_HEADER)
    after = re.search(r"^\[tool\.gpurl\.profiles\.(?!multiarch[.\]])", ours[start:], re.MULTILINE)
    section = ours[start:start + after.start()] if after else ours[start:]
    section = section.replace('workspace = "examples/multiarch"', 'workspace = "."')
    with (root / "pyproject.toml").open("a") as pyproject:
        pyproject.write(f'\n[tool.gpurl]\ndefault-profile = "multiarch"\n\n{section}\n')
    tomllib.loads((root / "pyproject.toml").read_text())  # still one valid file
    for argv in (["git", "init", "-q"], ["git", "add", "-A"],
                 ["git", "-c", "user.name=gpurl", "-c", "user.email=gpurl@example.com", "commit",
                  "-qm", "the project before gpurl"]):
        subprocess.run(argv, cwd=root, check=True, capture_output=True)
    return root


def _seconds(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], runs: int) -> dict[str, float]:
    """Median and best wall time of `runs` runs (after one warm-up: the page cache, .pyc files)."""
    times = []
    for _ in range(runs + 1):
        start = time.perf_counter()
        _run(argv, cwd=cwd, env=env)
        times.append(time.perf_counter() - start)
    return {"median": statistics.median(times[1:]), "best": min(times[1:])}


def measure(scratch: Path, *, runs: int) -> dict[str, Any]:
    wheel = build_wheel(scratch / "dist")
    venv = install(wheel, scratch / "venv")
    project = scratch_project(scratch / "project")
    env = user_env(venv)
    commands = {"python -c 'import invoke' (floor)": ["python", "-c", "import invoke"],
                "gpurl --version": ["gpurl", "--version"],
                "gpurl plan --profile multiarch": ["gpurl", "plan", "--profile", "multiarch"]}
    return {"wheel": wheel.name, "wheel_bytes": wheel.stat().st_size, "runs": runs,
            "python": sys.version.split()[0], "cpus": os.cpu_count(),
            "seconds": {label: _seconds(argv, cwd=project, env=env, runs=runs)
                        for label, argv in commands.items()}}


def render(result: Mapping[str, Any]) -> str:
    floor = result["seconds"]["python -c 'import invoke' (floor)"]["median"]
    lines = [f"wheel {result['wheel']}: {result['wheel_bytes'] / 1000:.0f} kB",
             f"wall time, median (best) of {result['runs']} runs, Python {result['python']}, "
             f"{result['cpus']} CPUs:",
             "| command | median s | best s | vs floor |", "|---|---|---|---|"]
    for label, t in result["seconds"].items():
        lines.append(f"| `{label}` | {t['median']:.3f} | {t['best']:.3f} | {t['median'] / floor:.1f}x |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="timed runs per command (median reported)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    with tempfile.TemporaryDirectory(prefix="gpurl-installed-") as scratch:
        result = measure(Path(scratch), runs=args.runs)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
