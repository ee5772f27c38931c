"""What `generate` checks against the lock before it writes a file: a Dockerfile that passes
these cannot fail its last RUNs for a reason the lock already tells.

- the build asserts import only modules of distributions the variant installs (its closure,
  its local packages, the compiled wheels, harbor);
- the torch the wheel-builder compiles against is the lock's torch, version and CUDA label
  (the compiled wheels must match the installed torch's ABI);
- the launcher's environment python (`RL_PYTHON`), where it names one, is in the image's
  environment (build.venv): a launcher that runs another path fails every task;
- (the type of) a local package copied where the lock records it: `generate` resolves the
  path sources on this machine, since that needs the filesystem.

Pure: nothing here reads a file or resolves a path.
"""

from __future__ import annotations

import ast
import dataclasses
import sys
from collections.abc import Iterable, Mapping

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from gpurl_tasks.config import BuildSettings
from gpurl_tasks.dockerfile.model import DockerfileError
from gpurl_tasks.plan.model import Plan

__all__ = [
    "KNOWN_IMPORT_NAMES",
    "LocalCopy",
    "PinMismatch",
    "PinMismatchError",
    "assert_modules",
    "check_asserts",
    "check_launcher_environment",
    "check_torch",
    "installed_distributions",
    "torch_pin_mismatches",
]

# Modules whose distribution has another name (a config's build.import-names adds more).
KNOWN_IMPORT_NAMES: Mapping[str, tuple[str, ...]] = {
    "PIL": ("pillow",),
    "yaml": ("pyyaml",),
    "cv2": ("opencv-python", "opencv-python-headless"),
    "sklearn": ("scikit-learn",),
    "flash_attn_2_cuda": ("flash-attn",),
    "megatron": ("megatron-core", "megatron-bridge"),
    "dateutil": ("python-dateutil",),
    "attr": ("attrs",),
    "jwt": ("pyjwt",),
    "bs4": ("beautifulsoup4",),
    "google": ("protobuf",),
}


def assert_modules(statement: str) -> tuple[str, ...]:
    """The top-level modules an assert imports (`import a.b, c` and `from d.e import f`)."""
    try:
        tree = ast.parse(statement)
    except SyntaxError as exc:
        raise DockerfileError(f"import assert {statement!r} is not valid Python: {exc.msg}",
                              hint="each build.import-asserts entry is one Python statement "
                                   "line run with `python -c`") from None
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module.split(".")[0])
    return tuple(dict.fromkeys(names))


def _import_names(build: BuildSettings) -> dict[str, tuple[str, ...]]:
    table = {k: tuple(v) for k, v in KNOWN_IMPORT_NAMES.items()}
    for entry in build.import_names:
        module, sep, dist = entry.partition("=")
        if not sep or not module.strip() or not dist.strip():
            raise DockerfileError(f"build.import-names entry {entry!r} is not 'module=distribution'",
                                  hint='e.g. import-names = ["yaml=pyyaml"]')
        table[module.strip()] = (*table.get(module.strip(), ()), dist.strip())
    return table


def installed_distributions(plan: Plan, provided: Iterable[str]) -> frozenset[str]:
    """Every distribution the image holds after the final sync (normalised names): the
    closure, the local packages, the compiled wheels' and what is installed outside the lock."""
    outside = {Requirement(requirement).name for requirement in plan.outside_lock}
    names = {p.name for p in plan.closure} | set(plan.local) | set(provided) | outside
    return frozenset(str(canonicalize_name(n)) for n in names)


def check_asserts(build: BuildSettings, installed: frozenset[str], *, note: str = "") -> None:
    """Each assert imports only the standard library and distributions the image installs."""
    table = _import_names(build)
    for statement in build.import_asserts:
        for module in assert_modules(statement):
            if module in sys.stdlib_module_names or module == "__future__":
                continue
            candidates = {str(canonicalize_name(module)), *table.get(module, ())}
            if not candidates & installed:
                raise DockerfileError(
                    f"import assert {statement!r} imports {module!r}, which no distribution of "
                    f"the image provides{note}: the build would fail at that RUN",
                    hint="drop the assert for this variant (its lock does not install "
                         f"{module}), or if the module comes under another name, add "
                         f'"{module}=DISTRIBUTION" to build.import-names')


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PinMismatch:
    """One build pin the lock contradicts, with the value to set."""

    where: str  # the build table to edit: [tool.gpurl.profiles.NAME(.variants.V).build]
    key: str  # its key there: torch-version
    now: str
    wanted: str
    why: str

    def line(self) -> str:
        return f'{self.where} {self.key} = "{self.wanted}" (now "{self.now}": {self.why})'


class PinMismatchError(DockerfileError):
    """Every pin mismatch of every variant generate looked at, in one error."""

    def __init__(self, mismatches: Iterable[PinMismatch]) -> None:
        self.mismatches = tuple(mismatches)
        lines = "\n  ".join(m.line() for m in self.mismatches)
        super().__init__(f"{len(self.mismatches)} build pin(s) contradict the lock; set:\n  {lines}",
                         hint="edit those keys (or re-lock the workspace), then `invoke generate`")


def torch_pin_mismatches(build: BuildSettings, plan: Plan, where: str) -> list[PinMismatch]:
    """The wheel-builder's torch must be the lock's (same version, same CUDA label), when the
    variant compiles wheels and its lock installs torch."""
    torch = next((p for p in plan.closure if p.name == "torch"), None)
    if not build.wheel_globs or torch is None:
        return []
    try:
        locked = Version(torch.version)
    except InvalidVersion:
        return []
    found: list[PinMismatch] = []
    try:
        wanted = Version(build.torch_version)
        off = wanted.public != locked.public or bool(wanted.local and wanted.local != locked.local)
    except InvalidVersion:
        off = True
    if off:
        found.append(PinMismatch(where=where, key="torch-version", now=build.torch_version,
                                 wanted=locked.public,
                                 why=f"the lock's torch is {torch.version}; the compiled wheels "
                                     "must match its ABI"))
    if locked.local and locked.local != build.cuda_tag:
        found.append(PinMismatch(where=where, key="cuda-tag", now=build.cuda_tag,
                                 wanted=locked.local,
                                 why=f"the CUDA label of the lock's torch {torch.version} "
                                     "(and a base image of that CUDA)"))
    return found


def check_torch(build: BuildSettings, plan: Plan, *, note: str = "") -> str | None:
    """What matched between the wheel-builder's torch and the lock's (the mismatches are
    torch_pin_mismatches'), as a note; None when the variant compiles nothing against torch."""
    torch = next((p for p in plan.closure if p.name == "torch"), None)
    if not build.wheel_globs or torch is None:
        return None
    return (f"torch: lock {torch.version}, wheel-builder torch {build.torch_version} "
            f"({build.cuda_tag}){note}")


def _string_assignments(source: str, variable: str) -> list[tuple[int, str]]:
    """(line, value) of each `variable = "..."` (annotated or not) at any depth of `source`."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []  # pin reports an unparseable launcher itself
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign | ast.AnnAssign):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if (any(isinstance(t, ast.Name) and t.id == variable for t in targets)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            found.append((node.lineno, node.value.value))
    return found


def check_launcher_environment(source: str, variable: str, venv: str, *, where: str) -> None:
    """Refuse a launcher whose `variable` (its environment's python, or the environment's
    directory) is a path outside the image's environment `venv`, naming both paths. A
    launcher without that variable says nothing about the path and passes."""
    for line, value in _string_assignments(source, variable):
        if value == venv or value.startswith(f"{venv}/bin/"):
            continue
        theirs = value.rsplit("/bin/", 1)[0] if "/bin/" in value else value
        raise DockerfileError(
            f"{where}:{line}: {variable} = {value!r} is not in the image's environment {venv}: "
            "every task would fail with 'No such file or directory'",
            hint=f'set build.venv = "{theirs}" (where the launcher looks), or point {variable} '
                 f"at {venv}/bin/python")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class LocalCopy:
    """A local package's source: where it is in the build context, where the lock expects it."""

    name: str
    source: str  # relative to the build context, symlinks resolved
    dest: str  # absolute path in the image
    link: str = ""  # the symlink in the context that points at it (kept out of the context)
