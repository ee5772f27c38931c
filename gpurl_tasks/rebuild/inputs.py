"""Read the baked inputs at a commit and in the working tree, then ask fingerprint.py to compare.

The edge of `rebuild-needed`: git, the config cascade at each point (the same way on both
sides: pyproject.toml as committed there, the same environment), the lock's install closure
(through plan/lock.py), the committed generated Dockerfile, and the default `--since` taken
from the launcher's provenance comment (or its image table's entry). It also says when a
committed Dockerfile is stale against its own commit's config or lock (its labels record both),
so a pin edited but not yet generated is named, while the decision still comes from the config.
A hand-written Dockerfile's profile (build.generate = false) has no lock: its inputs are what
its build reads (dockerfile/handwritten.py), the copied context files by their git blob ids.
Everything it returns is plain data for the task to print.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from gpurl_tasks import git, values
from gpurl_tasks.config import (
    Config,
    PythonSelection,
    TargetSpec,
    baked_values,
    config_fingerprint,
    load_config,
    sets_config,
)
from gpurl_tasks.dockerfile.handwritten import base_image, copied_files, image_inputs
from gpurl_tasks.dockerfile.inputs import DockerfileInputs, parse_dockerfile_inputs
from gpurl_tasks.dockerfile.provenance import LABEL_CONFIG_HASH, LABEL_LOCK_HASH, label_value
from gpurl_tasks.dockerfile.wheels import pins_from_args
from gpurl_tasks.errors import ConfigError, GpurlError, LockError
from gpurl_tasks.files import read_text, sha256_of
from gpurl_tasks.launcher.table import TableShape, entry_commit
from gpurl_tasks.rebuild.fingerprint import ClosureEntry, Decision, Fingerprint, decide, fingerprint
from gpurl_tasks.rebuild.inputs_key import inputs_key
from gpurl_tasks.values import PIN_MARKER

__all__ = [
    "BuildInputs",
    "ClosureFn",
    "RebuildReport",
    "build_inputs",
    "closure_entries",
    "default_since",
    "pinned_commit",
    "provenance_commit",
    "rebuild_needed",
]

ClosureFn = Callable[[str, TargetSpec, PythonSelection], Iterable[ClosureEntry]]
_PROVENANCE = re.compile(r"gpurl-git-sha:\s*(\S+)")


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
    """The commit the pinned image was built from, from the comment block right above
    `variable`'s assignment (and that line itself): pins sit close together (an index and
    each platform's), so no other variable's comment may be read for it.

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
            start = i
            while start > 0 and lines[start - 1].lstrip().startswith("#"):
                start -= 1
            near = lines[start: i + 1]
            for pattern in (_PROVENANCE, tag):
                for text in near:
                    match = pattern.search(text.strip())
                    sha = match and values.source_commit(
                        match.group(1).lower() if pattern is _PROVENANCE else match.group(1))
                    if sha:
                        return sha
    return None


def pinned_commit(config: Config, launcher_text: str) -> tuple[str | None, str]:
    """(the commit the variant's pinned image was built from, what recorded it): its entry's
    commit field in an image table (launcher.table, resolved through a module-level variable
    it names), else the provenance comment of its variable."""
    if config.launcher.table:
        recorded = entry_commit(launcher_text, TableShape.of(config.launcher),
                                config.variant.table_key)
        return (values.source_commit(recorded) if recorded else None,
                f"{config.launcher.table}[{config.variant.table_key}]")
    # the variant's own pin first: a variable shared by several platforms pins their index,
    # whose comment names the first variant's tag (release/index.py)
    variables = [v for v in (config.launcher.platform_variable, config.launcher.variable) if v]
    return next((found for v in variables if (found := provenance_commit(
        launcher_text, v, config.registry.tag_prefix)) is not None), None), "provenance comment"


def default_since(config: Config, repo: Path) -> tuple[str, str]:
    """(ref, where it came from): the pinned image's recorded commit if known, else HEAD~1."""
    try:
        text = read_text(config.launcher.path, what="launcher file")
    except GpurlError:
        text = ""  # no readable launcher: no pinned provenance to start from
    sha, where = pinned_commit(config, text)
    if sha is not None:
        try:
            git.resolve_commit(repo, sha)
            return sha, f"{where} in {config.launcher.path.name}"
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
    # committed generated files that are stale against their own commit's config or lock, and
    # a config that could not be read at --since: said, while the decision stands
    notes: tuple[str, ...] = ()
    platform: str = ""  # the variant's target.platform: what the image it decides on runs on
    # said in the human line only where the profile's variants are of several platforms
    several_platforms: bool = False

    @property
    def exit_code(self) -> int:
        return self.decision.exit_code

    @property
    def verdict(self) -> str:
        """The decision in a word: exit codes 10 and 11 are answers, not failures."""
        return self.decision.decision

    def human(self) -> str:
        lines = [f"rebuild: {self.decision.decision}  (since {self.since_ref} = "
                 f"{self.since_commit[:12]}, from {self.since_source})"
                 + (f"; the {self.platform} image" if self.several_platforms else "")]
        lines += [f"  - {r.kind}: {r.detail}" for r in self.decision.reasons]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.decision.to_json(),
            "since": {"ref": self.since_ref, "commit": self.since_commit,
                      "source": self.since_source},
            "platform": self.platform,
            "fingerprint": {"since": self.old.digest, "now": self.new.digest},
            "expected_wheels": dict(self.new.wheels),
            "stale": list(self.notes),
        }


def _config_at(repo: Path, commit: str, current: Config, env: Mapping[str, str]
               ) -> tuple[Config | None, str | None]:
    """The config cascade with pyproject.toml as committed at `commit` (the environment as
    given), for the current config's profile and variant; (None, why) when it cannot be read
    there (no such file, profile or variant, or an invalid value at that commit)."""
    rel = current.root.relative_to(repo)
    text = git.show_file(repo, commit, (rel / "pyproject.toml").as_posix())
    if text is None:
        return None, "no pyproject.toml"
    try:
        old = load_config(current.root, profile=current.profile, env=env, pyproject_text=text)
        return old.for_variant(old.variant_named(current.variant.name)), None
    except ConfigError as exc:
        return None, exc.message


def _stale_notes(where: str, dockerfile: str | None, lock: str | None,
                 committed: Config | None) -> list[str]:
    """What is stale at one point: the generated Dockerfile missing, or generated from another
    config or lock than the commit's own (its labels), as `invoke generate` would say."""
    if committed is None:
        return []
    path = committed.build.dockerfile.relative_to(committed.root).as_posix()
    if dockerfile is None:
        return [f"{path} is missing {where}: run `invoke generate` (the decision above comes "
                "from the config and the lock)"]
    stale = []
    recorded = label_value(dockerfile, LABEL_CONFIG_HASH)
    if recorded is not None and recorded != config_fingerprint(committed):
        stale.append("config")
    recorded = label_value(dockerfile, LABEL_LOCK_HASH)
    if (recorded is not None and lock is not None
            and recorded != hashlib.sha256(lock.encode()).hexdigest()):
        stale.append("lock")
    if not stale:
        return []
    return [f"{path} {where} is stale: generated from another {' and '.join(stale)} than the "
            "commit's; run `invoke generate` and commit (the decision above comes from the "
            "config and the lock)"]


def _wheel_source_paths(inputs: DockerfileInputs, config: Config, repo: Path) -> list[str]:
    """The context paths the wheel recipe copies, relative to the repository root."""
    recipe = inputs.wheel_recipe()
    rel = config.root.relative_to(repo)
    return sorted({(rel / path).as_posix() for stage in inputs.stages if stage.name in recipe
                   for path in stage.copies})


def _fingerprint(dockerfile: str | None, lock: str | None, config: Config,
                 closure_fn: ClosureFn, repo: Path,
                 blobs: Callable[[list[str]], dict[str, str]], *,
                 config_known: bool = True) -> Fingerprint:
    inputs = parse_dockerfile_inputs(dockerfile or "")
    closure = list(closure_fn(lock, config.target, config.python)) if lock is not None else []
    pins = pins_from_args(inputs.effective_args, config.build, config.target)
    missing = [name for name, text in (("dockerfile", dockerfile), ("lock", lock)) if text is None]
    sources = blobs(_wheel_source_paths(inputs, config, repo))
    return fingerprint(inputs, closure, config.python.extras, pins, missing, sources,
                       baked_values(config) if config_known else None,
                       compiled=config.build.compiled_wheels or bool(inputs.wheel_recipe()))


def _handwritten_fingerprint(dockerfile: str | None, config: Config, repo: Path,
                             files: Callable[[list[str]], dict[str, str]],
                             show: Callable[[str], str | None], *,
                             config_known: bool = True) -> Fingerprint:
    """What a hand-written Dockerfile's build reads at one point: its image stages with the
    configured build args, the context files they copy (`files` gives the context's blob ids,
    `show` a file's text there), and the config; no lock (the file installs what it says)."""
    inputs = image_inputs(dockerfile or "", values.build_arg_map(config.build.build_args))
    context = config.build.context.relative_to(repo).as_posix()
    ignore = show(f"{context}/.dockerignore" if context != "." else ".dockerignore") or ""
    copied = copied_files(inputs, files([context]), context, ignore)
    pins = pins_from_args({}, config.build, config.target)
    return fingerprint(inputs, [], (), pins, ["dockerfile"] if dockerfile is None else [],
                       config=baked_values(config) if config_known else None,
                       compiled=False, context=copied)


def _handwritten_rebuild(config: Config, env: Mapping[str, str], repo: Path, ref: str,
                         source: str, commit: str) -> RebuildReport:
    """rebuild-needed for a hand-written Dockerfile (build.generate = false): the file, what
    its COPY/ADD take and its ARG values, at `commit` and in the working tree."""
    if not config.build.dockerfile.is_file():
        raise ConfigError(f"{config.build.dockerfile.relative_to(config.root)} does not exist: "
                          f"profile {config.profile!r} builds it as written (build.generate = "
                          "false)", hint="commit the Dockerfile, or correct build.dockerfile")
    old_config, unread = _config_at(repo, commit, config, env)
    new_fp = _handwritten_fingerprint(
        read_text(config.build.dockerfile, what="Dockerfile", error=ConfigError), config, repo,
        lambda paths: git.worktree_blobs(repo, paths),
        lambda path: (repo / path).read_text(encoding="utf-8") if (repo / path).is_file()
        else None, config_known=old_config is not None)
    old_config = old_config or config
    old_fp = _handwritten_fingerprint(
        git.show_file(repo, commit, old_config.build.dockerfile.relative_to(repo).as_posix()),
        old_config, repo, lambda paths: git.tree_blobs(repo, commit, paths),
        lambda path: git.show_file(repo, commit, path), config_known=unread is None)
    notes = (f"the config at {ref} could not be read ({unread}): the files decide",
             ) if unread else ()
    return RebuildReport(decision=decide(old_fp, new_fp), since_ref=ref, since_commit=commit,
                         since_source=source, old=old_fp, new=new_fp, notes=notes,
                         platform=config.target.platform, several_platforms=len(
                             {v.target.platform for v in config.variants}) > 1)


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
    if not config.build.generate:
        return _handwritten_rebuild(config, env, repo, ref, source, commit)
    new_lock = _read(config.lock, "lock", LockError, "run uv lock in the workspace")
    new_docker = (read_text(config.build.dockerfile, what="Dockerfile", error=ConfigError)
                  if config.build.dockerfile.is_file() else None)
    old_config, unread = _config_at(repo, commit, config, env)
    new_fp = _fingerprint(new_docker, new_lock, config, closure_fn, repo,
                          lambda paths: git.worktree_blobs(repo, paths),
                          config_known=old_config is not None)
    old_config = old_config or config
    old_docker = git.show_file(repo, commit,
                               old_config.build.dockerfile.relative_to(repo).as_posix())
    old_lock = git.show_file(repo, commit, old_config.lock.relative_to(repo).as_posix())
    old_fp = _fingerprint(old_docker, old_lock, old_config, closure_fn, repo,
                          lambda paths: git.tree_blobs(repo, commit, paths),
                          config_known=unread is None)
    notes = [f"the config at {ref} could not be read ({unread}): the generated files decide"
             ] if unread else []
    # what `invoke generate` rendered from: the committed files alone (no GPURL_* variables),
    # the configs above themselves when the environment sets none (git and TOML read once)
    plain = not sets_config(env)
    committed_old = old_config if plain and unread is None else _config_at(repo, commit,
                                                                         config, {})[0]
    notes += _stale_notes(f"at {ref}", old_docker, old_lock, committed_old)
    notes += _stale_notes("in the working tree", new_docker, new_lock,
                          config if plain else _committed(config))
    return RebuildReport(decision=decide(old_fp, new_fp), since_ref=ref, since_commit=commit,
                         since_source=source, old=old_fp, new=new_fp, notes=tuple(notes),
                         platform=config.target.platform, several_platforms=len(
                             {v.target.platform for v in config.variants}) > 1)


def _committed(config: Config) -> Config | None:
    """The working tree's config as committed files give it (no GPURL_* variables): what
    `invoke generate` renders from."""
    try:
        committed = load_config(config.root, profile=config.profile, env={})
        return committed.for_variant(committed.variant_named(config.variant.name))
    except ConfigError:
        return None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BuildInputs:
    """The working tree's inputs key (rebuild/inputs_key.py) and the base it names."""

    key: str
    base: str  # the base image by digest, or as configured when its digest is unknown
    base_note: str = ""  # why the base is named by its tag: a moved tag goes unnoticed


def build_inputs(config: Config, *, wheel_source: str,
                 base_digest: Callable[[str], str | None]) -> BuildInputs:
    """What a build of the working tree would read, as a key: the rebuild fingerprint as
    `rebuild-needed` computes it for the working tree, the context files the image's stages
    copy (tracked and untracked, not ignored: an uncommitted edit is an input), the prebuilt
    wheelhouse's files by sha256 (for `prebuilt-wheelhouse`), the base image and
    `wheel_source`. `base_digest(reference)` resolves the base (the engine's image id on
    the local path, the registry's digest on the cluster path); None leaves the reference as
    written in the key, so a base tag moved since the last push is not noticed (`--force`)."""
    repo = git.toplevel(config.root)
    text = read_text(config.build.dockerfile, what="Dockerfile", error=ConfigError)

    def blobs(paths: list[str]) -> dict[str, str]:
        return git.worktree_blobs(repo, paths)

    context = config.build.context.relative_to(repo).as_posix()
    ignore_file = config.build.context / ".dockerignore"
    ignore = ignore_file.read_text(encoding="utf-8") if ignore_file.is_file() else ""
    if config.build.generate:
        lock = _read(config.lock, "lock", LockError, "run uv lock in the workspace")
        fp = _fingerprint(text, lock, config, closure_entries, repo, blobs)
        parsed = parse_dockerfile_inputs(text, {"WHEEL_SOURCE": wheel_source} if wheel_source else {})
        reached = parsed.image_stages()
        parsed = dataclasses.replace(parsed, stages=tuple(
            s for s in parsed.stages if s.name in reached))
    else:
        parsed = image_inputs(text, values.build_arg_map(config.build.build_args))
        fp = _handwritten_fingerprint(text, config, repo, blobs, lambda path: (
            (repo / path).read_text(encoding="utf-8") if (repo / path).is_file() else None))
    copied = copied_files(parsed, blobs([context]), context, ignore)
    if wheel_source == "prebuilt-wheelhouse" and config.build.wheelhouse.is_dir():
        # the prebuilt wheels are no tracked files: their bytes, by sha256
        copied |= {path.relative_to(repo).as_posix(): sha256_of(path)
                   for path in sorted(config.build.wheelhouse.iterdir()) if path.is_file()}
    base = base_image(parsed)
    digest = base_digest(base) if base else None
    pinned = f"{base.partition('@')[0]}@{digest}" if digest else base
    note = "" if digest or not base else (
        f"the base {base} is keyed by its tag (its digest is unknown here)")
    return BuildInputs(key=inputs_key(fp, copied, pinned, wheel_source), base=pinned,
                       base_note=note)
