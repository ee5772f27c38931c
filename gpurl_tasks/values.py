"""The one grammar of every value gpurl reads and later writes as syntax: validated at the edge.

Each value reaches an artifact that runs with the team's registry token (a Dockerfile RUN, a
slice file read by `uv pip install`, the kaniko script), so a value that could change the
structure of that artifact is refused where it is read, naming its key path and the value.
The writers quote as well (model.quote_word, shlex.quote, json.dumps): validation says what a
value may be, quoting guarantees that even an allowed value stays one word.

Every check is pure, returns the value unchanged, and raises `error` (ConfigError by default;
the lock reader passes LockError) with `key` in the message: `build.apt-packages[2]`,
`package[12].version`.

Byte sizes too (`parse_size`, `format_bytes`): "4GB" / "500MB" / "3.5GiB". Layer caps are
decimal (GB = 10**9) because registries and the team's rules of thumb are; `binary_gb=True`
reads "512GB" as 512 GiB, which is how iris (humanfriendly) reads memory. And the launcher's
pin comment marker (`PIN_MARKER`), written by the pin and read back by rebuild-needed.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement
from packaging.requirements import Requirement as _Requirement
from packaging.version import InvalidVersion, Version

from gpurl_tasks.errors import ConfigError, GpurlError, shown
from gpurl_tasks.imageref import ImageRef, InvalidReference, parse_reference

__all__ = [
    "ARG_REF",
    "HASH_LENGTHS",
    "PIN_MARKER",
    "SOURCE_ID_PATTERN",
    "VARIABLE",
    "Check",
    "PostInstall",
    "apt_package",
    "build_arg",
    "build_arg_map",
    "comma_list",
    "commit",
    "cuda_arch_list",
    "each",
    "expand_variables",
    "format_bytes",
    "git_url",
    "gzip_level",
    "hash_digest",
    "identifier",
    "image_path",
    "image_reference",
    "index_url",
    "inside_repository",
    "one_line",
    "optional",
    "package_name",
    "parse_size",
    "plain_name",
    "post_install",
    "post_install_entry",
    "profile_name",
    "registry_host",
    "repository",
    "requirement",
    "resource_size",
    "sha256_hex",
    "source_commit",
    "source_id",
    "url",
    "variable_name",
    "version",
    "wheel_glob",
    "wheel_spec",
]

Check = Callable[..., object]

# PEP 508 names (also PEP 685 extra and group names, which are compared normalised).
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_PROFILE = re.compile(r"[a-z0-9][a-z0-9._-]*")
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_COMMIT = re.compile(r"[0-9a-f]{7,40}")
# The source id an immutable tag ends with: a commit's short (or full) sha, with
# `-dirty-<12 hex of the diff>` when the tree had uncommitted tracked edits (source_id).
SOURCE_ID_PATTERN = r"[0-9a-f]{7,40}(?:-dirty-[0-9a-f]{12})?"
# Debian policy 5.6.1: lowercase letters, digits, + - . ; at least two; starts alphanumeric.
# An optional `:arch` qualifier and `=version` pin, as apt-get accepts them.
_APT = re.compile(r"[a-z0-9][a-z0-9+.-]+(?::[a-z0-9-]+)?(?:=[A-Za-z0-9.+~:-]+)?")
_SIZE = re.compile(r"[0-9]+(?:\.[0-9]+)?(?:[KkMmGgTtPp][Ii]?[Bb]?|[Bb])?")
HASH_LENGTHS = {"md5": 32, "sha256": 64, "sha384": 96, "sha512": 128}
_HASH = re.compile(r"(md5|sha256|sha384|sha512):([0-9a-f]+)")
# RFC 3986 characters: no whitespace, control, quote, backslash, backtick or non-ASCII.
_URL_CHARS = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+")
_PATH = re.compile(r"[A-Za-z0-9._+/-]+")
# The one home of `${...}` in Dockerfile text and in config values written into it:
# ARG_REF is a build ARG reference `${NAME}` (the only form a config value may hold; group 1 is
# the name); VARIABLE is any expansion the Dockerfile's shell or parser reads: `$name`,
# `${name}`, `${name:-default}`, `${name:+alt}` (the name is group 1 or 2: variable_name).
ARG_REF = re.compile(r"\$\{([A-Z][A-Z0-9_]*)\}")
VARIABLE = re.compile(r"\$(?:\{(\w+)(?::?[-+][^}]*)?\}|(\w+))")
_GLOB = re.compile(r"[A-Za-z0-9_.*?+/-]+")
URL_SCHEMES = ("https", "http", "file")
GIT_SCHEMES = ("https", "http", "ssh", "git", "file", "git+https", "git+http", "git+ssh",
               "git+git", "git+file")


def _bad(error: type[GpurlError], key: str, value: object, expected: str,
         hint: str | None = None) -> GpurlError:
    """The one refusal of a value; without a more precise hint, where `key`'s form is told:
    a flag's in its task's --help, a config key's in docs/config.md."""
    where = "its task's --help" if key.startswith("-") else "docs/config.md"
    return error(f"{key} must be {expected}, not {shown(value)}",
                 hint=hint or f"{where} gives {key}'s form")


def _string(value: object, key: str, error: type[GpurlError], expected: str) -> str:
    if not isinstance(value, str) or not value:
        raise _bad(error, key, value, expected)
    return value


def one_line(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> str:
    """Printable text on one line (a comment, an import assert): no control characters."""
    text = _string(value, key, error, "non-empty text on one line")
    if any(ord(c) < 32 or ord(c) == 127 or c in "\u2028\u2029\x85" for c in text):
        raise _bad(error, key, value, "text on one line without control characters")
    return text


def package_name(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> str:
    """A PEP 508 distribution name (also an extra or a dependency group name, PEP 685)."""
    text = _string(value, key, error, "a package name")
    if not _NAME.fullmatch(text):
        raise _bad(error, key, value, "a name of letters, digits, '.', '_' and '-' (PEP 508)")
    return text


def glibc(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> str:
    """A glibc version `2.N` (what manylinux tags and uv's --python-platform are made of)."""
    text = _string(value, key, error, "a glibc version")
    if not re.fullmatch(r"2\.[0-9]{1,3}", text):
        raise _bad(error, key, value, "a glibc version such as 2.35 (Ubuntu 22.04) or 2.36")
    return text


def version(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> str:
    """A PEP 440 version, exactly as written (no surrounding whitespace, no options)."""
    text = _string(value, key, error, "a version")
    try:
        Version(text)
    except InvalidVersion:
        raise _bad(error, key, value, "a PEP 440 version such as 1.2.3 or 2.8.0+cu128") from None
    if text != text.strip() or any(c.isspace() for c in text):
        raise _bad(error, key, value, "a PEP 440 version without whitespace")
    return text


def url(value: object, key: str, *, error: type[GpurlError] = ConfigError,
        schemes: Sequence[str] = URL_SCHEMES) -> str:
    """A URL of one of `schemes`, of URL characters only (no space, quote or control)."""
    text = _string(value, key, error, "a URL")
    expected = f"a {' or '.join(schemes)} URL without spaces, quotes or control characters"
    if not _URL_CHARS.fullmatch(text):
        raise _bad(error, key, value, expected)
    parts = urlsplit(text)
    if parts.scheme not in schemes or (parts.scheme != "file" and not parts.netloc):
        raise _bad(error, key, value, expected)
    return text


def git_url(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> str:
    """A git repository URL (`https://github.com/org/repo.git`, `ssh://...`)."""
    return url(value, key, error=error, schemes=GIT_SCHEMES)


def identifier(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> str:
    """A Python identifier (a launcher variable)."""
    text = _string(value, key, error, "a Python identifier")
    if not (text.isidentifier() and text.isascii()):
        raise _bad(error, key, value, "a Python identifier such as DEFAULT_RL_DOCKER_IMAGE")
    return text


def index_url(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> str:
    """A package index: a URL, or a directory path as uv records a flat index on disk."""
    text = _string(value, key, error, "an index URL or path")
    if "://" in text:
        return url(text, key, error=error)
    if not _URL_CHARS.fullmatch(text) or text.startswith("-"):
        raise _bad(error, key, value, "an index URL, or a path without spaces or options")
    return text


def hash_digest(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> str:
    """`algo:hex`, the hex as long as the algorithm's digest (sha256: 64 digits)."""
    text = _string(value, key, error, "a hash")
    match = _HASH.fullmatch(text)
    if not match or len(match.group(2)) != HASH_LENGTHS[match.group(1)]:
        raise _bad(error, key, value, "a hash like sha256:<64 lowercase hex digits>")
    return text


def gzip_level(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> int:
    """A gzip compression level, 1 (fastest) to 9 (smallest)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 9:
        raise _bad(error, key, value, "a gzip level from 1 to 9")
    return value


def sha256_hex(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> str:
    """A bare sha256: 64 lowercase hex digits (as `sha256sum` prints it)."""
    text = _string(value, key, error, "a sha256")
    if not re.fullmatch(r"[0-9a-f]{64}", text):
        raise _bad(error, key, value, "64 lowercase hex digits (`sha256sum FILE`)")
    return text


_ARCH = r"[0-9]+\.[0-9]+a?(?:\+PTX)?"
_ARCH_LIST = re.compile(rf"{_ARCH}(?:;{_ARCH})*")


def cuda_arch_list(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> str:
    """A TORCH_CUDA_ARCH_LIST: compute capabilities separated by ';' (`8.0;9.0;10.0+PTX`)."""
    text = _string(value, key, error, "a CUDA arch list")
    if not _ARCH_LIST.fullmatch(text):
        raise _bad(error, key, value, "compute capabilities separated by ';', like \"8.0;9.0\"")
    return text


def commit(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> str:
    """A git commit id: 7 to 40 lowercase hex digits."""
    text = _string(value, key, error, "a commit id")
    if not _COMMIT.fullmatch(text):
        raise _bad(error, key, value, "a commit id of 7 to 40 lowercase hex digits")
    return text


def profile_name(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> str:
    """A profile or variant name: it names files and directories and appears in comments."""
    text = _string(value, key, error, "a name")
    if not _PROFILE.fullmatch(text):
        raise _bad(error, key, value, "a name of lowercase letters, digits, '.', '_' and '-' "
                   "starting with a letter or digit", hint="it names a profile's or variant's table "
                   "in [tool.gpurl], never a path")
    return text


_BUILD_ARG = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*")


def build_arg(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> str:
    """A Dockerfile build argument `NAME=value` (kaniko's and Docker's `--build-arg`)."""
    text = one_line(value, key, error=error)
    if not _BUILD_ARG.fullmatch(text):
        raise _bad(error, key, value, "NAME=value with NAME a shell variable name")
    return text


def build_arg_map(entries: Sequence[str]) -> dict[str, str]:
    """{NAME: value} of `NAME=value` entries (checked by `build_arg`); a later one wins."""
    return dict(entry.split("=", 1) for entry in entries)


def plain_name(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> str:
    """A registry user, tag prefix or similar simple token."""
    text = _string(value, key, error, "a name")
    if not _PLAIN.fullmatch(text):
        raise _bad(error, key, value, "a plain name (letters, digits, '.', '_', '-')")
    return text


def apt_package(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> str:
    """A Debian package name (policy 5.6.1), optionally `:arch` and `=version`."""
    text = _string(value, key, error, "an apt package name")
    if not _APT.fullmatch(text):
        raise _bad(error, key, value, "a Debian package name (lowercase letters, digits, "
                   "'+', '-', '.'), optionally with :arch or =version")
    return text


def requirement(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> str:
    """A PEP 508 requirement (`setuptools>=77`, `torch==${TORCH_VERSION}`): a build-arg
    reference stands for a version and is checked as one."""
    text = one_line(value, key, error=error)
    try:
        _Requirement(ARG_REF.sub("0", text))
    except InvalidRequirement:
        raise _bad(error, key, value, "a requirement such as 'name>=1.0'") from None
    if text.startswith("-") or any(c.isspace() for c in text.replace(" @ ", "@")):
        raise _bad(error, key, value, "a requirement without options or spaces")
    return text


def wheel_spec(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> str:
    """A `pip wheel` argument: a requirement, a git/https URL, or `./path` in the context."""
    text = one_line(value, key, error=error)
    if text.startswith("./"):
        if not _PATH.fullmatch(text) or ".." in Path(text).parts:
            raise _bad(error, key, value, "a ./path inside the build context")
        return text
    if "://" in text or text.startswith("git+"):
        probe = ARG_REF.sub("https://example.invalid/x", text, count=1)
        probe = ARG_REF.sub("0", probe)
        url(probe.removeprefix("git+"), key, error=error, schemes=GIT_SCHEMES)
        if not _URL_CHARS.fullmatch(text.replace("{", "").replace("}", "")):
            raise _bad(error, key, value, "a URL without spaces or quotes")
        return text
    return requirement(text, key, error=error)


def wheel_glob(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> str:
    """A wheel file glob (`vllm-*g${VLLM_FORK_COMMIT}*.whl`): file-name characters, `*`, `?`
    and build-arg references only, matching inside the wheelhouse."""
    text = _string(value, key, error, "a wheel glob")
    if not _GLOB.fullmatch(ARG_REF.sub("x", text)) or text.startswith("-"):
        raise _bad(error, key, value, "a file glob of letters, digits, '._-+/*?' and ${ARG}")
    if text.startswith("/") or ".." in text.split("/"):  # it matches inside the wheelhouse
        raise _bad(error, key, value, "a glob inside the wheelhouse (no leading '/', no '..')")
    return text


POST_INSTALL_SEPARATOR = " | "


@dataclasses.dataclass(frozen=True, slots=True)
class PostInstall:
    """One `build.post-install` entry: `REQUIREMENT[ | ASSERT[ | ASSERT...]]`."""

    requirement: str  # `name==1.2.3`, `name[extra]==1.2.3` or `name[extra] @ git+URL@<commit>`
    name: str  # its normalised distribution name
    asserts: tuple[str, ...]  # Python statements run in the image after it is installed


def post_install(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> str:
    """A `build.post-install` entry (post_install_entry's grammar), unchanged."""
    post_install_entry(value, key, error=error)
    return str(value)


def post_install_entry(value: object, key: str, *,
                       error: type[GpurlError] = ConfigError) -> PostInstall:
    """A requirement installed after the lock, pinned: `==` one exact version, or a git URL
    at a commit; then its optional asserts, each after ' | '."""
    text = one_line(value, key, error=error)
    requirement, *asserts = (part.strip() for part in text.split(POST_INSTALL_SEPARATOR))
    expected = ("'name==1.2.3' or 'name @ git+https://host/repo.git@<commit>', then optional "
                "' | <assert>'s")
    try:
        parsed = _Requirement(requirement)
    except InvalidRequirement:
        raise _bad(error, key, value, expected) from None
    if parsed.url is not None:
        url(parsed.url.removeprefix("git+"), key, error=error, schemes=GIT_SCHEMES)
        rev = parsed.url.rsplit("@", 1)[-1] if parsed.url.count("@") >= 1 else ""
        if not parsed.url.startswith("git+") or not _COMMIT.fullmatch(rev) \
                or not _URL_CHARS.fullmatch(parsed.url):
            raise _bad(error, key, value, "a git URL at a commit (git+https://...@<sha>)",
                       hint="pin the commit, never a branch or a tag: the image must be "
                            "reproducible")
    else:
        exact = [s for s in parsed.specifier if s.operator in ("==", "===")]
        if len(exact) != 1 or len(parsed.specifier) != 1 or "*" in exact[0].version:
            raise _bad(error, key, value, expected,
                       hint=f"pin one exact version: {parsed.name}==<version>")
    if parsed.marker is not None or any(c.isspace() for c in requirement.replace(" @ ", "@")):
        raise _bad(error, key, value, expected + " (no markers, no options)")
    for i, statement in enumerate(asserts):
        one_line(statement, f"{key} assert {i + 1}", error=error)
    return PostInstall(requirement=requirement, name=re.sub(r"[-_.]+", "-", parsed.name).lower(),
                       asserts=tuple(asserts))


def resource_size(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> str:
    """An iris `--memory`/`--disk` size: digits and a unit (`512GB`, `400G`, `1.5Ti`)."""
    text = _string(value, key, error, "a size")
    if not _SIZE.fullmatch(text):
        raise _bad(error, key, value, "a size like 512GB (digits and a unit, no sign or spaces)")
    return text


_IMAGE_PATH = re.compile(r"(?:/[A-Za-z0-9][A-Za-z0-9._-]*)+")


def image_path(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> str:
    """An absolute directory path inside the image (`/opt/venv`): '/'-separated names of
    letters, digits, '.', '_' and '-', no trailing '/', no '..'."""
    text = _string(value, key, error, "an absolute path")
    if not _IMAGE_PATH.fullmatch(text) or ".." in text.split("/") or text == "/":
        raise _bad(error, key, value, "an absolute path like /opt/venv (letters, digits, "
                   "'._-' between '/', no '..', no trailing '/')")
    return text


def image_reference(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> str:
    """An image reference in the one grammar (imageref.parse_reference)."""
    text = _string(value, key, error, "an image reference")
    try:
        parse_reference(text, bare=True)
    except InvalidReference as exc:
        raise error(f"{key} must be an image reference, not {shown(value)}: {exc.message}",
                    hint=exc.hint) from None
    return text


def _reference_or_none(text: str) -> ImageRef | None:
    """`text` parsed as a bare image reference, or None when it is not one."""
    try:
        return parse_reference(text, bare=True)
    except InvalidReference:
        return None


def repository(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> str:
    """A repository path as image references spell it (`org/image`: lowercase), checked where
    it is configured, not first by the registry or verify-layers."""
    text = _string(value, key, error, "a repository name")
    parsed = _reference_or_none(f"registry.invalid/{text}")
    if parsed is None or parsed.repository != text:
        raise _bad(error, key, value, "a repository name like org/image (lowercase letters, "
                   "digits, '.', '_', '-', components joined by '/')")
    return text


def registry_host(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> str:
    """A registry host[:port] as image references spell it."""
    text = _string(value, key, error, "a registry host")
    parsed = _reference_or_none(f"{text}/x")
    if parsed is None or parsed.host != text:
        raise _bad(error, key, value, "a registry host like ghcr.io or 127.0.0.1:5005")
    return text


def inside_repository(path: Path, root: Path, key: str, *,
                      error: type[GpurlError] = ConfigError) -> str:
    """`path` (relative to `root`, or absolute) resolved with its symlinks stays inside the
    resolved `root`; returns it relative to the root, POSIX-spelled."""
    one_line(str(path), key, error=error)  # a NUL byte or a newline is no path to resolve
    base = root.resolve()
    full = (base / path).resolve()
    try:
        relative = full.relative_to(base).as_posix()
    except ValueError:
        raise error(f"{key} = {shown(str(path))} is outside the build context, the "
                    f"repository {base} (resolved: {full})",
                    hint="it must live inside the repository, symlinks included") from None
    if not _PATH.fullmatch(relative) or relative.startswith("-"):
        raise _bad(error, key, relative, "a path of letters, digits and '._+-/' only")
    return relative


def variable_name(match: re.Match[str]) -> str:
    """The name a VARIABLE match expands."""
    return match.group(1) or match.group(2)


def expand_variables(text: str, known: Mapping[str, str]) -> str:
    """`text` with each VARIABLE that `known` names replaced by its value; any other stays as
    written (a default after `:-` is not applied: an unknown ARG shows as itself)."""
    return VARIABLE.sub(lambda m: known.get(variable_name(m), m.group(0)), text)


def comma_list(text: str) -> tuple[str, ...]:
    """The items of a comma-separated value, each stripped, empty ones dropped."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def source_id(commit: str, diff: str | None = None) -> str:
    """The one spelling of a source id: `commit`, or `commit-dirty-<diff>` for a tree with
    uncommitted tracked edits whose diff hashes to `diff` (12 hex digits)."""
    return f"{commit}-dirty-{diff}" if diff else commit


def source_commit(text: str) -> str | None:
    """The commit of a source id found at the start of `text` (its `-dirty-` part, if any,
    dropped), or None when `text` does not start with one."""
    match = re.match(rf"({_COMMIT.pattern})(?:-dirty-[0-9a-f]{{12}})?(?![0-9A-Za-z_])", text)
    return match.group(1) if match else None


def between(low: int, high: int, what: str) -> Check:
    """A whole number from `low` to `high` (`what` names it in the error)."""

    def run(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise _bad(error, key, value, f"{what} from {low} to {high}")
        return value

    return run


def optional(check: Check) -> Check:
    """`check`, with the empty string allowed (an unset optional value)."""

    def run(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> object:
        return value if value == "" else check(value, key, error=error)

    return run


def each(check: Check) -> Check:
    """`check` over every item of a list value, keyed `key[i]`."""

    def run(value: object, key: str, *, error: type[GpurlError] = ConfigError) -> object:
        items = value if isinstance(value, tuple | list) else (value,)
        for i, item in enumerate(items):
            check(item, f"{key}[{i}]", error=error)
        return value

    return run


# --- byte sizes ------------------------------------------------------------------------------

_DECIMAL = {"": 1, "B": 1, "K": 10**3, "KB": 10**3, "M": 10**6, "MB": 10**6,
            "G": 10**9, "GB": 10**9, "T": 10**12, "TB": 10**12}
_BINARY = {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | int, *, binary_gb: bool = False) -> int:
    """Parse a size into bytes; raise ValueError quoting the input when it is not one."""
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"size {text!r} must not be negative")
        return text
    match = _SIZE_RE.match(text)
    if not match:
        raise ValueError(f"size {text!r} is not a number with an optional unit like 4GB or 500MB")
    number, unit = float(match.group(1)), match.group(2).upper()
    if unit in _BINARY:
        factor = _BINARY[unit]
    elif unit in _DECIMAL:
        factor = _DECIMAL[unit]
        if binary_gb and unit:
            factor = {10**3: 2**10, 10**6: 2**20, 10**9: 2**30, 10**12: 2**40}.get(factor, factor)
    else:
        raise ValueError(f"size {text!r} has an unknown unit {match.group(2)!r}")
    return int(number * factor)


def format_bytes(size: int | None) -> str:
    """Decimal units with two decimals, matching how caps are written ("3.46 GB")."""
    if size is None:
        return "?"
    for unit, factor in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if abs(size) >= factor:
            return f"{size / factor:.2f} {unit}"
    return f"{size} B"


PIN_MARKER = "# gpurl pin:"  # the launcher's pin comment starts so (release/pin.py writes it)
