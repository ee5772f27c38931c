"""Render a profile's Dockerfiles, slice files and other generated build files and write them
atomically, or check the committed ones are current: the one writer of generated build files.

The edge around the pure recipe: it reads the lock (for its hash), asks plan/fitting.py for
the plans fitted under the layer budget (given the planner, which keeps the committed slices'
assignment, and this Dockerfile's layer count), checks what the lock already tells
(the compiled wheels against what the lock's dependents require, the wheel-builder's torch,
the build asserts, the path sources), lints the model, and then either replaces each file via
temp file + rename or compares bytes. Every file of every variant (and every profile) is
rendered before the first one is written: a failure writes nothing. A file this generator
wrote for a variant or profile that no longer exists is removed (and `--check` flags it).
`--check` on a lock the committed Dockerfile was not generated from says "stale" first, even
when planning or rendering the new lock fails, and then what `invoke generate` needs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from gpurl_tasks.config import Config, load_committed_config, load_profile_names
from gpurl_tasks.configdoc import reference_files
from gpurl_tasks.dockerfile import envcheck
from gpurl_tasks.dockerfile.checks import (
    LocalCopy,
    PinMismatch,
    PinMismatchError,
    check_asserts,
    check_launcher_environment,
    check_torch,
    installed_distributions,
    torch_pin_mismatches,
)
from gpurl_tasks.dockerfile.context import (
    context_rules,
    read_dockerignore,
    stale_context_error,
    updated_dockerignore,
)
from gpurl_tasks.dockerfile.layers import builder_of, composes, count_layers
from gpurl_tasks.dockerfile.lint import lint
from gpurl_tasks.dockerfile.model import Dockerfile, DockerfileError, render
from gpurl_tasks.dockerfile.provenance import LABEL_LOCK_HASH, label_value
from gpurl_tasks.dockerfile.recipe import ENVCHECK_SOURCE, WORKDIR, render_recipe
from gpurl_tasks.dockerfile.wheels import (
    build_table,
    check_provided,
    check_variant_wheels,
    pins_from_args,
    prebuilt_wheel_names,
)
from gpurl_tasks.errors import CheckFailed, ConfigError, ExitCode, GpurlError, LockError
from gpurl_tasks.files import read_text, write_atomic
from gpurl_tasks.plan.buildenv import build_note
from gpurl_tasks.plan.fitting import Fitted, budget_costs, check_fits, fit
from gpurl_tasks.plan.layerlimit import LayerCount
from gpurl_tasks.plan.lockcheck import stale_findings
from gpurl_tasks.plan.model import Plan
from gpurl_tasks.plan.profile import plan_profile, plan_views, profile_inputs
from gpurl_tasks.plan.report import PlanViews
from gpurl_tasks.plan.slices import HEADER, POST_INSTALL_HEADER, SliceLine, render_slice
from gpurl_tasks.plan.variants import VariantInput
from gpurl_tasks.plan.wheelglobs import provided_names

__all__ = [
    "GenerateResult",
    "GenerateSummary",
    "Planner",
    "StaleFileError",
    "check_committed",
    "check_launcher",
    "fitted_plan",
    "fitted_plans",
    "fitted_views",
    "generate",
    "generate_profiles",
    "generated_files",
    "handwritten_plan",
    "layer_count",
    "lock_sha256",
    "render_dockerfile",
    "render_variant",
]

Planner = Callable[[Config], Plan]
# The first lines of a generated file name the profile (and variant) it was generated for.
_OWNER = re.compile(r"profile '(?P<profile>[^']+)'(?:,? \(?variant '(?P<variant>[^']+)')?")


class StaleFileError(CheckFailed):
    """A committed generated file differs from what the generator writes now."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class GenerateResult:
    """What one variant's (or profile's) generation did."""

    profile: str
    path: Path
    changed: bool  # the Dockerfile was (or, with check, would be) rewritten
    steps: int  # slice layers in the plan
    slices: tuple[Path, ...] = ()  # slice files written (or, with check, that would change)
    notes: tuple[str, ...] = ()  # provided packages: lock vs compiled version; torch
    variant: str = ""
    others: tuple[Path, ...] = ()  # other generated files written (or that would change)
    removed: tuple[Path, ...] = ()  # files of a removed variant or older plan (removed / stale)
    hand_written: bool = False  # the Dockerfile is the team's own (build.generate = false)

    def to_json(self) -> dict[str, object]:
        return {"profile": self.profile, "variant": self.variant, "path": str(self.path),
                "changed": self.changed,
                "steps": self.steps, "slices_changed": [str(p) for p in self.slices],
                "others_changed": [str(p) for p in self.others],
                "removed": [str(p) for p in self.removed],
                "provided": list(self.notes), "hand_written": self.hand_written}


def lock_sha256(lock: Path) -> str:
    """sha256 of the workspace lock's bytes (the provenance label's value)."""
    try:
        return hashlib.sha256(lock.read_bytes()).hexdigest()
    except FileNotFoundError:
        raise LockError(f"no uv.lock at {lock}", hint="run `uv lock` in the workspace") from None


def _local(config: Config, plan: Plan) -> tuple[LocalCopy, ...]:
    """One COPY per path source the lock records outside the workspace's own directory,
    resolved on this machine (symlinks followed): from where it really is in the build
    context to where the lock expects it in the image."""
    copies: list[LocalCopy] = []
    note = config.variant.note
    for name, path in sorted(plan.local_paths):
        real = (config.workspace / path).resolve()
        where = f"{name}'s source {path!r} (resolved to {real})"
        if not real.is_relative_to(config.root):
            raise DockerfileError(
                f"{where} is outside the build context {config.root}{note}: the image "
                "cannot contain it and the final sync would fail",
                hint="move the package inside the repository, or make it a registry/git "
                     "dependency")
        if not real.is_dir():
            raise DockerfileError(f"{where} {'is not a directory' if real.exists() else 'does not exist'}"
                                  f"{note}: the final sync would fail with `Distribution not found`",
                                  hint="check out the repository with its path dependencies")
        link = Path(posixpath.normpath(config.workspace / path))
        if link == real and real.is_relative_to(config.workspace):
            continue  # no symlink on the way: it arrives with the workspace's own COPY
        in_context = link.is_relative_to(config.root) and link.is_symlink()
        copies.append(LocalCopy(
            name=name, source=real.relative_to(config.root).as_posix(),
            dest=posixpath.normpath(posixpath.join(WORKDIR, path)),
            link=link.relative_to(config.root).as_posix() if in_context else ""))
    return tuple(copies)


def _model(config: Config, plan: Plan, local: tuple[LocalCopy, ...] | None = None) -> Dockerfile:
    return render_recipe(config, plan, lock_sha256=lock_sha256(config.lock),
                         local=_local(config, plan) if local is None else local)


def render_dockerfile(config: Config, plan: Plan, local: tuple[LocalCopy, ...] | None = None) -> str:
    """The Dockerfile text for `config` and `plan`; lint findings are errors."""
    dockerfile = _model(config, plan, local)
    findings = lint(dockerfile)
    if findings:
        raise DockerfileError(f"generated Dockerfile fails lint: {findings[0]}",
                              hint=f"{len(findings)} finding(s); fix the recipe or the config")
    return render(dockerfile)


def layer_count(config: Config, plan: Plan, local: tuple[LocalCopy, ...] | None = None,
                *, base_layers: int | None = None) -> LayerCount:
    """The layers the image of `config`'s variant will have with `plan`: the base image's own
    (`base_layers`, default build.base-image-layers), every layer-making instruction of the
    rl stage's lineage for the builder that runs, and one layer a slice where the environment
    is composed (else the env-chain stage's own)."""
    count = count_layers(_model(config, plan, local), builder=builder_of(config),
                         base_layers=config.build.base_image_layers if base_layers is None
                         else base_layers, composed=composes(config),
                         variant=config.variant.shown)
    return dataclasses.replace(count, budget=config.layers.max_image_layers)


def _counted_local(config: Config, plan: Plan) -> tuple[LocalCopy, ...]:
    """The path-source COPYs for a count: resolved as generate resolves them, or, where they
    cannot be here (`invoke plan --lock` of another checkout), one COPY each: the most they
    can cost (generate itself refuses such a source)."""
    try:
        return _local(config, plan)
    except DockerfileError:
        return tuple(LocalCopy(name=name, source="unresolved",
                               dest=posixpath.normpath(posixpath.join(WORKDIR, path)), link="")
                     for name, path in sorted(plan.local_paths))


def _count(config: Config, plan: Plan, base_layers: int | None) -> LayerCount:
    return layer_count(config, plan, _counted_local(config, plan), base_layers=base_layers)


def _fitted(config: Config, *, repack: bool, base_layers: int | None,
            inputs: Sequence[VariantInput] | None = None) -> Fitted:
    """plan/fitting.py's `fit` of `config`'s profile: its planner over the lock (closures and
    sizes read once) and this Dockerfile's layer count."""
    inputs = profile_inputs(config) if inputs is None else inputs
    return fit({v.name: config.for_variant(v) for v in config.variants},
               lambda budget: plan_profile(config, repack=repack, max_slices=budget,
                                           inputs=inputs),
               lambda variant, plan: _count(variant, plan, base_layers))


def fitted_plans(config: Config, *, repack: bool = False,
                 base_layers: int | None = None) -> dict[str, Plan]:
    """Every variant's plan, fitted under the layer budget (layers.max-image-layers): planned
    once to learn what the images' other layers leave for slices, then planned with that
    slice budget (the fullest image's; `Layout.max_slices`), so the committed slices are kept
    while they fit and new packages go where the fitted layout puts them; TooManyLayers when
    even that does not fit."""
    return _fitted(config, repack=repack, base_layers=base_layers).plans


def fitted_plan(config: Config, *, repack: bool = False) -> Plan:
    """The plan of `config`'s variant, fitted with the profile's others (`fitted_plans`)."""
    return fitted_plans(config, repack=repack)[config.variant.name]


def fitted_views(config: Config, *, repack: bool, only: str | None = None,
                 selection_given: bool = False, lock_given: bool = False,
                 base_layers: int | None = None) -> PlanViews:
    """`invoke plan`: the fitted plans (`plan_views`) with each image's layer count and what
    its budget cost. Another lock than the profile's own (`lock_given`) is planned afresh:
    the committed slices are not its."""
    fresh = repack or lock_given
    inputs = profile_inputs(config)
    fitted = _fitted(config, repack=fresh, base_layers=base_layers, inputs=inputs)
    afresh = fitted if fresh else _fitted(config, repack=True, base_layers=base_layers,
                                          inputs=inputs)
    costs = budget_costs(fitted, afresh)
    views = plan_views(fitted.plans, config, only=only, selection_given=selection_given)
    return dataclasses.replace(views, counts=tuple(fitted.counts[name] for name, _ in views.plans),
                               costs=tuple(costs[name] for name, _ in views.plans))


def slice_files(config: Config, plan: Plan) -> dict[Path, str]:
    """Every slice file the plan calls for, with its text; one staged on the slices below
    (the lock's build settings) records it and what it is built on (plan/buildenv.py)."""
    texts: list[str] = []
    files: dict[Path, str] = {}
    for layer in plan.layers:
        text = render_slice((SliceLine(requirement=p.requirement, index=p.index, hashed=p.hashed)
                             for p in layer.packages),
                            header=POST_INSTALL_HEADER if layer is plan.pinned_post_install
                            else HEADER)
        build = plan.build_of(layer)
        if build is not None:
            text = text.replace(HEADER, HEADER + build_note(build, texts), 1)
        texts.append(text)
        files[layer.slice.path(config.variant)] = text
    return files


_COMPILED_KEYS = {"vllm": "vllm-version", "flash-attn": "flash-attn-version"}


def pin_mismatches(config: Config, plan: Plan) -> tuple[list[PinMismatch], tuple[str, ...]]:
    """(every build pin of the variant the lock contradicts, with the value to set; the notes
    on what matched): the wheel-builder's torch and CUDA label, and each compiled wheel's
    version against what the lock's dependents require of it."""
    where = build_table(config)
    found = torch_pin_mismatches(config.build, plan, where)
    if not plan.provided:
        return found, ()
    pins = pins_from_args({}, config.build, config.target)  # the ARG defaults are the config's
    lines, problems = check_provided(plan.provided, pins, config.build.wheel_globs)
    locked = {p.name: p.version for p in plan.provided}
    for name, key in _COMPILED_KEYS.items():
        mine = [p for p in problems if p.startswith(f"{name} ")]
        if mine:
            now = getattr(config.build, key.replace("-", "_"))
            found.append(PinMismatch(where=where, key=key, now=now, wanted=locked[name],
                                     why="; ".join(mine) + " (the lock's version)"))
    return found, tuple(lines)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Rendered:
    """One variant's generated files, checked and rendered, not yet written."""

    config: Config
    plan: Plan
    dockerfile: str
    slices: Mapping[Path, str]
    others: Mapping[Path, str]
    notes: tuple[str, ...]
    links: tuple[str, ...]  # symlinks to path sources, to keep out of the build context


_ENVCHECK_HEADER = ("#!/usr/bin/env python3\n# Generated by gpurl from gpurl_tasks/dockerfile/envcheck.py "
                    "for the image's package-set proof\n# and its `uv pip check` gate; do not edit "
                    "(`invoke generate`).\n")


def envcheck_text() -> str:
    """What `invoke generate` writes at ENVCHECK_SOURCE: the checker's own source."""
    return _ENVCHECK_HEADER + Path(envcheck.__file__).read_text(encoding="utf-8")


def check_launcher(config: Config, text: str | None = None) -> None:
    """The launcher's environment python (launcher.python-variable), where it assigns one, is
    in the image's environment (build.venv); a launcher not there yet is not checked. `text`:
    the launcher's text, already read."""
    path = config.launcher.path
    if text is None:
        if not path.is_file():
            return
        text = read_text(path, what="launcher file", error=DockerfileError)
    where = path.relative_to(config.root) if path.is_relative_to(config.root) else path
    check_launcher_environment(text, config.launcher.python_variable, config.build.venv,
                               where=str(where))


def check_lock_current(config: Config) -> None:
    """The lock is not stale against its workspace's pyproject.toml (`uv lock --check`'s
    answer, offline; plan/lockcheck.py): a stale lock plans an image of what nobody asks for."""
    pyproject = config.workspace / "pyproject.toml"
    if not pyproject.is_file() or not config.lock.is_file():
        return
    where = pyproject.relative_to(config.root) if pyproject.is_relative_to(config.root) else pyproject
    stale = stale_findings(config.workspace, config.lock, where=str(where))
    if stale:
        lock = config.lock.relative_to(config.root) if config.lock.is_relative_to(config.root) \
            else config.lock
        raise LockError(f"{lock} is stale against {where} ({len(stale)} difference(s)): "
                        + "; ".join(stale),
                        hint=f"run `uv lock` in {config.workspace.relative_to(config.root)} "
                             "(`uv lock --check` says the same), then `invoke generate`")


def handwritten_plan(config: Config) -> Plan:
    """The plan of a hand-written Dockerfile's profile (build.generate = false): no slice, no
    sync (the file installs what it says); what its other generated files are rendered with."""
    return Plan(cap_bytes=config.layers.cap, basis=config.layers.basis, sync_flags=(),
                layers=(), local=(), lower_bound_layers=0, platform=config.target.platform)


def generated_files(config: Config) -> dict[Path, str]:
    """Every committed generated file of a variant besides its Dockerfile and slice files: the
    one list `generate`, `doctor` and the build (local or cluster) render and check. The image's
    package-set checker, which a generated Dockerfile COPYs, and (in gpurl's own repository)
    the config reference. What the cluster job runs is rendered at submit time and never
    committed (cluster/kaniko.py's `job_files`), but the compiled wheels it fetches by name
    must be nameable now: a name that cannot be derived is refused here, as the build would."""
    if config.backend == "iris":  # the job fetches these by name: each one is derivable
        prebuilt_wheel_names(config)
    files = {config.root / ENVCHECK_SOURCE: envcheck_text()} if config.build.generate else {}
    return {**files, **reference_files(config)}


def _render_handwritten(config: Config) -> Rendered:
    """A hand-written Dockerfile's variant: the file is read, never written (its text is what
    it is), and only the other generated files rendered."""
    path = config.build.dockerfile
    if not path.is_file():
        raise ConfigError(f"{path.relative_to(config.root)} does not exist: profile "
                          f"{config.profile!r}{config.variant.note} builds it as written "
                          "(build.generate = false)",
                          hint="commit the hand-written Dockerfile, or correct build.dockerfile")
    plan = handwritten_plan(config)
    return Rendered(config=config, plan=plan,
                    dockerfile=read_text(path, what="hand-written Dockerfile", error=ConfigError),
                    slices={}, others=generated_files(config),
                    notes=(), links=())


def render_variant(config: Config, plan: Plan) -> Rendered:
    """Check a variant against its lock and render every file it generates; writes nothing.
    A hand-written Dockerfile's variant renders its other files alone (`plan` unused)."""
    if not config.build.generate:
        return _render_handwritten(config)
    check_launcher(config)
    check_lock_current(config)
    mismatches, compiled = pin_mismatches(config, plan)
    if mismatches:
        raise PinMismatchError(mismatches)
    notes = list(compiled)
    torch = check_torch(config.build, plan)
    if torch:
        notes.append(torch)
    installed = installed_distributions(plan, provided_names(config.build.wheel_globs))
    check_asserts(config.build, installed, note=config.variant.note)
    notes += plan.outside_lock_notes
    local = _local(config, plan)
    check_fits(layer_count(config, plan, local), profile=config.profile)
    return Rendered(config=config, plan=plan, dockerfile=render_dockerfile(config, plan, local),
                    slices=slice_files(config, plan),
                    others=generated_files(config),
                    notes=tuple(notes), links=tuple(c.link for c in local if c.link))


def _owner(path: Path) -> tuple[str, str] | None:
    """(profile, variant) a generated file names in its first lines, or None."""
    try:
        with path.open(encoding="utf-8") as handle:
            head = "".join(handle.readline() for _ in range(3))
    except (OSError, UnicodeDecodeError):
        return None
    if "Generated by gpurl" not in head and "Generated by `invoke" not in head:
        return None
    match = _OWNER.search(head)
    return (match["profile"], match["variant"] or "") if match else None


Leftover = tuple[Path, tuple[str, str]]  # a file to remove, and the (profile, variant) it was for


def _leftovers(profile: str, rendered: Iterable[Rendered], *, whole_profile: bool) -> list[Leftover]:
    """Generated files of `profile` that no current variant calls for: slices of an older plan
    (and, when every variant was rendered, the Dockerfiles, scripts and slice directories of a
    removed variant)."""
    rendered = list(rendered)
    current = {p for r in rendered for p in (r.config.build.dockerfile, *r.slices, *r.others)}
    configs = [r.config for r in rendered]
    base = configs[0].build.slices / profile
    dirs = {base, configs[0].variant.shared_slices, *(c.variant.slices for c in configs)}
    if whole_profile and base.is_dir():
        dirs |= {d for d in base.iterdir() if d.is_dir()}
    found = {p for d in dirs if d.is_dir() for p in d.glob("*.txt")}
    if whole_profile:
        folders = {p.parent for p in current if p.suffix != ".txt"}
        found |= {p for folder in folders if folder.is_dir() for p in folder.iterdir()
                  if p.is_file() and p.suffix != ".txt" and (_owner(p) or ("", ""))[0] == profile}
    return [(p, _owner(p) or (profile, "")) for p in sorted(found - current)]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class _Change:
    path: Path
    text: str | None  # None: remove
    owner: tuple[str, str]  # (profile, variant) the file is generated for
    mode: int = 0o644


def _stale_error(root: Path, changes: list[_Change]) -> StaleFileError:
    """What --check found: files to write (missing or stale, with the variant they are for)
    and files to remove (left over from a removed variant or an older plan)."""

    def listed(paths: list[Path]) -> str:
        shown = ", ".join(str(p.relative_to(root) if p.is_relative_to(root) else p)
                          for p in paths[:4])
        return shown + (f" (+{len(paths) - 4} more)" if len(paths) > 4 else "")

    written = [c for c in changes if c.text is not None]
    removed = [c.path for c in changes if c.text is None]
    parts = []
    if written:
        missing = all(not c.path.exists() for c in written)
        parts.append(f"{listed([c.path for c in written])} "
                     f"{'missing' if missing else 'missing or stale'} for "
                     + _owners(sorted(c.owner for c in written)))
    if removed:
        parts.append(f"{listed(removed)} left over (no current variant or plan calls for it)")
    return StaleFileError("; ".join(parts), hint=f"run `{_command(c.owner for c in changes)}` "
                                                 "and commit the result")


def _owners(owners: Iterable[tuple[str, str]]) -> str:
    """"profile 'P' variant 'V', ..." for the (profile, variant) pairs, each once, in order."""
    return ", ".join(f"profile {p!r}" + (f" variant {v!r}" if v else "")
                     for p, v in dict.fromkeys(owners))


def _command(owners: Iterable[tuple[str, str]]) -> str:
    """The `invoke generate` that rewrites the files of these owners."""
    profiles = {p for p, _ in owners}
    return "invoke generate" + (f" --profile {profiles.pop()}" if len(profiles) == 1 else "")


def _lock_moved(config: Config) -> bool:
    """The committed Dockerfile was generated from another lock than the workspace's (its
    lock-hash label differs): stale whatever the plan. False when either file is missing
    (generate itself reports that)."""
    path = config.build.dockerfile
    if not path.is_file() or not config.lock.is_file():
        return False
    found = label_value(read_text(path, what="Dockerfile", error=StaleFileError), LABEL_LOCK_HASH)
    return found is not None and found != lock_sha256(config.lock)


def _rendered(configs: Sequence[Config], render: Callable[[], list[Rendered]], *,
              check: bool) -> list[Rendered]:
    """`render()`; with `check`, when it fails on a lock the committed Dockerfiles were not
    generated from, the error says that first (stale: run `invoke generate`) and then what
    `invoke generate` will need (its own failure, e.g. the sizes still unknown)."""
    moved = [c for c in configs if _lock_moved(c)] if check else []
    try:
        return render()
    except StaleFileError:
        raise
    except GpurlError as exc:
        if not moved:
            raise
        root = moved[0].root
        shown = ", ".join(str(c.build.dockerfile.relative_to(root)) for c in moved)
        locks = ", ".join(sorted({str(c.lock.relative_to(root)) for c in moved}))
        owners = [(c.profile, c.variant.shown) for c in moved]
        command = _command(owners)
        raise StaleFileError(
            f"{shown} stale for {_owners(owners)}: {locks} changed since `invoke generate` last "
            f"ran; run `{command}` and commit the result\n  `{command}` needs first: "
            f"{exc.message}", hint=exc.hint) from None


def _apply(root: Path, rendered: list[Rendered], leftover: list[Leftover], *, check: bool
           ) -> list[GenerateResult]:
    """Compare every rendered file with the tree; with `check` raise on the first difference,
    else write them all (temp file + rename each) and remove the leftovers."""

    def stale(path: Path, text: str) -> bool:
        return not path.exists() or path.read_bytes() != text.encode()

    claimed: dict[Path, str] = {}

    def first(path: Path, text: str) -> bool:
        """A file several variants render alike (a shared slice, the envcheck copy) is
        written and reported once, by the first."""
        if path not in claimed:
            claimed[path] = text
            return True
        return claimed[path] != text

    results: list[GenerateResult] = []
    changes: list[_Change] = []
    for r in rendered:
        path = r.config.build.dockerfile
        slices = tuple(p for p, body in r.slices.items() if stale(p, body) and first(p, body))
        others = tuple(p for p, body in r.others.items() if stale(p, body) and first(p, body))
        changed = stale(path, r.dockerfile)
        owner = (r.config.profile, r.config.variant.shown)
        changes += [_Change(path=p, text=r.slices[p], owner=owner) for p in slices]
        changes += [_Change(path=p, text=r.others[p], owner=owner,
                            mode=0o755 if p.suffix == ".sh" else 0o644) for p in others]
        if changed:
            changes.append(_Change(path=path, text=r.dockerfile, owner=owner))
        results.append(GenerateResult(profile=r.config.profile, variant=r.config.variant.shown, path=path,
                                      changed=changed, steps=len(r.plan.layers), slices=slices,
                                      notes=r.notes, others=others,
                                      hand_written=not r.config.build.generate))
    changes += [_Change(path=p, text=None, owner=owner) for p, owner in leftover]
    if results and leftover:
        results[-1] = dataclasses.replace(results[-1], removed=tuple(p for p, _ in leftover))
    ignore_text = read_dockerignore(root)
    rules = tuple(dict.fromkeys(rule for r in rendered
                                for rule in context_rules(r.config, r.links)))
    new_ignore = updated_dockerignore(ignore_text, rules)
    if check:
        if changes:
            raise _stale_error(root, changes)
        if new_ignore is not None:
            raise stale_context_error(root, ignore_text, rules)
        return results
    for change in changes:
        if change.text is None:
            change.path.unlink(missing_ok=True)
        else:
            write_atomic(change.path, change.text, mode=change.mode)
    for folder in {c.path.parent for c in changes if c.text is None}:
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    if new_ignore is not None:
        write_atomic(root / ".dockerignore", new_ignore)
    return results


def generate(config: Config, *, check: bool = False, planner: Planner | None = None
             ) -> GenerateResult:
    """Write one variant's Dockerfile, slice files and `generated_files`, or with `check` raise
    StaleFileError when one is stale (a slice left over from an older plan counts as stale)."""
    plan_of = (planner or fitted_plan) if config.build.generate else handwritten_plan
    rendered = _rendered([config], lambda: [render_variant(config, plan_of(config))],
                         check=check)[0]
    leftover = _leftovers(config.profile, [rendered], whole_profile=False)
    return _apply(config.root, [rendered], leftover, check=check)[0]


def check_committed(config: Config) -> GenerateResult:
    """`generate --check` for `config`'s variant as committed: rendered from pyproject alone,
    never from GPURL_* variables or flags. A build refuses stale files with its message."""
    committed = load_committed_config(config.root, config.profile)
    committed = committed.for_variant(committed.variant_named(config.variant.name))
    return generate(committed, check=True)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class GenerateSummary:
    """`invoke generate`'s outcome over one or every profile."""

    root: Path
    check: bool
    results: tuple[GenerateResult, ...]
    exit_code: int = ExitCode.OK

    def human(self) -> str:
        def verb(changed: bool) -> str:
            return "up to date" if not changed else ("would change" if self.check else "written")

        def rel(path: Path) -> Path:
            return path.relative_to(self.root) if path.is_relative_to(self.root) else path

        lines = []
        for r in self.results:
            if r.hand_written:
                lines.append(f"{rel(r.path)}: hand-written (build.generate = false), not generated")
            else:
                lines.append(f"{rel(r.path)}: {verb(r.changed)} ({r.steps} slice "
                             f"layers; {len(r.slices)} slice file(s) {verb(True)})"
                             if r.slices else
                             f"{rel(r.path)}: {verb(r.changed)} ({r.steps} slice "
                             "layers, slices up to date)")
            lines += [f"{rel(p)}: {verb(True)}" for p in r.others]
            lines += [f"  {note}" for note in r.notes]
            lines += [f"{rel(p)}: removed (no current variant or plan calls for it)"
                      for p in r.removed]
        return "\n".join(lines)

    def to_json(self) -> dict[str, object]:
        return {"check": self.check, "files": [r.to_json() for r in self.results]}


def generate_profiles(root: Path, profile: str | None, *, check: bool,
                      repack: bool = False) -> GenerateSummary:
    """Generate (or check) `profile`'s files, or every profile's, from the committed config.
    `repack` packs the layers afresh instead of keeping the committed slices. Everything is
    rendered and checked first; nothing is written when anything fails."""
    names = (profile,) if profile else load_profile_names(root)
    rendered: list[Rendered] = []
    leftover: list[Leftover] = []
    mismatched: list[PinMismatch] = []
    for name in names:
        config = load_committed_config(root, name)
        configs = [config.for_variant(v) for v in config.variants]

        def render(config: Config = config, configs: list[Config] = configs) -> list[Rendered]:
            if not config.build.generate:  # hand-written: nothing to plan
                return [_render_handwritten(c) for c in configs]
            check_variant_wheels(configs)
            plans = fitted_plans(config, repack=repack)  # every variant at once: shared slices
            done: list[Rendered] = []
            pins: list[PinMismatch] = []
            for c in configs:  # every variant's pin mismatches, not only the first one's
                try:
                    done.append(render_variant(c, plans[c.variant.name]))
                except PinMismatchError as exc:
                    pins += exc.mismatches
            if pins:
                raise PinMismatchError(pins)
            return done

        try:
            ours = _rendered(configs, render, check=check)
        except PinMismatchError as exc:  # every profile's, in one run
            mismatched += exc.mismatches
            continue
        leftover += _leftovers(name, ours, whole_profile=True)
        rendered += ours
    if mismatched:
        raise PinMismatchError(mismatched)
    return GenerateSummary(root=root, check=check,
                           results=tuple(_apply(root, rendered, leftover, check=check)))
