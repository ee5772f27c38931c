"""The environment's package set, proven in the image (stdlib only: it runs with the image's
own python, written into the repository by `invoke generate` as docker/gpurl-envcheck.py).

    python -B gpurl-envcheck.py lock-set OUT [--outside NAME]...
        after the final sync (which proved the environment equal to the lock): record
        `uv pip freeze`, the lock's set (without each NAME: the pinned post-install slice's
        packages, installed below the sync);
    python -B gpurl-envcheck.py prove --lock-set FILE --out FILE [--post-install REQ]...
        after the post-installs: record `uv pip freeze` again, and fail unless the environment
        is the lock's set (no locked package changed or gone) plus the post-installs and what
        their installed requirements reach (their extras followed; other markers counted in,
        an over-approximation that never refuses a real dependency);
    python -B gpurl-envcheck.py pip-check [--allow PATTERN]...
        run `uv pip check`: every conflict it reports must match an allowed pattern
        (fnmatch, the whole line): a new conflict fails, naming it; an allowed pattern that
        matches nothing any more is said (drop it), not a failure.

Each failure is one `gpurl-envcheck: error:` line per problem on stderr and exit 1.
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.metadata as metadata
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_EXTRAS = re.compile(r"\[([^\]]*)\]")
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*['"]([^'"]+)['"]""")


def norm(name: str) -> str:
    """PEP 503 normalisation."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_freeze(text: str) -> dict[str, str]:
    """`uv pip freeze` -> {normalised name: the line}; `-e` and URL lines are keyed by the
    name they install where it shows (`name @ url`), else by the whole line."""
    found: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        head = re.split(r"==| @ ", line, maxsplit=1)[0]
        found[norm(head) if _NAME.fullmatch(head) else line] = line
    return found


def without(freeze: str, names: Iterable[str]) -> str:
    """`uv pip freeze`'s text without the lines of `names`."""
    drop = {norm(n) for n in names}
    return "".join(line + "\n" for key, line in parse_freeze(freeze).items() if key not in drop)


def _requirement(text: str) -> tuple[str, set[str], set[str]]:
    """(normalised name, its extras, the extras its marker asks for) of a requirement."""
    match = _NAME.match(text.strip())
    name = norm(match.group(0)) if match else ""
    extras = _EXTRAS.match(text.strip()[len(match.group(0)):]) if match else None
    wanted = {norm(e) for e in extras.group(1).split(",") if e.strip()} if extras else set()
    marker = text.split(";", 1)[1] if ";" in text else ""
    return name, wanted, {norm(e) for e in _EXTRA_MARKER.findall(marker)}


def reached(post_installs: Iterable[str], requires: dict[str, list[str]]) -> set[str]:
    """Every distribution the post-install requirements reach through `requires` ({name: its
    Requires-Dist lines}, installed distributions only), following the extras asked for."""
    seen: set[tuple[str, frozenset[str]]] = set()
    names: set[str] = set()
    todo = [_requirement(r)[:2] for r in post_installs]
    while todo:
        name, extras = todo.pop()
        if (name, frozenset(extras)) in seen:
            continue
        seen.add((name, frozenset(extras)))
        names.add(name)
        for line in requires.get(name, ()):
            dep, dep_extras, marker_extras = _requirement(line)
            if marker_extras and not marker_extras & extras:
                continue  # a requirement of an extra nobody asked for
            todo.append((dep, dep_extras))
    return names


def package_set_problems(lock_set: dict[str, str], now: dict[str, str],
                         post_installs: Sequence[str],
                         requires: dict[str, list[str]]) -> list[str]:
    """Why `now` is not the lock's set plus the post-installs and their dependencies."""
    problems = [f"{name}: the lock's {line!r} became {now.get(name, 'nothing')!r}"
                for name, line in sorted(lock_set.items()) if now.get(name) != line]
    reach = reached(post_installs, requires)
    problems += [f"{line!r} is neither in the lock nor a post-install or its dependency"
                 for name, line in sorted(now.items()) if name not in lock_set and name not in reach]
    return problems


def conflict_problems(report: str, allowed: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the conflicts `uv pip check` reports that no allowed pattern matches, the allowed
    patterns that match none of them)."""
    conflicts = [line.strip() for line in report.splitlines()
                 if line.strip().startswith("The package ")]
    new = [line for line in conflicts if not any(fnmatch.fnmatchcase(line, p) for p in allowed)]
    stale = [p for p in allowed if not any(fnmatch.fnmatchcase(line, p) for line in conflicts)]
    return new, stale


def _freeze() -> str:
    return subprocess.run(["uv", "pip", "freeze"], capture_output=True, text=True,
                          check=True).stdout


def _installed_requires() -> dict[str, list[str]]:
    return {norm(d.metadata["Name"]): list(d.requires or ()) for d in metadata.distributions()}


def _fail(problems: Sequence[str], what: str) -> int:
    for problem in problems:
        print(f"gpurl-envcheck: error: {problem}", file=sys.stderr)
    print(f"gpurl-envcheck: error: {what}", file=sys.stderr)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpurl-envcheck")
    sub = parser.add_subparsers(dest="command", required=True)
    lock = sub.add_parser("lock-set")
    lock.add_argument("out")
    lock.add_argument("--outside", action="append", default=[])
    prove = sub.add_parser("prove")
    prove.add_argument("--lock-set", required=True)
    prove.add_argument("--out", required=True)
    prove.add_argument("--post-install", action="append", default=[])
    check = sub.add_parser("pip-check")
    check.add_argument("--allow", action="append", default=[])
    args = parser.parse_args(argv)
    if args.command == "lock-set":
        with open(args.out, "w", encoding="utf-8") as out:
            out.write(without(_freeze(), args.outside))
        return 0
    if args.command == "prove":
        with open(args.lock_set, encoding="utf-8") as handle:
            lock_set = parse_freeze(handle.read())
        text = _freeze()
        with open(args.out, "w", encoding="utf-8") as out:
            out.write(text)
        now = parse_freeze(text)
        problems = package_set_problems(lock_set, now, args.post_install, _installed_requires())
        if problems:
            return _fail(problems, "the environment is not the lock plus build.post-install "
                                   "and their dependencies")
        print(f"package set: the lock's {len(lock_set)} + {len(now) - len(lock_set)} after it "
              f"({len(args.post_install)} post-install(s) and their dependencies)")
        return 0
    done = subprocess.run(["uv", "pip", "check"], capture_output=True, text=True, check=False)
    new, stale = conflict_problems(done.stdout + done.stderr, args.allow)  # uv 0.13: stderr
    for pattern in stale:
        print(f"uv pip check: the allowed conflict {pattern!r} is not reported any more "
              "(drop it from build.pip-check-allow)")
    if new:
        return _fail([f"new conflict: {line}" for line in new],
                     "uv pip check reports a conflict build.pip-check-allow does not allow")
    if done.returncode != 0 and not args.allow:
        return _fail([done.stdout.strip() or done.stderr.strip()], "uv pip check failed")
    print(f"uv pip check: {len(args.allow) - len(stale)} allowed conflict(s), no other")
    return 0


if __name__ == "__main__":
    sys.exit(main())
