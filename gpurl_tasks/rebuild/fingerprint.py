"""Does a change need a new image? A fingerprint of the baked inputs, compared at two points.

Baked inputs are what the image carries and a live `/app` sync cannot replace (runbook
section 9): the Dockerfile's ARG defaults, base images, apt sets, `uv sync` chain and other
instructions of the stages that reach the image; the lock's install closure for the target
and the selected extras (name, version, chosen artifact); and the selected extras themselves.
Source-only changes leave all of these equal. Everything here is pure: callers pass text
and already-computed closures (see rebuild_inputs.py for reading them from git).

First the config: every key declares what a change of it bakes (config.py's `bakes`), and a
key whose value differs between the two points forces that class (`none` keys are named, not
counted), so a pin edited in pyproject.toml is seen before `invoke generate` runs. Then the
generated files, which also carry what the generator itself changed:
wheels+image when a wheel input changed: a wheel pin ARG (fork commit,
flash-attn, torch, CUDA, Python), any other ARG the wheel recipe uses, the lock's torch, the
expected wheel names, a stage of the wheel recipe (what the `wheel-builder` target builds: its
base chain and what it copies from) or the context files that recipe copies; image for any
other baked input (the slices included: env-chain's steps, which the composed environment's
layers are written from, and which the wheels never see); none otherwise. A working tree
without compiled wheels (build.wheel-specs and wheel-globs empty) never answers wheels+image:
what would rebuild wheels (a torch bump, a Python change) rebuilds its image alone.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from gpurl_tasks.dockerfile.inputs import DockerfileInputs, StageInputs
from gpurl_tasks.dockerfile.wheels import WheelPins, expected_filenames
from gpurl_tasks.errors import ExitCode

__all__ = [
    "DECISIONS",
    "ClosureEntry",
    "ConfigEntry",
    "Decision",
    "Fingerprint",
    "Reason",
    "decide",
    "fingerprint",
]

_KW = {"frozen": True, "kw_only": True, "slots": True}

NONE, IMAGE, WHEELS = "none", "image", "wheels+image"
DECISIONS = (NONE, IMAGE, WHEELS)
_EXIT_CODES = {NONE: ExitCode.OK, IMAGE: ExitCode.REBUILD_IMAGE,
               WHEELS: ExitCode.REBUILD_WHEELS}

ClosureEntry = tuple[str, str | None, str | None]  # (name, version, chosen artifact hash/source)
ConfigEntry = tuple[str, str, str]  # (dotted key, its class: wheels | image | none, its value)
# a config key's class -> the decision its change forces, and how a reason names it
_CONFIG_LEVELS = {"wheels": WHEELS, "image": IMAGE, "none": NONE}
_CONFIG_LABELS = {"wheels": "compiled wheels", "image": "image", "none": "not baked"}

# ARGs whose change invalidates the prebuilt wheels, with the reason kind they report.
_WHEEL_ARGS = {
    "VLLM_FORK_COMMIT": "vllm-fork-commit",
    "VLLM_FORK_REPO": "vllm-fork-repo",
    "VLLM_VERSION": "vllm-version",
    "FLASH_ATTN_VERSION": "flash-attn",
    "TORCH_VERSION": "torch",
    "CUDA_TAG": "cuda",
    "PYTHON_VERSION": "python",
    "TORCH_CUDA_ARCH_LIST": "cuda-arch-list",
}
# (HARBOR_*: the ARGs of Dockerfiles generated before harbor became a post-install entry)
_IMAGE_ARGS = {"BASE_IMAGE": "base-image", "HARBOR_COMMIT": "harbor", "HARBOR_REPO": "harbor"}
# ARGs that change how a build runs but not what it produces.
_INERT_ARGS = frozenset({"MAX_JOBS", "GITSHA"})
# Lock packages the prebuilt wheels are compiled against (their ABI).
_WHEEL_ABI_PACKAGES = frozenset({"torch"})


@dataclasses.dataclass(**_KW)
class Reason:
    """One changed input: `kind` names the input, `detail` says from what to what."""

    kind: str
    detail: str
    decision: str  # the decision this reason alone forces

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "detail": self.detail}


@dataclasses.dataclass(**_KW)
class Fingerprint:
    """The baked inputs at one point; `digest` is a stable sha256 over all of them."""

    dockerfile: DockerfileInputs
    closure: tuple[ClosureEntry, ...]  # sorted by name
    extras: tuple[str, ...]  # sorted
    wheels: tuple[tuple[str, str], ...]  # (project, expected prebuilt wheel filename)
    missing: tuple[str, ...] = ()  # "dockerfile" and/or "lock" when absent at this point
    # (path, git blob id) of every context file the wheel recipe copies, sorted
    wheel_sources: tuple[tuple[str, str], ...] = ()
    # every config key of the variant with its class and value, sorted; empty when the config
    # at this point could not be read (then the generated files alone decide)
    config: tuple[ConfigEntry, ...] = ()
    # the image installs compiled wheels; without any there are none to rebuild (`wheels` empty)
    compiled: bool = True
    # (path, git blob id) of every context file a hand-written Dockerfile's image stages copy
    # (after .dockerignore), sorted; empty for a generated Dockerfile (its lock decides)
    context: tuple[tuple[str, str], ...] = ()

    def canonical(self) -> dict[str, Any]:
        image = self.dockerfile.image_stages()
        recipe = self.dockerfile.wheel_recipe()
        return {
            "args": dict(self.dockerfile.args),
            "stages": [dataclasses.asdict(s) | {"in_image": s.name in image,
                                                "in_wheel_recipe": s.name in recipe}
                       for s in self.dockerfile.stages],
            "wheel_sources": dict(self.wheel_sources),
            "target": self.dockerfile.target,
            "closure": [list(e) for e in self.closure],
            "extras": list(self.extras),
            "wheels": dict(self.wheels),
            "missing": list(self.missing),
            "config": [list(e) for e in self.config],
            "compiled": self.compiled,
        } | ({"context": dict(self.context)} if self.context else {})

    @property
    def digest(self) -> str:
        blob = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":")).encode()
        return "sha256:" + hashlib.sha256(blob).hexdigest()


@dataclasses.dataclass(**_KW)
class Decision:
    """The answer: none | image | wheels+image, and every reason behind it."""

    decision: str
    reasons: tuple[Reason, ...]

    @property
    def exit_code(self) -> int:
        return _EXIT_CODES[self.decision]

    def to_json(self) -> dict[str, Any]:
        return {"decision": self.decision, "reasons": [r.to_json() for r in self.reasons]}


def fingerprint(dockerfile: DockerfileInputs, closure: Iterable[ClosureEntry],
                extras: Iterable[str], pins: WheelPins,
                missing: Iterable[str] = (),
                wheel_sources: Mapping[str, str] | None = None,
                config: Mapping[str, tuple[str, str]] | None = None,
                compiled: bool = True,
                context: Mapping[str, str] | None = None) -> Fingerprint:
    """Collect the baked inputs; the closure may come in any order and with duplicates;
    `config` is {dotted key: (class, value)} (config.baked_values); `compiled`: the image
    installs compiled wheels (their expected names are recorded only then)."""
    return Fingerprint(
        compiled=compiled,
        context=tuple(sorted((context or {}).items())),
        config=tuple(sorted((k, bakes, value) for k, (bakes, value) in (config or {}).items())),
        missing=tuple(sorted(set(missing))),
        wheel_sources=tuple(sorted((wheel_sources or {}).items())),
        dockerfile=dockerfile,
        closure=tuple(sorted(set(closure), key=lambda e: (e[0], e[1] or "", e[2] or ""))),
        extras=tuple(sorted(set(extras))),
        wheels=tuple(sorted(expected_filenames(pins).items())) if compiled else (),
    )


def _arg_reasons(old: Mapping[str, str], new: Mapping[str, str],
                 wheel_args: frozenset[str]) -> list[Reason]:
    """One reason per changed ARG default; `wheel_args` are the names the wheel recipe uses."""
    out = []
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        base = key.rsplit("/", 1)[-1]
        if base in _INERT_ARGS:
            continue
        if base in _WHEEL_ARGS:
            kind, level = _WHEEL_ARGS[base], WHEELS
        else:
            kind = _IMAGE_ARGS.get(base, "build-arg")
            level = WHEELS if base in wheel_args else IMAGE
        out.append(Reason(kind=kind, detail=f"{key}: {before or '(unset)'} -> {after or '(unset)'}",
                          decision=level))
    return out


def _listdiff(before: Iterable[str], after: Iterable[str]) -> str:
    b, a = set(before), set(after)
    parts = []
    if a - b:
        parts.append("added " + ", ".join(sorted(a - b)))
    if b - a:
        parts.append("removed " + ", ".join(sorted(b - a)))
    return "; ".join(parts)


def _sync_text(step: tuple[tuple[str, ...], tuple[str, ...]]) -> str:
    flags, excluded = step
    return " ".join(flags) + (f" excluding {len(excluded)}" if excluded else "")


def _stage_reasons(old: StageInputs | None, new: StageInputs | None, *,
                   in_wheel_recipe: bool) -> list[Reason]:
    level = WHEELS if in_wheel_recipe else IMAGE
    either = new or old
    name = either.name if either is not None else "?"
    prefix = "wheel-recipe-" if in_wheel_recipe else ""
    if old is None or new is None:
        state = "added" if old is None else "removed"
        return [Reason(kind=prefix + "stage", detail=f"stage {name} {state}", decision=level)]
    out = []
    if old.from_text != new.from_text:
        out.append(Reason(kind=prefix + "base-image",
                          detail=f"stage {name}: FROM {old.from_text} -> {new.from_text}",
                          decision=level))
    if old.apt != new.apt:
        out.append(Reason(kind=prefix + "apt",
                          detail=f"stage {name}: {_listdiff(old.apt, new.apt)}", decision=level))
    if old.syncs != new.syncs:
        details = []
        if len(old.syncs) != len(new.syncs):
            details.append(f"{len(old.syncs)} -> {len(new.syncs)} sync steps")
        for i, (a, b) in enumerate(zip(old.syncs, new.syncs, strict=False)):
            if a[0] != b[0]:
                details.append(f"step {i + 1} flags {_sync_text(a)} -> {_sync_text(b)}")
            if a[1] != b[1]:
                details.append(f"step {i + 1} exclusions {_listdiff(a[1], b[1])}")
        out.append(Reason(kind=prefix + "layer-plan",
                          detail=f"stage {name}: " + "; ".join(details), decision=level))
    if old.other != new.other:
        gone = [x for x in old.other if x not in new.other]
        came = [x for x in new.other if x not in old.other]
        detail = "; ".join([f"- {x}" for x in gone] + [f"+ {x}" for x in came]) or "reordered"
        out.append(Reason(kind=prefix + "instructions", detail=f"stage {name}: {detail}",
                          decision=level))
    return out


def _source_diff(old: Mapping[str, str], new: Mapping[str, str],
                 what: str = "files the wheel-builder copies") -> str:
    """The copied files that differ, named (a few, then a count)."""
    changed = sorted(p for p in set(old) | set(new) if old.get(p) != new.get(p))
    shown = ", ".join(("+" if p not in old else "-" if p not in new else "~") + p
                      for p in changed[:5])
    more = f" and {len(changed) - 5} more" if len(changed) > 5 else ""
    return f"{what} changed: {shown}{more}"


def _closure_reasons(old: Iterable[ClosureEntry], new: Iterable[ClosureEntry]) -> list[Reason]:
    before = {e[0]: e for e in old}
    after = {e[0]: e for e in new}
    out = []
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        if a == b:
            continue
        level = WHEELS if name in _WHEEL_ABI_PACKAGES else IMAGE
        kind = "torch" if name in _WHEEL_ABI_PACKAGES else "package"
        if a is None and b is not None:
            detail = f"{name}: added ({b[1]})"
        elif b is None and a is not None:
            detail = f"{name}: removed (was {a[1]})"
        elif a is not None and b is not None and a[1] != b[1]:
            detail = f"{name}: {a[1]} -> {b[1]}"
        elif a is not None and b is not None:
            detail = f"{name} {b[1]}: artifact {a[2]} -> {b[2]}"
        out.append(Reason(kind=kind, detail=detail, decision=level))
    return out


def _value_change(before: str, after: str) -> str:
    """`a -> b`, or for lists (JSON) what was added and removed."""
    if before.startswith("[") and after.startswith("["):
        try:
            return _listdiff(json.loads(before), json.loads(after)) or f"{before} -> {after}"
        except (ValueError, TypeError):
            pass
    return f"{before or '(empty)'} -> {after or '(empty)'}"


def _config_reasons(old: Iterable[ConfigEntry], new: Iterable[ConfigEntry]) -> list[Reason]:
    """One reason per config key whose value differs, at the level its class declares."""
    before = {key: (bakes, value) for key, bakes, value in old}
    after = {key: (bakes, value) for key, bakes, value in new}
    out = []
    for key in sorted(set(before) | set(after)):
        a, b = before.get(key), after.get(key)
        if a is None or b is None or a[1] == b[1]:
            continue  # a key only one side declares is a change of gpurl, not of the config
        bakes = b[0]
        out.append(Reason(kind="config", decision=_CONFIG_LEVELS[bakes],
                          detail=f"{key} {_value_change(a[1], b[1])} ({_CONFIG_LABELS[bakes]})"))
    return out


def _missing_reasons(old: Fingerprint, new: Fingerprint, *,
                     dockerfile: bool = True) -> list[Reason]:
    """An input absent at one point cannot be compared: say so once instead of diffing
    (`dockerfile` False: the Dockerfile's absence is not a reason)."""
    out = []
    for what, level in (("dockerfile", WHEELS), ("lock", IMAGE)):
        if what == "dockerfile" and not dockerfile:
            continue
        if what in old.missing or what in new.missing:
            where = "at --since" if what in old.missing else "in the working tree"
            if what in old.missing and what in new.missing:
                where = "at both points"
            out.append(Reason(kind=f"missing-{what}", decision=level,
                              detail=f"the {what} is absent {where}; nothing to compare with"))
    return out


def decide(old: Fingerprint, new: Fingerprint) -> Decision:
    """Compare the baked inputs at two points; the strongest reason sets the decision.

    A Dockerfile missing in the working tree while both configs were read is a stale generated
    file (the caller says so), not a reason: the config and the lock decide. Missing at
    `--since`, nothing says what the pinned image was built from: wheels+image. A working
    tree without compiled wheels has none to rebuild: every reason is at most image.
    """
    config_known = bool(old.config) and bool(new.config)
    reasons = _config_reasons(old.config, new.config) if config_known else []
    not_generated = (config_known and "dockerfile" in new.missing
                     and "dockerfile" not in old.missing)
    reasons += _missing_reasons(old, new, dockerfile=not not_generated)
    if "dockerfile" in old.missing or "dockerfile" in new.missing:
        return _decision(reasons + _closure_reasons(old.closure, new.closure),
                         compiled=new.compiled)
    old_stages = {s.name: s for s in old.dockerfile.stages}
    new_stages = {s.name: s for s in new.dockerfile.stages}
    recipe = old.dockerfile.wheel_recipe() | new.dockerfile.wheel_recipe()
    wheel_args = frozenset(arg for stages in (old_stages, new_stages) for name in recipe
                           if name in stages for arg in stages[name].uses)
    reasons += _arg_reasons(old.dockerfile.arg_map, new.dockerfile.arg_map, wheel_args)
    if old.dockerfile.target != new.dockerfile.target:
        reasons.append(Reason(kind="target-stage", decision=IMAGE,
                              detail=f"{old.dockerfile.target} -> {new.dockerfile.target}"))
    for name in list(dict.fromkeys([*old_stages, *new_stages])):
        reasons += _stage_reasons(old_stages.get(name), new_stages.get(name),
                                  in_wheel_recipe=name in recipe)
    if old.wheel_sources != new.wheel_sources:
        reasons.append(Reason(kind="wheel-source", decision=WHEELS, detail=_source_diff(
            dict(old.wheel_sources), dict(new.wheel_sources))))
    if old.context != new.context:
        reasons.append(Reason(kind="context", decision=IMAGE, detail=_source_diff(
            dict(old.context), dict(new.context), "files the Dockerfile copies")))
    if old.extras != new.extras and not config_known:  # else the config's python.extras says it
        reasons.append(Reason(kind="extras", decision=IMAGE,
                              detail=f"{list(old.extras)} -> {list(new.extras)}"))
    if "lock" not in old.missing and "lock" not in new.missing:
        reasons += _closure_reasons(old.closure, new.closure)
    old_wheels, new_wheels = dict(old.wheels), dict(new.wheels)
    for project in sorted(set(old_wheels) | set(new_wheels)):
        if old_wheels.get(project) != new_wheels.get(project):
            reasons.append(Reason(
                kind="prebuilt-wheels", decision=WHEELS,
                detail=f"published {old_wheels.get(project)} no longer matches; "
                       f"build {new_wheels.get(project)}"))
    return _decision(reasons, compiled=new.compiled)


def _decision(reasons: list[Reason], *, compiled: bool = True) -> Decision:
    if not compiled:  # what would rebuild the wheels rebuilds the image alone
        reasons = [dataclasses.replace(r, decision=IMAGE) if r.decision == WHEELS else r
                   for r in reasons]
    order = {level: i for i, level in enumerate(DECISIONS)}
    decision = max((r.decision for r in reasons), key=order.__getitem__, default=NONE)
    return Decision(decision=decision, reasons=tuple(reasons))
