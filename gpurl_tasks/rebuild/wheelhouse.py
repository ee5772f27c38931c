"""Read prebuilt wheels where they are (a wheelhouse directory, a MANIFEST file or its URL) and
check them against the pins (`dockerfile.wheels` holds the pure rules).

The edge of the wheel check: file hashing, each wheel's own .dist-info read from its zip, and
a MANIFEST fetched over HTTP.
"""

from __future__ import annotations

import dataclasses
import zipfile
import zlib
from email.parser import HeaderParser
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx

from gpurl_tasks.config import Config
from gpurl_tasks.dockerfile.inputs import parse_dockerfile_inputs
from gpurl_tasks.dockerfile.wheels import (
    FoundWheel,
    Mismatch,
    WheelCheckError,
    check_abi_key,
    check_wheels,
    configured_globs,
    manifest_abi_key,
    parse_manifest,
    pins_from_args,
    require_compiled_wheels,
    wheel_specs,
)
from gpurl_tasks.errors import ExitCode, Unreachable, unreachable_hint
from gpurl_tasks.files import read_text, sha256_of

__all__ = ["WheelReport", "check_source", "read_manifest_keyed",
           "read_wheelhouse", "redact_url"]


class ManifestUnreachable(WheelCheckError, Unreachable):
    """The MANIFEST's host did not answer from this machine."""


def _dist_info(path: Path) -> tuple[str | None, tuple[str, ...]]:
    """(Version from METADATA, Tag lines from WHEEL) of a wheel file, read from its zip."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            meta = next((n for n in names if n.endswith(".dist-info/METADATA")), None)
            wheel = next((n for n in names if n.endswith(".dist-info/WHEEL")), None)
            version = (HeaderParser().parsestr(zf.read(meta).decode()).get("Version")
                       if meta else None)
            tags = tuple(sorted(
                line.split(":", 1)[1].strip() for line in zf.read(wheel).decode().splitlines()
                if line.startswith("Tag:"))) if wheel else ()
    # a damaged zip shows as any of these (a bad CRC, an unknown method, encryption, truncation)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError, RuntimeError,
            zlib.error) as exc:
        raise WheelCheckError(f"{path} is not a readable wheel: {exc}",
                              hint="run `invoke build-wheels` to write the wheelhouse again") from None
    return version, tags


def read_wheelhouse(directory: Path) -> list[FoundWheel]:
    """The wheels in `directory` with their sha256 and .dist-info; MANIFEST checked if present."""
    if not directory.is_dir():
        raise WheelCheckError(f"wheelhouse {directory} is not a directory",
                              hint="pass a directory of wheels, a MANIFEST file or its URL")
    manifest_path = directory / "MANIFEST"
    manifest = (parse_manifest(read_text(manifest_path, what="MANIFEST", error=WheelCheckError),
                               source=str(manifest_path))
                if manifest_path.is_file() else None)
    found = []
    for path in sorted(directory.glob("*.whl")):
        version, tags = _dist_info(path)
        found.append(FoundWheel(
            filename=path.name, sha256=sha256_of(path),
            manifest_sha256=manifest.get(path.name) if manifest is not None else None,
            in_manifest=(path.name in manifest) if manifest is not None else None,
            metadata_version=version, metadata_tags=tags))
    present = {w.filename for w in found}
    found += [FoundWheel(filename=name, manifest_sha256=digest, in_manifest=True, present=False)
              for name, digest in sorted((manifest or {}).items()) if name not in present]
    return found


def redact_url(url: str) -> str:
    """The URL without credentials or query (either may carry a token): safe to print."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def read_manifest_keyed(location: str, *,
                        timeout: float = 30.0) -> tuple[list[FoundWheel], str | None]:
    """(The wheels a MANIFEST lists, the ABI key it records or None), from a local file or an
    http(s) URL, read once."""
    if location.startswith(("http://", "https://")):
        url = location if not location.endswith("/") else location + "MANIFEST"
        shown = redact_url(url)
        try:
            response = httpx.get(url, timeout=timeout, follow_redirects=True)
        except httpx.TransportError as exc:
            host = urlsplit(url).hostname or url
            raise ManifestUnreachable(f"cannot reach {host} from this machine to fetch {shown} "
                                      f"({type(exc).__name__})", host=host,
                                      hint=unreachable_hint(host)) from None
        except httpx.HTTPError as exc:
            raise WheelCheckError(f"cannot fetch {shown}: {type(exc).__name__}",
                                  hint="check build.wheel-base-url and that the "
                                       "MANIFEST is published there") from None
        if response.status_code != 200:
            raise WheelCheckError(f"{shown} answered HTTP {response.status_code}",
                                  hint="check the wheel base URL and that MANIFEST is published")
        text, source = response.text, shown
    else:
        path = Path(location)
        text = read_text(path, what="MANIFEST", error=WheelCheckError)
        source = str(path)
    entries = parse_manifest(text, source=source)
    return ([FoundWheel(filename=name, manifest_sha256=digest) for name, digest in entries.items()],
            manifest_abi_key(text))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class WheelReport:
    """What check-wheels prints: the expected names, what was found, every mismatch."""

    source: str
    expected: dict[str, str]
    found: tuple[str, ...]
    mismatches: tuple[Mismatch, ...]
    profile: str = ""  # the profile the wheels are for, named in the fix

    def lines(self) -> list[str]:
        """One line per expected wheel (ok, or its problems), then any other problem, then
        the fix: each wheel once, and what to run."""
        body, failed = [], 0
        for label, pattern in self.expected.items():
            own = [m for m in self.mismatches if m.project == label]
            if any(m.problem == "missing" for m in own):  # a missing wheel matches no pattern
                own = [m for m in own if m.problem == "missing"]
            failed += bool(own)
            body.append(f"  {label}: " + ("; ".join(f"{m.problem}: expected {m.expected}, "
                                                   f"found {m.found}" for m in own)
                                         if own else f"ok ({pattern})"))
        others = [m for m in self.mismatches if m.project not in self.expected]
        body += [f"  {m.line()}" for m in others]
        head = f"wheels in {self.source}: " + (
            f"{failed + len(others)} problem(s)" if self.mismatches else "OK")
        if not self.mismatches:
            return [head, *body]
        profile = f" --profile {self.profile}" if self.profile else ""
        return [head, *body, f"  fix: `invoke build-wheels{profile}` builds them into the "
                "wheelhouse and checks them again (publish them with their MANIFEST)"]

    @property
    def exit_code(self) -> int:
        return ExitCode.CHECK_FAILED if self.mismatches else ExitCode.OK

    def human(self) -> str:
        return "\n".join(self.lines())

    def to_json(self) -> dict[str, object]:
        return {"ok": not self.mismatches, "source": self.source, "expected": self.expected,
                "found": list(self.found), "mismatches": [m.to_json() for m in self.mismatches]}


def check_source(config: Config, source: str | None) -> WheelReport:
    """Check a wheelhouse directory, MANIFEST file or URL against the profile's wheel globs.

    The expected set is one wheel per `build.wheel_globs` entry (pins from the working-tree
    Dockerfile's ARGs); the Dockerfile's own install patterns must each match one wheel too.
    """
    require_compiled_wheels(config, "check-wheels")
    text = read_text(config.build.dockerfile, what="Dockerfile", error=WheelCheckError,
                     missing_hint="run invoke generate first")
    inputs = parse_dockerfile_inputs(text)
    pins = pins_from_args(inputs.effective_args, config.build, config.target)
    expected = configured_globs(config.build, inputs.effective_args, pins)
    where = source or str(config.build.wheelhouse)
    if where.startswith(("http://", "https://")) or Path(where).is_file():
        found, key = read_manifest_keyed(where)
        found = [dataclasses.replace(w, in_manifest=True) for w in found]
    else:
        found = read_wheelhouse(Path(where))
        manifest = Path(where) / "MANIFEST"
        key = (manifest_abi_key(read_text(manifest, what="MANIFEST", error=WheelCheckError))
               if manifest.is_file() else None)
    shown = redact_url(where) if where.startswith(("http://", "https://")) else where
    mismatches = check_wheels(pins, found, inputs.wheel_globs, expected_globs=expected)
    has_manifest = key is not None or any(w.in_manifest is not None for w in found)
    if has_manifest and expected and (abi := check_abi_key(pins, key)) is not None:
        mismatches = (abi, *mismatches)
    return WheelReport(source=shown, profile=config.profile,
                       expected={s.label: s.expected for s in wheel_specs(pins, expected)},
                       found=tuple(w.filename for w in found if w.present),
                       mismatches=mismatches)
