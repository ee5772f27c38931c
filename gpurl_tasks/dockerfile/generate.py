"""Render a profile's Dockerfile and write it atomically, or check the committed one is current.

The edge around the pure recipe: it reads the lock (for its hash), asks the planner for the
plan, lints the model, and either replaces the file via temp file + rename or compares bytes.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from pathlib import Path

from gpurl_tasks.config import Config, load_committed_config, load_profile_names
from gpurl_tasks.dockerfile.context import ensure_launcher_ignored
from gpurl_tasks.dockerfile.lint import lint
from gpurl_tasks.dockerfile.model import DockerfileError, render
from gpurl_tasks.dockerfile.recipe import render_recipe
from gpurl_tasks.errors import GpurlError, LockError
from gpurl_tasks.files import write_atomic
from gpurl_tasks.plan.model import Plan
from gpurl_tasks.plan.planner import plan_for_config

__all__ = [
    "GenerateResult",
    "Planner",
    "StaleFileError",
    "generate",
    "lock_sha256",
    "profiles_with_dockerfile",
    "render_dockerfile",
]

Planner = Callable[[Config], Plan]


class StaleFileError(GpurlError):
    """A committed generated file differs from what the generator writes now."""

    exit_code = 1


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class GenerateResult:
    """What one profile's generation did."""

    profile: str
    path: Path
    changed: bool  # the file was (or, with check, would be) rewritten
    steps: int  # sync RUNs in the chain

    def to_json(self) -> dict[str, object]:
        return {"profile": self.profile, "path": str(self.path), "changed": self.changed,
                "steps": self.steps}


def lock_sha256(lock: Path) -> str:
    """sha256 of the workspace lock's bytes (the provenance label's value)."""
    try:
        return hashlib.sha256(lock.read_bytes()).hexdigest()
    except FileNotFoundError:
        raise LockError(f"no uv.lock at {lock}", hint="run `uv lock` in the workspace") from None


def render_dockerfile(config: Config, plan: Plan) -> str:
    """The Dockerfile text for `config` and `plan`; lint findings are errors."""
    dockerfile = render_recipe(config, plan, lock_sha256=lock_sha256(config.lock))
    findings = lint(dockerfile)
    if findings:
        raise DockerfileError(f"generated Dockerfile fails lint: {findings[0]}",
                              hint=f"{len(findings)} finding(s); fix the recipe or the config")
    return render(dockerfile)


def generate(config: Config, *, check: bool = False, planner: Planner | None = None
             ) -> GenerateResult:
    """Write config.build.dockerfile, or with `check` raise StaleFileError when it is stale."""
    plan = (planner or plan_for_config)(config)
    text = render_dockerfile(config, plan)
    path = config.build.dockerfile
    current = path.read_bytes() if path.exists() else None
    changed = current != text.encode()
    if check:
        if changed:
            shown = path.relative_to(config.root) if path.is_relative_to(config.root) else path
            state = "missing" if current is None else "stale"
            raise StaleFileError(f"{shown} is {state} for profile {config.profile!r}",
                                 hint=f"run `invoke generate --profile {config.profile}` and "
                                      "commit the result")
    else:
        write_atomic(path, text)
    ensure_launcher_ignored(config, check=check)
    return GenerateResult(profile=config.profile, path=path, changed=changed,
                          steps=len(plan.steps))


def profiles_with_dockerfile(root: Path) -> tuple[str, ...]:
    """Every profile in [tool.gpurl.profiles], in file order: each has a generated Dockerfile."""
    return load_profile_names(root)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class GenerateSummary:
    """`invoke generate`'s outcome over one or every profile."""

    root: Path
    check: bool
    results: tuple[GenerateResult, ...]
    exit_code: int = 0

    def human(self) -> str:
        def verb(r: GenerateResult) -> str:
            return "up to date" if not r.changed else ("would change" if self.check else "written")
        return "\n".join(f"{r.path.relative_to(self.root)}: {verb(r)} ({r.steps} sync layers)"
                         for r in self.results)

    def to_json(self) -> dict[str, object]:
        return {"check": self.check, "files": [r.to_json() for r in self.results]}


def generate_profiles(root: Path, profile: str | None, *, check: bool) -> GenerateSummary:
    """Generate (or check) `profile`'s Dockerfile, or every profile's, from the committed config."""
    names = (profile,) if profile else profiles_with_dockerfile(root)
    results = tuple(generate(load_committed_config(root, name), check=check) for name in names)
    return GenerateSummary(root=root, check=check, results=results)
