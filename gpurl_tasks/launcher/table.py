"""Pin images into a typed image table, the launcher form the team uses now:

    SOURCE_COMMIT = "<40 hex>"
    GPU_RL_IMAGES = {
        (ImageArchitecture.AMD64, ImageVariant.STANDARD): GpuRlImage(
            digest="sha256:...", tag=f"gpu-rl-{SOURCE_COMMIT}", source_commit=SOURCE_COMMIT, ...),
        ...
    }

The module is read with `ast` and edited by source spans, never re-rendered: only the spans
of the fields whose value changes are replaced, so comments, formatting and every other entry
stay byte for byte. A field is written as a plain literal unless it already means the new
value; the module-level commit variable (launcher.commit-variable) is rewritten instead only
when nothing in the module but the entries pinned in this edit reads it, and those are pinned to
one commit: a variable shared with an entry that is not being pinned (or any other reader)
would otherwise change its meaning. After the
edit the table is read back and every entry's fields are compared with what they must now
mean, so a span bug can never reach the file.

Field values are resolved without running the module: string literals, module-level string
constants they name, and f-strings of those.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Mapping, Sequence

from gpurl_tasks.config import LauncherSettings
from gpurl_tasks.errors import PinError, shown
from gpurl_tasks.launcher.source import (
    find_assignment,
    node_span,
    parse_module,
    source_lines,
    string_literal,
)

__all__ = ["EntryPin", "TableShape", "check_entries", "entry_commit", "pin_entries"]

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class TableShape:
    """What the config says about the module: the table's name, the entry's field names and
    the module-level commit variable entries may name ("" for none)."""

    table: str
    digest_field: str
    tag_field: str
    commit_field: str
    commit_variable: str

    @classmethod
    def of(cls, launcher: LauncherSettings) -> TableShape:
        """The shape launcher.table and its keys describe (their defaults: the team's)."""
        return cls(table=launcher.table, digest_field=launcher.digest_field,
                   tag_field=launcher.tag_field, commit_field=launcher.commit_field,
                   commit_variable=launcher.commit_variable)

    @property
    def fields(self) -> tuple[str, str, str]:
        return (self.digest_field, self.tag_field, self.commit_field)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class EntryPin:
    """The values one entry must hold after the pin; `key` as `ast.unparse` spells it."""

    key: str
    digest: str
    tag: str
    commit: str

    @property
    def values(self) -> tuple[str, str, str]:
        """In the order of TableShape.fields."""
        return (self.digest, self.tag, self.commit)


@dataclasses.dataclass(frozen=True, slots=True)
class _Entry:
    key: str
    line: int
    value: ast.Call


def _entries(tree: ast.Module, shape: TableShape, where: str) -> list[_Entry]:
    node = find_assignment(tree, shape.table, where, key="launcher.table")
    if node not in tree.body:
        raise PinError(f"{where}:{node.lineno}: {shape.table} is not assigned at module level",
                       hint="launcher.table names the module-level dict of image entries")
    table = node.value
    if not isinstance(table, ast.Dict):
        raise PinError(f"{where}:{node.lineno}: {shape.table} is not a dict literal",
                       hint="write the table as {KEY: Entry(digest=..., ...), ...}")
    out = []
    for key, value in zip(table.keys, table.values, strict=True):
        if key is None or not isinstance(value, ast.Call):
            raise PinError(f"{where}:{value.lineno}: an entry of {shape.table} is not "
                           "`KEY: Entry(field=..., ...)`",
                           hint="gpurl writes into keyword fields of a call per entry")
        out.append(_Entry(key=ast.unparse(key), line=key.lineno, value=value))
    return out


def _constants(tree: ast.Module) -> dict[str, tuple[ast.Constant, str]]:
    """Module-level `NAME = "text"` assigned once, with its literal: the names an entry's
    field may resolve, and the one node a commit variable's pin replaces."""
    found: dict[str, list[ast.expr]] = {}
    for stmt in tree.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else (
            [stmt.target] if isinstance(stmt, ast.AnnAssign) and stmt.value else [])
        for target in targets:
            for each in (n for n in ast.walk(target) if isinstance(n, ast.Name)):
                found.setdefault(each.id, []).append(getattr(stmt, "value", None) or target)
    stores: dict[str, int] = {}  # a name bound anywhere else (a function, a loop) is no constant
    for bound in ast.walk(tree):
        if isinstance(bound, ast.Name) and isinstance(bound.ctx, ast.Store):
            stores[bound.id] = stores.get(bound.id, 0) + 1
    out = {}
    for name, nodes in found.items():
        node = nodes[0]
        if (len(nodes) == stores[name] == 1 and isinstance(node, ast.Constant)
                and isinstance(node.value, str)):
            out[name] = (node, node.value)
    return out


def _resolved(node: ast.expr | None, names: Mapping[str, str]) -> str | None:
    """A field's string value: a literal, a constant it names, or an f-string of those; None
    for anything else (it is then only ever replaced, never trusted)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.JoinedStr):
        parts = []
        for part in node.values:
            if isinstance(part, ast.FormattedValue):
                if part.conversion != -1 or part.format_spec is not None:
                    return None
                part = part.value
            text = _resolved(part, names)
            if text is None:
                return None
            parts.append(text)
        return "".join(parts)
    return None


def _field(entry: _Entry, name: str) -> ast.expr | None:
    return next((k.value for k in entry.value.keywords if k.arg == name), None)


def _meaning(entries: Sequence[_Entry], shape: TableShape, names: Mapping[str, str]
             ) -> dict[str, tuple[str | None, ...]]:
    return {e.key: tuple(_resolved(_field(e, f), names) for f in shape.fields) for e in entries}


def _read(source: str, shape: TableShape, where: str
          ) -> tuple[ast.Module, list[_Entry], dict[str, tuple[ast.Constant, str]]]:
    tree = parse_module(source, where)
    return tree, _entries(tree, shape, where), _constants(tree)


def _names(constants: Mapping[str, tuple[ast.Constant, str]]) -> dict[str, str]:
    return {name: text for name, (_, text) in constants.items()}


def check_entries(source: str, shape: TableShape, keys: Sequence[str], *,
                  where: str = "the table module") -> None:
    """The table can take a pin of `keys`: one entry each, with every field it writes, and
    every digest well-formed (the pin task says so before it fetches any image)."""
    _, entries, constants = _read(source, shape, where)
    _check(entries, keys, shape, _names(constants), where)


def _check(entries: Sequence[_Entry], keys: Sequence[str], shape: TableShape,
           names: Mapping[str, str], where: str) -> dict[str, _Entry]:
    """Each key's one entry with every field a pin writes; every digest of the table in the
    one form a node can pull by (a malformed one elsewhere is a table nobody can trust)."""
    chosen: dict[str, _Entry] = {}
    for key in keys:
        found = [e for e in entries if e.key == key]
        if not found:
            raise PinError(f"{where} has no entry {key} in {shape.table}",
                           hint=f"add the entry, or set launcher.table-key (a variant's "
                                f"table-key) to the key it has; {len(entries)} entries: "
                                + ", ".join(e.key for e in entries[:4]))
        if len(found) > 1:
            lines = ", ".join(str(e.line) for e in found)
            raise PinError(f"{where} has {len(found)} entries {key} in {shape.table} "
                           f"(lines {lines})",
                           hint="keep one entry per platform and variant: Python keeps the last")
        missing = [f for f in shape.fields if _field(found[0], f) is None]
        if missing:
            raise PinError(f"{where}:{found[0].line}: the entry {key} has no "
                           f"{', '.join(missing)} field",
                           hint="check launcher.digest-field, tag-field and commit-field")
        chosen[key] = found[0]
    for entry in entries:
        node = _field(entry, shape.digest_field)
        digest = _resolved(node, names)
        if node is not None and (digest is None or not _DIGEST.fullmatch(digest)):
            raise PinError(f"{where}:{node.lineno}: the {shape.digest_field} of entry {entry.key} "
                           f"is {shown(digest if digest is not None else ast.unparse(node))}, "
                           "not sha256:<64 hex digits>",
                           hint="write the image's manifest digest (`crane digest IMAGE:TAG`); "
                                "the tag goes in its own field")
    return chosen


def pin_entries(source: str, shape: TableShape, pins: Sequence[EntryPin], *,
                where: str = "the table module") -> str:
    """`source` with each pinned entry's digest, tag and commit set; unchanged when every
    entry already means its values."""
    if len({p.key for p in pins}) != len(pins):
        raise PinError(f"two images would be pinned into one entry of {where}",
                       hint="give each variant its own table-key")
    tree, entries, constants = _read(source, shape, where)
    names = _names(constants)
    chosen = _check(entries, [p.key for p in pins], shape, names, where)
    new_names = dict(names)
    edits: list[tuple[ast.expr, str]] = []
    variable = shape.commit_variable
    # the variable moves only when nothing but the pinned entries' own fields (digest, tag,
    # commit) reads it, all to one commit: another field (harbor_commit=SOURCE_COMMIT), entry
    # or line that reads it keeps its meaning
    commits = {p.commit for p in pins if _field_uses(chosen[p.key], shape, variable)}
    if (variable in constants and len(commits) == 1
            and _uses(tree, variable) == sum(_field_uses(e, shape, variable)
                                             for e in chosen.values())):
        new_names[variable] = commits.pop()
        if new_names[variable] != names[variable]:
            edits.append((constants[variable][0], new_names[variable]))
    for pin in pins:
        for name, value in zip(shape.fields, pin.values, strict=True):
            node = _field(chosen[pin.key], name)
            assert node is not None  # _check
            if _resolved(node, new_names) != value:
                edits.append((node, value))
    lines = source_lines(source)
    new = source
    for node, value in sorted(edits, key=lambda e: node_span(lines, e[0]), reverse=True):
        start, end = node_span(lines, node)
        new = new[:start] + string_literal(value, source[start:end], where) + new[end:]
    expected = {**_meaning(entries, shape, names), **{p.key: p.values for p in pins}}
    _check_meaning(new, shape, expected, where)
    return new


def _field_uses(entry: _Entry, shape: TableShape, name: str) -> int:
    """How often the fields a pin writes, of `entry`, read `name`."""
    return sum(_uses(node, name) for field in shape.fields
               if (node := _field(entry, field)) is not None)


def _uses(node: ast.AST, name: str) -> int:
    """How often `node` reads `name`."""
    return sum(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
               for n in ast.walk(node))


def _check_meaning(new: str, shape: TableShape, expected: Mapping[str, tuple[str | None, ...]],
                   where: str) -> None:
    """The edited table means exactly the pins for their entries and what it meant for every
    other one (a guard against a span bug: it raises, never writes)."""
    _, entries, constants = _read(new, shape, where)
    after = _meaning(entries, shape, _names(constants))
    if after != expected:
        raise RuntimeError(f"pinning {where} would change the table's meaning beyond the pins: "
                           f"{after} != {expected}")


def entry_commit(source: str, shape: TableShape, key: str) -> str | None:
    """The commit field of entry `key` as the module resolves it; None when the module, the
    table or the one entry cannot be read (rebuild-needed then starts elsewhere)."""
    try:
        _, entries, constants = _read(source, shape, "the table module")
    except PinError:
        return None
    found = [e for e in entries if e.key == key]
    if len(found) != 1:
        return None
    return _resolved(_field(found[0], shape.commit_field), _names(constants))
