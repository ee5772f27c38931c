"""Read the baked inputs at a commit and in the working tree, then ask rebuild.py to compare.

The edge of `rebuild-needed`: git (through gitrepo), the config cascade at each point, the
lock's install closure (through lock.py), and the default `--since` taken from the launcher's
provenance comment. Everything it returns is plain data for the task to print.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from gpurl_tasks import git, values
from gpurl_tasks.config import Config, PythonSelection, TargetSpec, load_config
from gpurl_tasks.dockerfile.inputs import DockerfileInputs, parse_dockerfile_inputs
from gpurl_tasks.dockerfile.wheels import pins_from_args
from gpurl_tasks.errors import ConfigError, GpurlError, LockError
from gpurl_tasks.files import read_text, write_atomic
from gpurl_tasks.oci.pin import PIN_MARKER
from gpurl_tasks.rebuild.fingerprint import ClosureEntry, Decision, Fingerprint, decide, fingerprint

__all__ = [
    "ClosureFn",
    "RebuildReport",
    "closure_entries",
    "default_since",
    "provenance_commit",
    "rebuild_needed",
]

ClosureFn = Callable[[str, TargetSpec, PythonSelection], Iterable[ClosureEntry]]
_PROVENANCE = re.compile(r"gpurl-git-sha:\s*(\S+)")
_NEAR = 6  # lines either side of the assignment searched for the provenance comment


def closure_entries(lock_text: str, target: TargetSpec,
                    selection: PythonSelection) -> list[ClosureEntry]:
    """(name, version, artifact) for every non-local package the image installs.

    The artifact is the hash of the wheel uv would pick for the target (the sdist's when no
    wheel fits); a package without hashes (git, url) is identified by its source instead.
    """
    from gpurl_tasks.plan.lock import install_closure, parse_lock
    from gpurl_tasks.plan.sizes import select_wheel
    from gpurl_tasks.plan.target import target_tags

    lock = parse_lock(lock_text)
    tags = target_tags(target)
    out: list[ClosureEntry] = []
    for pkg in install_closure(lock, target, selection).packages:
        artifact = select_wheel(pkg, tags) or pkg.sdist
        ident = artifact.hash if artifact is not None and artifact.hash else None
        if ident is None:
            ident = ",".join(f"{k}={v}" for k, v in sorted(pkg.source.items())) or None
        out.append((pkg.name, pkg.version, ident))
    return out


def provenance_commit(launcher_text: str, variable: str, tag_prefix: str) -> str | None:
    """The commit the pinned image was built from, from the comments near `variable`.

    Either an explicit `gpurl-git-sha: <sha>` or the immutable `<tag_prefix>-<sha>` tag that
    `invoke pin` writes in its `# gpurl pin:` comment. Either holds a source id
    (values.source_id); a dirty tree's id names the commit its edits were made on, and that
    commit is where the comparison starts.
    """
    lines = launcher_text.splitlines()
    assign = re.compile(rf"^\s*{re.escape(variable)}\s*(?::[^=]*)?=")
    tag = re.compile(rf"{re.escape(PIN_MARKER)}\s*{re.escape(tag_prefix)}-(\S+)")
    for i, line in enumerate(lines):
        if assign.match(line):
            near = lines[max(0, i - _NEAR): i + _NEAR + 1]
            for pattern in (_PROVENANCE, tag):
                for text in near:
                    match = pattern.search(text.strip())
                    sha = match and values.source_commit(
                        match.group(1).lower() if pattern is _PROVENANCE else match.group(1))
                    if sha:
                        return sha
    return None


def default_since(config: Config, repo: Path) -> tuple[str, str]:
    """(ref, where it came from): the pinned image's recorded commit if known, else HEAD~1."""
    try:
        text = read_text(config.launcher.path, what="launcher file")
    except GpurlError:
        text = ""  # no readable launcher: no pinned provenance to start from
    sha = provenance_commit(text, config.launcher.variable, config.registry.tag_prefix)
    if sha is not None:
        try:
            git.resolve_commit(repo, sha)
            return sha, f"provenance comment in {config.launcher.path.name}"
        except git.GitError:
            pass
    return "HEAD~1", "HEAD~1 (no pinned-image provenance found)"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RebuildReport:
    """The decision plus where the comparison started, for printing and --json."""

    decision: Decision
    since_ref: str
    since_commit: str
    since_source: str
    old: Fingerprint
    new: Fingerprint

    @property
    def exit_code(self) -> int:
        return self.decision.exit_code

    @property
    def verdict(self) -> str:
        """The decision in a word: exit codes 10 and 11 are answers, not failures."""
        return self.decision.decision

    def human(self) -> str:
        lines = [f"rebuild: {self.decision.decision}  (since {self.since_ref} = "
                 f"{self.since_commit[:12]}, from {self.since_source})"]
        lines += [f"  - {r.kind}: {r.detail}" for r in self.decision.reasons]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.decision.to_json(),
            "since": {"ref": self.since_ref, "commit": self.since_commit,
                      "source": self.since_source},
            "fingerprint": {"since": self.old.digest, "now": self.new.digest},
            "expected_wheels": dict(self.new.wheels),
        }


def _config_at(repo: Path, commit: str, current: Config, env: Mapping[str, str]) -> Config:
    """The config cascade as committed at `commit`; the current one if it cannot be read."""
    rel = current.root.relative_to(repo)
    text = git.show_file(repo, commit, (rel / "pyproject.toml").as_posix())
    if text is None:
        return current
    with tempfile.TemporaryDirectory(prefix="gpurl-since-") as tmp:
        write_atomic(Path(tmp, "pyproject.toml"), text)
        try:
            old = load_config(Path(tmp), profile=current.profile, env=env)
            old = old.for_variant(old.variant_named(current.variant.name))
        except ConfigError:
            return current
        root = Path(tmp).resolve()

    def moved(path: Path) -> Path:  # paths resolved under the temp dir belong under root
        return current.root / path.relative_to(root) if path.is_relative_to(root) else path

    return dataclasses.replace(
        old, root=current.root, workspace=moved(old.workspace), lock=moved(old.lock),
        build=dataclasses.replace(old.build, dockerfile=moved(old.build.dockerfile)))


def _wheel_source_paths(inputs: DockerfileInputs, config: Config, repo: Path) -> list[str]:
    """The context paths the wheel recipe copies, relative to the repository root."""
    recipe = inputs.wheel_recipe()
    rel = config.root.relative_to(repo)
    return sorted({(rel / path).as_posix() for stage in inputs.stages if stage.name in recipe
                   for path in stage.copies})


def _fingerprint(dockerfile: str | None, lock: str | None, config: Config,
                 closure_fn: ClosureFn, repo: Path,
                 blobs: Callable[[list[str]], dict[str, str]]) -> Fingerprint:
    inputs = parse_dockerfile_inputs(dockerfile or "")
    closure = list(closure_fn(lock, config.target, config.python)) if lock is not None else []
    pins = pins_from_args(inputs.effective_args, config.build, config.target)
    missing = [name for name, text in (("dockerfile", dockerfile), ("lock", lock)) if text is None]
    sources = blobs(_wheel_source_paths(inputs, config, repo))
    return fingerprint(inputs, closure, config.python.extras, pins, missing, sources)


def _read(path: Path, what: str, error: type[GpurlError], hint: str) -> str:
    return read_text(path, what=what, error=error, missing_hint=hint)


def rebuild_needed(config: Config, *, since: str | None = None,
                   env: Mapping[str, str] | None = None,
                   closure_fn: ClosureFn = closure_entries) -> RebuildReport:
    """Compare the baked inputs at `since` (default: see default_since) and the working tree."""
    env = os.environ if env is None else env
    repo = git.toplevel(config.root)
    ref, source = (since, "--since") if since else default_since(config, repo)
    commit = git.resolve_commit(repo, ref)
    new_fp = _fingerprint(
        _read(config.build.dockerfile, "Dockerfile", ConfigError, "run invoke generate first"),
        _read(config.lock, "lock", LockError, "run uv lock in the workspace"), config, closure_fn,
        repo, lambda paths: git.worktree_blobs(repo, paths))
    old_config = _config_at(repo, commit, config, env)
    old_docker = git.show_file(repo, commit,
                                   old_config.build.dockerfile.relative_to(repo).as_posix())
    old_lock = git.show_file(repo, commit, old_config.lock.relative_to(repo).as_posix())
    old_fp = _fingerprint(old_docker, old_lock, old_config, closure_fn, repo,
                          lambda paths: git.tree_blobs(repo, commit, paths))
    return RebuildReport(decision=decide(old_fp, new_fp), since_ref=ref, since_commit=commit,
                         since_source=source, old=old_fp, new=new_fp)
