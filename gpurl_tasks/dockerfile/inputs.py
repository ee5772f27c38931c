"""What a Dockerfile bakes into the image, independent of how the file is formatted.

dockerfile-parse joins line continuations and drops comments; on top of that every RUN is
tokenised like a shell would, apt install lists and `uv sync` flags are sorted, and ARG
defaults become a mapping. Two Dockerfiles that differ only in spacing, continuations,
comments or the order of an apt list or of sync flags give equal `DockerfileInputs`.
"""

from __future__ import annotations

import dataclasses
import io
import re
import shlex
from collections.abc import Mapping

from dockerfile_parse import DockerfileParser  # type: ignore[import-untyped]

from gpurl_tasks.dockerfile.provenance import LABEL_PREFIX
from gpurl_tasks.values import expand_variables

__all__ = ["DockerfileInputs", "StageInputs", "parse_dockerfile_inputs"]

_KW = {"frozen": True, "kw_only": True, "slots": True}

TARGET_STAGE = "rl"
WHEEL_BUILDER_STAGE = "wheel-builder"  # the target that compiles the wheels (the recipe's name)
_OPERATORS = {"&&", "||", ";", "|", "&", "(", ")"}
_APT_VALUE_OPTS = {"-o", "-t", "-c", "--option", "--target-release", "--config-file"}
# uv options that take a value as the next token (kept paired when flags are sorted)
_UV_VALUE_OPTS = {
    "--extra", "--group", "--only-group", "--no-group", "--package", "--python", "-p",
    "--index", "--index-url", "--extra-index-url", "--index-strategy", "--directory",
    "--project", "--no-install-package", "--only-install-package", "--find-links", "-f",
    "--config-file", "--link-mode", "--compile-bytecode-timeout",
}


@dataclasses.dataclass(**_KW)
class StageInputs:
    """One build stage: its base, apt set, sync chain and every other instruction."""

    name: str
    base: str  # the FROM image or stage, ARG defaults substituted
    from_text: str  # the FROM reference as written (ARG changes are reported as ARG changes)
    apt: tuple[str, ...]  # sorted, unique packages of every apt(-get) install in the stage
    syncs: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]  # (selection flags, exclusions)
    other: tuple[str, ...]  # remaining instructions, normalised, in order
    depends_on: tuple[str, ...]  # stages named by FROM or COPY --from
    wheel_globs: tuple[str, ...] = ()  # basenames of `*.whl` paths installed, ARGs substituted
    copies: tuple[str, ...] = ()  # context paths COPY/ADD take (no --from), ARGs substituted
    uses: tuple[str, ...] = ()  # ARG names the stage declares or its FROM expands, sorted


@dataclasses.dataclass(**_KW)
class DockerfileInputs:
    """ARG defaults (global as NAME, stage-level as stage/NAME) and the stages in order."""

    args: tuple[tuple[str, str], ...]
    stages: tuple[StageInputs, ...]
    target: str  # the stage the image is (rl, or the last one)

    @property
    def arg_map(self) -> dict[str, str]:
        return dict(self.args)

    @property
    def effective_args(self) -> dict[str, str]:
        """NAME -> default: the global one, else the first stage that gives one."""
        out: dict[str, str] = {}
        for key, value in sorted(self.args, key=lambda kv: "/" in kv[0]):
            out.setdefault(key.rsplit("/", 1)[-1], value)
        return out

    @property
    def wheel_globs(self) -> tuple[str, ...]:
        """The prebuilt-wheel patterns installed for the image (e.g. vllm-*g<commit>*.whl): by
        any stage whose contents reach it (the recipe installs them in a stage of their own)."""
        reaching = self.image_stages()
        return tuple(g for s in self.stages if s.name in reaching for g in s.wheel_globs)

    def image_stages(self) -> frozenset[str]:
        """Stages whose contents reach the target image (FROM and COPY --from edges)."""
        return self._reachable(self.target)

    def wheel_recipe(self) -> frozenset[str]:
        """The stages the compiled wheels depend on: what the wheel-builder target builds
        (its base chain and every stage it copies from); empty without a wheel-builder."""
        return self._reachable(WHEEL_BUILDER_STAGE)

    def _reachable(self, start: str) -> frozenset[str]:
        by_name = {s.name: s for s in self.stages}
        seen: set[str] = set()
        todo = [start]
        while todo:
            name = todo.pop()
            if name in seen or name not in by_name:
                continue
            seen.add(name)
            todo.extend(by_name[name].depends_on)
        return frozenset(seen)


def _substitute(text: str, args: Mapping[str, str]) -> str:
    return expand_variables(text, args)


def _tokens(command: str) -> list[str]:
    """Shell-like tokens with operators split out; fall back to whitespace on bad quoting."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:
        return command.split()


def _commands(tokens: list[str]) -> list[list[str]]:
    out: list[list[str]] = [[]]
    for tok in tokens:
        if tok in _OPERATORS:
            out.append([])
        else:
            out[-1].append(tok)
    return [c for c in out if c]


def _strip_env(cmd: list[str]) -> list[str]:
    i = 0
    while i < len(cmd) and re.fullmatch(r"\w+=.*", cmd[i]):
        i += 1
    if i < len(cmd) and cmd[i] == "env":
        return _strip_env(cmd[i + 1:])
    return cmd[i:]


def _apt_packages(cmd: list[str]) -> list[str] | None:
    if len(cmd) < 2 or cmd[0].rsplit("/", 1)[-1] not in ("apt-get", "apt"):
        return None
    rest = cmd[1:]
    skip = False
    for i, tok in enumerate(rest):
        if skip:
            skip = False
            continue
        if tok in _APT_VALUE_OPTS:
            skip = True
            continue
        if tok.startswith("-"):
            continue
        if tok != "install":
            return None
        pkgs: list[str] = []
        skip = False
        for arg in rest[i + 1:]:
            if skip:
                skip = False
            elif arg in _APT_VALUE_OPTS:
                skip = True
            elif not arg.startswith("-"):
                pkgs.append(arg)
        return pkgs
    return None


def _uv_sync(cmd: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    if len(cmd) < 2 or cmd[0].rsplit("/", 1)[-1] != "uv" or cmd[1] != "sync":
        return None
    items: list[str] = []
    excluded: list[str] = []
    rest = cmd[2:]
    i = 0
    while i < len(rest):
        tok = rest[i]
        if tok in _UV_VALUE_OPTS and i + 1 < len(rest):
            value = rest[i + 1]
            i += 2
        elif tok.startswith("--") and "=" in tok:
            tok, value = tok.split("=", 1)
            i += 1
        else:
            items.append(tok)
            i += 1
            continue
        if tok == "--no-install-package":
            excluded.append(value)
        else:
            items.append(f"{tok}={value}")
    return tuple(sorted(items)), tuple(sorted(set(excluded)))


def _label(value: str) -> str | None:
    """A LABEL without gpurl's provenance keys (git sha, lock hash, generator version).

    Those record where an image came from; they change with every lock byte or commit and
    say nothing about what the image contains.
    """
    kept = [tok for tok in _tokens(value) if not tok.startswith(LABEL_PREFIX + ".")]
    return "LABEL " + " ".join(kept) if kept else None


def _wheel_globs(cmd: list[str], args: Mapping[str, str]) -> list[str]:
    if "install" not in cmd or not any(c.rsplit("/", 1)[-1] in ("pip", "uv") for c in cmd[:2]):
        return []
    return [_substitute(tok, args).rsplit("/", 1)[-1] for tok in cmd if tok.endswith(".whl")]


def _stage_deps(value: str, args: Mapping[str, str], names: set[str]) -> str | None:
    for tok in value.split():
        if tok.startswith("--from="):
            ref = _substitute(tok.split("=", 1)[1], args).lower()
            return ref if ref in names else None
    return None


def _context_sources(value: str, args: Mapping[str, str]) -> list[str]:
    """The context paths a COPY/ADD without --from takes (all words but options and the last)."""
    words = _tokens(value)
    if any(w.startswith("--from=") for w in words):
        return []
    paths = [w for w in words if not w.startswith("--")]
    return [_substitute(w, args) for w in paths[:-1]]


_VARIABLE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")


def parse_dockerfile_inputs(text: str, build_args: Mapping[str, str] | None = None
                            ) -> DockerfileInputs:
    """Parse Dockerfile text into its formatting-independent baked inputs; `build_args`
    (`--build-arg`s) override the defaults of the ARGs they name, as the builders do."""
    given = build_args or {}
    parser = DockerfileParser(fileobj=io.BytesIO(text.encode()))
    structure = [i for i in parser.structure if i["instruction"] != "COMMENT"]
    global_args: dict[str, str] = {}
    stage_args: dict[str, str] = {}
    raw_stages: list[tuple[str, str, list[tuple[str, str]]]] = []  # name, base, instructions
    for item in structure:
        instr = str(item["instruction"]).upper()
        value = " ".join(str(item["value"]).split())
        if instr == "ARG":
            name, sep, default = value.partition("=")
            if name in given:
                sep, default = "=", shlex.quote(given[name])
            if sep:
                clean = " ".join(_tokens(default)) if default else ""
                if raw_stages:
                    stage_args[f"{raw_stages[-1][0]}/{name}"] = clean
                else:
                    global_args[name] = clean
            if raw_stages:
                raw_stages[-1][2].append((instr, name))
            continue
        if instr == "FROM":
            parts = [p for p in value.split() if not p.startswith("--platform")]
            name = parts[2].lower() if len(parts) >= 3 and parts[1].lower() == "as" else str(
                len(raw_stages))
            raw_stages.append((name, parts[0], []))
            continue
        if not raw_stages:
            continue
        raw_stages[-1][2].append((instr, value))

    names = {s[0] for s in raw_stages}
    stages: list[StageInputs] = []
    for name, from_text, items in raw_stages:
        base = _substitute(from_text, global_args)
        local_args = {**global_args, **{k.split("/", 1)[1]: v for k, v in stage_args.items()
                                        if k.startswith(name + "/")}}
        apt: set[str] = set()
        syncs: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
        other: list[str] = []
        globs: list[str] = []
        copies: list[str] = []
        uses = set(_VARIABLE.findall(from_text))
        deps = [base.lower()] if base.lower() in names else []
        for instr, value in items:
            if instr == "ARG":
                uses.add(value)
                continue
            if instr in ("COPY", "ADD"):
                dep = _stage_deps(value, local_args, names)
                if dep:
                    deps.append(dep)
                else:
                    copies += _context_sources(value, local_args)
            if instr == "LABEL":
                label = _label(value)
                if label:
                    other.append(label)
                continue
            if instr != "RUN":
                other.append(f"{instr} {' '.join(_tokens(value))}")
                continue
            kept: list[str] = []
            for cmd in _commands(_tokens(value)):
                bare = _strip_env(cmd)
                pkgs = _apt_packages(bare)
                sync = _uv_sync(bare)
                if pkgs is not None:
                    apt.update(pkgs)
                    kept.append("<apt-install>")
                elif sync is not None:
                    syncs.append(sync)
                    kept.append("<uv-sync>")
                else:
                    globs += _wheel_globs(bare, local_args)
                    kept.append(shlex.join(cmd))
            other.append("RUN " + " && ".join(kept))
        stages.append(StageInputs(name=name, base=base, from_text=from_text, apt=tuple(sorted(apt)),
                                  syncs=tuple(syncs), other=tuple(other),
                                  depends_on=tuple(dict.fromkeys(deps)),
                                  wheel_globs=tuple(globs), copies=tuple(copies),
                                  uses=tuple(sorted(uses))))
    target = TARGET_STAGE if TARGET_STAGE in names else (stages[-1].name if stages else "")
    args = sorted({**global_args, **stage_args}.items())
    return DockerfileInputs(args=tuple(args), stages=tuple(stages), target=target)
