"""The prebuilt compiled wheels must match what the profile's build installs.

The fast build path installs whatever the wheelhouse holds, so a wheel built for another
fork commit, torch, CUDA or Python would be baked in silently. The expected set is one wheel
per `build.wheel_globs` entry (its `${ARG}`s filled from the Dockerfile ARGs, falling back to
the config): each glob must match exactly one wheel whose tags the target interpreter accepts
(cp3XY, abi3, manylinux up to the target glibc). For the gpu-rl pair the expected names are
derived from the pins as well:

    vllm-{vllm_version}+g{VLLM_FORK_COMMIT}.{CUDA_TAG}-cp312-cp312-linux_x86_64.whl
    flash_attn-{FLASH_ATTN_VERSION}-cp312-cp312-linux_x86_64.whl

(what `pip wheel` writes for the fork checkout and for flash-attn==VERSION); a glob those
names match is that pinned wheel, checked field by field: the fork commit (`g<sha>`, either
spelling a prefix of the other), the flash-attn version, any CUDA or torch label against the
pins. Any other glob (the demo's `gpurl_demo_ext-*.whl`) is checked for tags, .dist-info and
MANIFEST only. Each wheel pattern the Dockerfile installs must match exactly one wheel too.
A wheel's torch ABI is not in its name: rebuild-needed reports a torch change as
wheels+image instead. A MANIFEST lists one wheel per line as `sha256sum` prints it:
`<sha256>  <filename>`.

The cluster's prebuilt path fetches wheels by exact file name (`prebuilt_filenames`), one per
glob: the pinned pair's names above; any other project's as `pip wheel` names a compiled
CPython extension, `{dist}-{version}-cp3XY-cp3XY-linux_{arch}.whl`, its version written in
the glob (`name-1.2.0-*.whl`) or pinned by its wheel spec (`name==1.2.0`, or a `./path`
source whose pyproject.toml declares a static version: the demo's `./examples/demo/ext`).
A name that cannot be derived is a `WheelNameError` naming the config key to set.

A profile's variants are checked together before `generate` writes anything
(`check_variant_wheels`): a wheel location holds one MANIFEST, so one ABI key. A profile
without compiled wheels has none of this: its wheel tasks say so (`require_compiled_wheels`).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.tags import Tag
from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from gpurl_tasks.config import Arch, BuildSettings, Config, TargetSpec
from gpurl_tasks.errors import BuildError, ConfigError, GpurlError
from gpurl_tasks.files import read_text
from gpurl_tasks.plan.model import ProvidedPackage
from gpurl_tasks.plan.target import target_tags
from gpurl_tasks.plan.wheelglobs import glob_project
from gpurl_tasks.values import expand_variables, inside_repository

__all__ = [
    "ABI_KEY_PREFIX",
    "FoundWheel",
    "Mismatch",
    "NoCompiledWheels",
    "WheelCheckError",
    "WheelNameError",
    "WheelPins",
    "WheelSpec",
    "abi_key",
    "build_table",
    "check_abi_key",
    "check_provided",
    "check_variant_wheels",
    "check_wheels",
    "configured_globs",
    "expected_filenames",
    "manifest_abi_key",
    "parse_manifest",
    "pins_from_args",
    "prebuilt_filenames",
    "prebuilt_wheel_names",
    "require_compiled_wheels",
    "spec_versions",
    "target_wheel_tags",
    "wheel_specs",
]

_KW = {"frozen": True, "kw_only": True, "slots": True}
_SHA256 = re.compile(r"[0-9a-f]{64}")
VLLM, FLASH_ATTN = "vllm", "flash-attn"


class WheelCheckError(GpurlError):
    """The wheelhouse or MANIFEST cannot be read at all (as opposed to holding wrong wheels)."""


class WheelNameError(GpurlError):
    """A compiled wheel's exact file name cannot be derived; the message names the key to set."""


class NoCompiledWheels(GpurlError):
    """A wheel task asked of a profile that compiles none: its lock is the whole truth."""


def require_compiled_wheels(config: Config, task: str) -> None:
    """Refuse `task` (a wheel task or flag) for a profile without compiled wheels, saying so,
    instead of failing on a wheel-builder stage or wheelhouse its Dockerfile does not have."""
    if not config.build.compiled_wheels:
        raise NoCompiledWheels(
            f"{task}: profile {config.profile!r}{config.variant.note} has no compiled wheels "
            "(build.wheel-specs and build.wheel-globs are empty): the lock installs every "
            "package, so there is no wheel-builder, wheelhouse or MANIFEST",
            hint="nothing to do for this profile; to compile wheels, set build.wheel-specs and "
                 "build.wheel-globs, then run `invoke generate`")


@dataclasses.dataclass(**_KW)
class WheelPins:
    """What the prebuilt wheels were compiled for."""

    vllm_version: str
    vllm_fork_commit: str
    flash_attn_version: str
    torch_version: str
    cuda_tag: str  # "cu128"
    python: str  # "3.12"
    arch: Arch  # "x86_64", "aarch64"
    glibc: str  # "2.28": the newest manylinux the target accepts
    cuda_arch_list: str = ""  # TORCH_CUDA_ARCH_LIST of the compile, "8.0;9.0"; "" unset

    @property
    def python_tag(self) -> str:
        return "cp" + self.python.replace(".", "")

    @property
    def platform(self) -> str:
        return f"linux_{self.arch}"


def _cuda_from_image(image: str) -> str | None:
    match = re.search(r"cuda:(\d+)\.(\d+)", image)
    return f"cu{match.group(1)}{match.group(2)}" if match else None


def pins_from_args(args: Mapping[str, str], build: BuildSettings, target: TargetSpec) -> WheelPins:
    """Pins from Dockerfile ARG defaults; an ARG the Dockerfile lacks falls back to the config."""
    cuda = args.get("CUDA_TAG") or _cuda_from_image(args.get("BASE_IMAGE", "")) or build.cuda_tag
    return WheelPins(
        vllm_version=args.get("VLLM_VERSION", build.vllm_version),
        vllm_fork_commit=args.get("VLLM_FORK_COMMIT", build.vllm_fork_commit),
        flash_attn_version=args.get("FLASH_ATTN_VERSION", build.flash_attn_version),
        torch_version=args.get("TORCH_VERSION", build.torch_version),
        cuda_tag=cuda,
        python=args.get("PYTHON_VERSION", target.python),
        arch=target.arch,
        glibc=target.glibc,
        cuda_arch_list=args.get("TORCH_CUDA_ARCH_LIST", build.cuda_arch_list),
    )


# The MANIFEST's ABI key line: what the wheels were compiled for, compared before any install.
ABI_KEY_PREFIX = "# gpurl-abi "
# (key word, WheelPins field or property, the build ARG that carries it in the wheel-builder)
ABI_FIELDS = (("fork", "vllm_fork_commit", "VLLM_FORK_COMMIT"),
              ("flash-attn", "flash_attn_version", "FLASH_ATTN_VERSION"),
              ("torch", "torch_version", "TORCH_VERSION"),
              ("cuda", "cuda_tag", None),
              ("py", "python_tag", None),
              ("platform", "platform", None),
              ("arch-list", "cuda_arch_list", "TORCH_CUDA_ARCH_LIST"))


def abi_key(pins: WheelPins, *, refs: Mapping[str, str] | None = None) -> str:
    """The ABI key of the compiled wheels: `fork=… flash-attn=… torch=… cuda=… py=cp312
    platform=linux_x86_64 arch-list=8.0;9.0` (an unset pin reads `-`). `refs` {field: text}
    stands in for a field's value (the wheel-builder writes `${ARG}`s, so the key says what
    the compile was given)."""
    words = []
    for word, field, _arg in ABI_FIELDS:
        value = (refs or {}).get(field) or str(getattr(pins, field)) or "-"
        words.append(f"{word}={value}")
    return " ".join(words)


def manifest_abi_key(text: str) -> str | None:
    """The ABI key a MANIFEST's text records (its `# gpurl-abi ` line), None without one."""
    for line in text.splitlines():
        if line.startswith(ABI_KEY_PREFIX):
            return line[len(ABI_KEY_PREFIX):].strip()
    return None


def check_abi_key(pins: WheelPins, found: str | None) -> Mismatch | None:
    """A MANIFEST whose ABI key is not the pins' (or that has none), as one mismatch showing
    both keys."""
    expected = abi_key(pins)
    if found == expected:
        return None
    return Mismatch(project="MANIFEST", expected=expected, found=found or "no ABI key line",
                    problem="the wheels' ABI key differs (rebuild or refetch the wheels)")


def _tail(pins: WheelPins) -> str:
    """The tags `pip wheel` writes for a compiled CPython extension built on the target."""
    return f"{pins.python_tag}-{pins.python_tag}-{pins.platform}.whl"


def expected_filenames(pins: WheelPins) -> dict[str, str]:
    """{project: the wheel filename the pins call for}, in the documented convention."""
    tail = _tail(pins)
    return {
        VLLM: f"vllm-{pins.vllm_version}+g{pins.vllm_fork_commit}.{pins.cuda_tag}-{tail}",
        FLASH_ATTN: f"flash_attn-{pins.flash_attn_version}-{tail}",
    }


def target_wheel_tags(pins: WheelPins) -> frozenset[Tag]:
    """Every tag a CPython of the pinned version on the target's Linux would install."""
    return frozenset(target_tags(TargetSpec(python=pins.python, os="linux", arch=pins.arch,
                                            glibc=pins.glibc)))


@dataclasses.dataclass(**_KW)
class FoundWheel:
    """A wheel present in a wheelhouse or listed in a MANIFEST."""

    filename: str
    sha256: str | None = None  # of the file when it is local
    manifest_sha256: str | None = None  # what the MANIFEST claims
    in_manifest: bool | None = None  # None: no MANIFEST to compare with
    metadata_version: str | None = None  # from the wheel's own .dist-info, when local
    metadata_tags: tuple[str, ...] = ()
    present: bool = True  # False: listed in the wheelhouse's MANIFEST, but no such file


@dataclasses.dataclass(**_KW)
class Mismatch:
    """One problem, printed as one line with what was expected and what was found."""

    project: str
    expected: str
    found: str
    problem: str

    def line(self) -> str:
        return f"{self.project}: {self.problem}: expected {self.expected}, found {self.found}"

    def to_json(self) -> dict[str, str]:
        return dataclasses.asdict(self)


def _commit_matches(label_commit: str, pinned: str) -> bool:
    a, b = label_commit.lower(), pinned.lower()
    return len(min(a, b, key=len)) >= 7 and (a.startswith(b) or b.startswith(a))


def _label_problems(project: str, version: Version, pins: WheelPins) -> list[str]:
    """What the version (and its local label, when the build wrote one) says against the pins.

    A `cuNNN` or `torchX.Y` label is optional (pip wheel of flash-attn writes none, vLLM only
    for a non-default CUDA) but must agree with the pins when present.
    """
    local = version.local or ""
    problems: list[str] = []
    cuda = re.search(r"(?:^|\.)(cu\d{3,})", local)
    found_cuda = cuda.group(1) if cuda else None
    if found_cuda is not None and found_cuda != pins.cuda_tag:
        problems.append(f"built for {found_cuda}, not {pins.cuda_tag}")
    if project == VLLM:
        parts = local.split(".") if local else []
        commits = [p[1:] for p in parts if re.fullmatch(r"g[0-9a-f]{7,40}", p)]
        if not commits:
            problems.append(f"no fork commit (g<sha>) in the local version label {local!r}")
        elif not any(_commit_matches(c, pins.vllm_fork_commit) for c in commits):
            problems.append(f"fork commit {commits[0]} is not {pins.vllm_fork_commit}")
    else:
        if version.public != pins.flash_attn_version:
            problems.append(f"version {version.public} is not {pins.flash_attn_version}")
        torch = re.search(r"torch(\d+(?:\.\d+)*)", local)
        if torch is not None and not (pins.torch_version + ".").startswith(torch.group(1) + "."):
            problems.append(f"built for torch {torch.group(1)}, not {pins.torch_version}")
    return problems


def _check_one(spec: WheelSpec, wheel: FoundWheel, version: Version, tags: frozenset[Tag],
               pins: WheelPins) -> list[Mismatch]:
    """Label checks for the pinned pair; tags, .dist-info and MANIFEST for every wheel."""
    project, expected = spec.label, spec.expected
    out = ([Mismatch(project=project, expected=expected, found=wheel.filename, problem=p)
            for p in _label_problems(project, version, pins)] if spec.pinned else [])
    if not tags & target_wheel_tags(pins):
        found_tags = ".".join(sorted(str(t) for t in tags))
        out.append(Mismatch(project=project, expected=expected, found=wheel.filename,
                            problem=f"tag {found_tags} does not install on {pins.python_tag} "
                                    f"{pins.platform}"))
    if wheel.metadata_version is not None and wheel.metadata_version != str(version):
        out.append(Mismatch(project=project, expected=str(version), found=wheel.metadata_version,
                            problem=f"{wheel.filename} was renamed: its .dist-info version "
                                    "differs from its filename"))
    if wheel.metadata_tags and not {str(t) for t in tags} <= set(wheel.metadata_tags):
        out.append(Mismatch(project=project, expected=".".join(sorted(str(t) for t in tags)),
                            found=".".join(wheel.metadata_tags),
                            problem=f"{wheel.filename} was renamed: its WHEEL tags differ "
                                    "from its filename"))
    if wheel.manifest_sha256 is not None and not _SHA256.fullmatch(wheel.manifest_sha256):
        out.append(Mismatch(project=project, expected="a 64-hex-digit sha256",
                            found=wheel.manifest_sha256, problem="MANIFEST sha256 is malformed"))
    elif wheel.sha256 and wheel.manifest_sha256 and wheel.sha256 != wheel.manifest_sha256:
        out.append(Mismatch(project=project, expected=wheel.manifest_sha256, found=wheel.sha256,
                            problem=f"{wheel.filename} sha256 differs from the MANIFEST"))
    if wheel.in_manifest is False:
        out.append(Mismatch(project=project, expected=f"a MANIFEST line for {wheel.filename}",
                            found="none", problem="wheel is not listed in the MANIFEST"))
    return out


@dataclasses.dataclass(**_KW)
class WheelSpec:
    """One wheel the build installs: its project, install glob and what to print as expected.

    `pinned` specs are the vLLM-fork/flash-attn pair, checked field by field against the pins;
    any other spec (a profile's own compiled wheel) is checked for tags, .dist-info and
    MANIFEST only. A spec whose glob starts with a wildcard has no project and claims wheels
    by glob alone.
    """

    project: str | None
    glob: str | None
    expected: str
    pinned: bool = False

    @property
    def label(self) -> str:
        return self.project or "?"


def wheel_specs(pins: WheelPins, expected_globs: Sequence[str] | None) -> tuple[WheelSpec, ...]:
    """One spec per expected glob; None means the gpu-rl pair, identified by project alone.

    A glob that the pins' vLLM or flash-attn filename matches is that pinned wheel, so the
    gpu-rl profile keeps every fork-commit and version check; other globs are generic.
    """
    names = expected_filenames(pins)
    if expected_globs is None:
        return tuple(WheelSpec(project=p, glob=None, expected=n, pinned=True)
                     for p, n in names.items())
    specs = []
    for pattern in expected_globs:
        pinned = next((p for p, n in names.items() if fnmatch.fnmatchcase(n, pattern)), None)
        if pinned is not None:
            specs.append(WheelSpec(project=pinned, glob=pattern, expected=names[pinned],
                                   pinned=True))
        else:
            specs.append(WheelSpec(project=glob_project(pattern), glob=pattern,
                                   expected=pattern))
    return tuple(specs)


def _claim(specs: Sequence[WheelSpec], project: str, filename: str) -> WheelSpec | None:
    """The spec a wheel belongs to: same project first, else the first glob it matches."""
    return (next((s for s in specs if s.project == project), None)
            or next((s for s in specs if s.glob and fnmatch.fnmatchcase(filename, s.glob)),
                    None))


def _pattern_problems(names: Sequence[str], patterns: Sequence[tuple[str, str]],
                      specs: Sequence[WheelSpec], pins: WheelPins) -> list[Mismatch]:
    """Each install pattern (with who asked for it) must match exactly one wheel."""
    expected = expected_filenames(pins)
    out = []
    for pattern, owner in patterns:
        hits = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if len(hits) == 1:
            continue
        project = next((s.label for s in specs if s.glob == pattern), None) or next(
            (p for p, n in expected.items() if fnmatch.fnmatchcase(n, pattern)), "?")
        out.append(Mismatch(
            project=project, expected=f"one wheel matching {pattern}",
            found=", ".join(hits) or "none",
            problem=f"{owner} matches " + ("no wheel" if not hits else "several wheels")))
    return out


def check_wheels(pins: WheelPins, found: Sequence[FoundWheel], globs: Sequence[str] = (),
                 *, expected_globs: Sequence[str] | None = None) -> tuple[Mismatch, ...]:
    """Every way `found` fails the expected wheels and the Dockerfile's install patterns `globs`.

    `expected_globs` (a profile's `build.wheel_globs`, ARGs substituted) is the expected set,
    one wheel per glob; None keeps the gpu-rl pair derived from the pins alone.
    """
    specs = wheel_specs(pins, expected_globs)
    mismatches = [Mismatch(project="?", expected=f"the file {w.filename}", found="none",
                           problem="listed in the MANIFEST but absent from the wheelhouse")
                  for w in found if not w.present]
    found = [w for w in found if w.present]
    patterns = [(g, "the Dockerfile's install pattern") for g in globs]
    patterns += [(s.glob, "the configured wheel glob") for s in specs
                 if s.glob is not None and s.glob not in globs]
    mismatches += _pattern_problems([w.filename for w in found], patterns, specs, pins)
    seen: dict[WheelSpec, int] = dict.fromkeys(specs, 0)
    for wheel in sorted(found, key=lambda w: w.filename):
        try:
            name, version, _build, tags = parse_wheel_filename(wheel.filename)
        except (InvalidWheelFilename, InvalidVersion) as exc:
            mismatches.append(Mismatch(project="?", expected="a valid wheel filename",
                                       found=wheel.filename, problem=f"unparseable ({exc})"))
            continue
        project = str(canonicalize_name(name))
        spec = _claim(specs, project, wheel.filename)
        if spec is None:
            mismatches.append(Mismatch(project=project,
                                       expected=" or ".join(s.expected for s in specs),
                                       found=wheel.filename, problem="unexpected wheel"))
            continue
        seen[spec] += 1
        mismatches += _check_one(spec, wheel, version, frozenset(tags), pins)
    for spec, count in seen.items():
        if count == 0:
            mismatches.append(Mismatch(project=spec.label, expected=spec.expected,
                                       found="nothing", problem="missing"))
        elif count > 1:
            mismatches.append(Mismatch(project=spec.label, expected=f"one {spec.label} wheel",
                                       found=f"{count}",
                                       problem="several wheels of one project in the wheelhouse"))
    return tuple(mismatches)


def parse_manifest(text: str, *, source: str) -> dict[str, str]:
    """`sha256sum` output -> {filename: sha256}; a malformed line is an error naming it."""
    entries: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(maxsplit=1)
        if len(parts) != 2:
            raise WheelCheckError(f"{source}:{number}: expected '<sha256>  <filename>', "
                                  f"got {raw!r}", hint="write the MANIFEST with sha256sum *.whl")
        digest, filename = parts[0].lower(), parts[1].lstrip("*").strip()
        entries[Path(filename).name] = digest
    return entries


def _pin_args(pins: WheelPins) -> dict[str, str]:
    return {"VLLM_VERSION": pins.vllm_version, "VLLM_FORK_COMMIT": pins.vllm_fork_commit,
            "FLASH_ATTN_VERSION": pins.flash_attn_version, "TORCH_VERSION": pins.torch_version,
            "CUDA_TAG": pins.cuda_tag, "PYTHON_VERSION": pins.python}


def configured_globs(build: BuildSettings, args: Mapping[str, str],
                     pins: WheelPins) -> tuple[str, ...]:
    """`build.wheel_globs` with `${ARG}` filled from the Dockerfile ARGs, else from the pins.

    An ARG neither knows stays as written, so the glob matches nothing and says so.
    """
    known = {**_pin_args(pins), **args}
    return tuple(expand_variables(g, known) for g in build.wheel_globs)




# What each name of the pinned pair is made of: (WheelPins field, the config key that sets it).
_PAIR_PINS = {VLLM: (("vllm_version", "build.vllm-version"),
                     ("vllm_fork_commit", "build.vllm-fork-commit"),
                     ("cuda_tag", "build.cuda-tag")),
              FLASH_ATTN: (("flash_attn_version", "build.flash-attn-version"),)}


def _static_version(pyproject: str) -> tuple[str, str] | None:
    """(project, version) a source's pyproject.toml declares statically, else None."""
    try:
        project = tomllib.loads(pyproject).get("project", {})
    except tomllib.TOMLDecodeError:
        return None
    name, version = project.get("name"), project.get("version")
    if (not isinstance(name, str) or not isinstance(version, str)
            or "version" in project.get("dynamic", ())):
        return None
    return str(canonicalize_name(name)), version


def spec_versions(specs: Sequence[str], pins: WheelPins,
                  sources: Mapping[str, str]) -> dict[str, str]:
    """{project: version} the wheel specs fix: an exact `name==version` requirement (its
    `${ARG}`s filled from the pins) or a `./path` source whose pyproject.toml (`sources`:
    spec -> that file's text) declares a static version. Other specs (a git URL) fix none."""
    known = _pin_args(pins)
    out: dict[str, str] = {}
    for raw in specs:
        if raw in sources:
            found = _static_version(sources[raw])
            if found is not None:
                out[found[0]] = found[1]
            continue
        if "://" in raw or raw.startswith(("git+", "./")):
            continue  # a URL or a source without a readable pyproject.toml: no version
        try:
            requirement = Requirement(expand_variables(raw, known))
        except InvalidRequirement:
            continue
        exact = [s.version for s in requirement.specifier if s.operator in ("==", "===")]
        if len(exact) == 1 and "*" not in exact[0]:
            out[str(canonicalize_name(requirement.name))] = exact[0]
    return out


def _glob_version(pattern: str) -> str | None:
    """The version a glob spells out literally (`name-1.2.0-*.whl` -> 1.2.0), else None."""
    parts = pattern.rsplit("/", 1)[-1].split("-")
    if len(parts) < 3 or not parts[1] or any(c in parts[1] for c in "*?[$"):
        return None
    return parts[1]


def _generic_filename(spec: WheelSpec, pins: WheelPins, versions: Mapping[str, str]) -> str:
    """A profile's own compiled wheel: `{dist}-{version}-{tail}`, version from its glob or its
    wheel spec; the name must be one the glob accepts."""
    glob = spec.glob or ""
    if spec.project is None:
        raise WheelNameError(f"build.wheel-globs entry {glob!r} does not start with its "
                             "project's name",
                             hint="start the glob with the project's wheel name, e.g. 'mypkg-*.whl'")
    version, key = _glob_version(glob), "build.wheel-globs"
    if version is None:
        version, key = versions.get(spec.project), "build.wheel-specs"
    if version is None:
        raise WheelNameError(
            f"nothing pins the version of {spec.project} (wheel glob {glob!r}): write it into "
            f"build.wheel-globs ('{glob.split('-', 1)[0]}-<version>-*.whl'), or pin it in "
            f"build.wheel-specs ('{spec.project}==<version>', or a ./path source whose "
            "pyproject.toml declares a static version)",
            hint="set the version in one of the two keys the message names")
    try:
        version = str(Version(version))
    except InvalidVersion:
        raise WheelNameError(f"{spec.project}'s version {version!r} (from {key}) is not a "
                             "PEP 440 version", hint="write a PEP 440 version there, e.g. 1.2.3") from None
    name = f"{spec.project.replace('-', '_')}-{version}-{_tail(pins)}"
    if not fnmatch.fnmatchcase(name, glob):
        raise WheelNameError(f"build.wheel-globs entry {glob!r} does not accept {name}, the "
                             "name `pip wheel` gives the pinned build",
                             hint=f"write the glob so it matches {name}")
    return name


def _pair_filename(spec: WheelSpec, pins: WheelPins) -> str:
    """The vLLM-fork or flash-attn wheel's name (expected_filenames), refused when a pin it is
    made of is empty or splits it (a '-' in cuda-tag = "cu-128" reads as a build tag)."""
    keys = [key for _, key in _PAIR_PINS[spec.label]]
    empty = [key for field, key in _PAIR_PINS[spec.label] if not getattr(pins, field)]
    if empty:
        raise WheelNameError(f"the {spec.label} wheel (glob {spec.glob!r}) is named after "
                             f"{empty[0]}, which is empty: set it",
                             hint=f"set {empty[0]} (docs/config.md, the wheels table)")
    try:
        _, _, build_tag, tags = parse_wheel_filename(spec.expected)
        split = bool(build_tag) or Tag(pins.python_tag, pins.python_tag, pins.platform) not in tags
    except (InvalidWheelFilename, InvalidVersion):
        split = True
    if split:
        raise WheelNameError(f"the {spec.label} wheel's derived name {spec.expected!r} is "
                             f"malformed: check {', '.join(keys)} (no '-' in a pin)",
                             hint=f"set {', '.join(keys)} without a '-' in any of them")
    return spec.expected


def prebuilt_filenames(pins: WheelPins, globs: Sequence[str],
                       versions: Mapping[str, str]) -> tuple[str, ...]:
    """The exact file names of the compiled wheels, one per glob (`configured_globs`), sorted;
    empty for a profile without compiled wheels. `versions` is what the wheel specs pin
    (`spec_versions`). Raises WheelNameError where a name cannot be derived (an empty pin, a
    glob nothing pins), never returns a malformed name."""
    return tuple(sorted({_pair_filename(s, pins) if s.pinned else _generic_filename(s, pins, versions)
                         for s in wheel_specs(pins, globs)}))


def _variant_names(configs: Sequence[Config]) -> str:
    return ", ".join(repr(c.variant.name) for c in configs)


def build_table(config: Config) -> str:
    """The table a variant's build pins are set in (the profile's for its first variant)."""
    variant = f".variants.{config.variant.name}" if config.variant.declared and \
        config.variant != config.variants[0] else ""
    return f"[tool.gpurl.profiles.{config.profile}{variant}.build]"


def _arch_list_problem(compiled: Sequence[Config]) -> ConfigError | None:
    no_arch = [c for c in compiled if not c.build.cuda_arch_list]
    if not no_arch:
        return None
    return ConfigError(
        f"profile {no_arch[0].profile!r}: variant(s) {_variant_names(no_arch)} compile wheels but "
        "build.cuda-arch-list is empty (the MANIFEST would record arch-list=-)",
        hint=f"set cuda-arch-list (the GPUs' compute capabilities, like \"8.0;9.0\") in "
             f"{build_table(no_arch[0])}")


def _location_problem(compiled: Sequence[Config], key: str) -> ConfigError | None:
    """Variants of different ABI keys sharing build.<key> (one location, one MANIFEST)."""
    abi = {c.variant.name: abi_key(pins_from_args({}, c.build, c.target)) for c in compiled}
    shared: dict[str, list[Config]] = {}
    for c in compiled:
        value = getattr(c.build, key.replace("-", "_"))
        where = (value.relative_to(c.root).as_posix() if isinstance(value, Path)
                 and value.is_relative_to(c.root) else str(value))
        if where:
            shared.setdefault(where, []).append(c)
    for where, users in shared.items():
        first = abi[users[0].variant.name]
        other = next((c for c in users if abi[c.variant.name] != first), None)
        if other is not None:
            return ConfigError(
                f"profile {other.profile!r}: variants {_variant_names(users)} share build.{key} "
                f"{where} but their compiled wheels' ABI keys differ ({first} vs "
                f"{abi[other.variant.name]}): one location holds one MANIFEST, so at most one "
                "variant's wheels could pass",
                hint=f"give variant {other.variant.name!r} its own {key} in {build_table(other)}")
    return None


def _fork_problem(compiled: Sequence[Config]) -> ConfigError | None:
    """A fork commit without its vLLM version, or one fork commit as two versions."""
    unversioned = [c for c in compiled if c.build.vllm_fork_commit and not c.build.vllm_version]
    if unversioned:
        return ConfigError(
            f"profile {unversioned[0].profile!r}: variant(s) {_variant_names(unversioned)} compile "
            f"the vLLM fork at {unversioned[0].build.vllm_fork_commit} but build.vllm-version is "
            "empty (the wheel's name and the lock check need the version that commit builds)",
            hint=f"set vllm-version in {build_table(unversioned[0])}")
    forks: dict[tuple[str, str], list[Config]] = {}
    for c in compiled:
        if c.build.vllm_fork_commit:
            forks.setdefault((c.build.vllm_fork_repo, c.build.vllm_fork_commit), []).append(c)
    for (repo, commit), users in forks.items():
        versions = sorted({c.build.vllm_version for c in users})
        if len(versions) > 1:
            return ConfigError(
                f"profile {users[0].profile!r}: variants {_variant_names(users)} pin one vLLM fork "
                f"commit (build.vllm-fork-repo@vllm-fork-commit {repo}@{commit}) as different "
                f"build.vllm-version values ({', '.join(map(repr, versions))}): one commit "
                "builds one version",
                hint="set vllm-version to the version that commit builds, the same in "
                     + " and ".join(dict.fromkeys(build_table(c) for c in users))
                     + " (or give each version its own vllm-fork-commit)")
    return None


def check_variant_wheels(configs: Sequence[Config]) -> None:
    """What a profile's variants' compiled-wheel config must agree on, from the config alone
    (`generate` refuses before it writes anything): each variant that compiles wheels names its
    arch list; a wheel location (build.wheelhouse, build.wheel-base-url) holds one MANIFEST, so
    variants of different ABI keys must not share one; a fork commit names its vLLM version,
    and one fork commit is one vLLM version. Raises the first problem as a ConfigError naming
    the variants and keys."""
    compiled = [c for c in configs if c.build.compiled_wheels]
    for problem in (_arch_list_problem(compiled), _location_problem(compiled, "wheelhouse"),
                    _location_problem(compiled, "wheel-base-url"), _fork_problem(compiled)):
        if problem is not None:
            raise problem


def check_provided(provided: Sequence[ProvidedPackage], pins: WheelPins,
                   globs: Sequence[str]) -> tuple[list[str], list[str]]:
    """(lines saying lock vs compiled version, problems) for every provided package whose
    compiled version the pins name (the gpu-rl pair): the compiled wheel must satisfy every
    specifier the lock's dependents place on it, or the image breaks what the lock promised."""
    names = expected_filenames(pins)
    expected_by_glob = {glob_project(g) for g in globs}
    lines: list[str] = []
    problems: list[str] = []
    for package in provided:
        filename = names.get(package.name)
        if filename is None or package.name not in expected_by_glob:
            lines.append(f"{package.name}: lock {package.version}, compiled wheel from "
                         f"{', '.join(g for g in globs if glob_project(g) == package.name)} "
                         "(its version is checked by check-wheels and the image's assert)")
            continue
        compiled = parse_wheel_filename(filename)[1]
        lines.append(f"{package.name}: lock {package.version}, compiled {compiled}")
        for dependent, specifier in package.requirements:
            if not SpecifierSet(specifier).contains(compiled, prereleases=True):
                problems.append(f"{package.name} {compiled} (compiled) does not satisfy "
                                f"{dependent}'s requirement {package.name}{specifier}")
    return lines, problems


def _source_pyprojects(config: Config) -> dict[str, str]:
    """{`./path` wheel spec: its pyproject.toml text} for each one that has the file."""
    texts = {}
    for spec in config.build.wheel_specs:
        if spec.startswith("./"):
            path = config.root / spec[2:] / "pyproject.toml"
            inside_repository(path, config.root, "build.wheel-specs", error=BuildError)
            if path.is_file():
                texts[spec] = read_text(path, what="wheel source pyproject.toml", error=BuildError)
    return texts


def prebuilt_wheel_names(config: Config) -> tuple[str, ...]:
    """File names of the compiled wheels the prebuilt path fetches (sorted; none for a profile
    without compiled wheels): one per `build.wheel-globs` entry.

    One derivation for the whole tool (wheels.prebuilt_filenames over the names
    wheels.expected_filenames gives the pinned pair): the names the Dockerfile's install globs
    accept, so a bump of a pinned input asks for different files. A name that cannot be derived
    is refused in one line naming the profile, variant and key to set.
    """
    build = config.build
    pins = pins_from_args({}, build, config.target)  # the ARG defaults are the config's
    try:
        return prebuilt_filenames(pins, configured_globs(build, {}, pins),
                                  spec_versions(build.wheel_specs, pins, _source_pyprojects(config)))
    except WheelNameError as exc:
        raise BuildError(f"cannot name the prebuilt wheels of profile {config.profile!r}"
                         f"{config.variant.note}: {exc.message}",
                         hint="set the key it names in [tool.gpurl] (docs/config.md), then "
                              "`invoke generate`") from None
