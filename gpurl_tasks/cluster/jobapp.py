"""The gpurl the cluster job runs: a zipapp of the installed package's own module files.

The job has python3 and the stdlib, not gpurl: `invoke build` carries the modules it runs
(the layer tool's and the attestation writer's, each with every gpurl module it imports) in
the workspace it stages, as one zip whose `__main__.py` is `jobmain.py`. Each module is its
installed file, byte for byte, at its own path, so a traceback in the job names the file a
reviewer reads; each package directory gets an empty `__init__.py` (the job imports no
package's own `__init__`, which may reach outside the stdlib).

The zip is deterministic: entries sorted by name, one fixed time, fixed modes, stored (not
deflated: the bytes must not depend on the zlib that builds them; iris deflates the bundle).
The same package gives the same sha256 anywhere, which the job's script checks before the
zip runs.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import importlib
import importlib.util
import io
import zipfile
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from gpurl_tasks.cluster import jobmain

__all__ = ["ZIP_TIME", "JobApp", "build_job_app", "job_app", "module_closure"]

ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can hold


@dataclasses.dataclass(frozen=True, slots=True)
class JobApp:
    """The zipapp's bytes and what the job checks them by."""

    data: bytes
    modules: tuple[str, ...]

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def size(self) -> int:
        return len(self.data)


def module_closure(entry: str) -> tuple[ModuleType, ...]:
    """`entry` and every gpurl module it imports, transitively, each after what it imports.
    Read from their source, so a module a tool starts to import rides along with it."""
    ordered: dict[str, ModuleType] = {}
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        module = importlib.import_module(name)
        for node in ast.walk(ast.parse(Path(str(module.__file__)).read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "gpurl_tasks":
                for alias in node.names:
                    child = f"{node.module}.{alias.name}"
                    visit(child if _is_module(child) else str(node.module))
        ordered[name] = module

    visit(entry)
    return tuple(ordered.values())


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a name inside a module, not a submodule
        return False


def _entry(name: str, data: bytes) -> tuple[zipfile.ZipInfo, bytes]:
    info = zipfile.ZipInfo(name, date_time=ZIP_TIME)
    info.create_system = 3  # unix: the mode below is read as one
    info.external_attr = 0o100644 << 16
    info.compress_type = zipfile.ZIP_STORED
    return info, data


def build_job_app(modules: Iterable[ModuleType]) -> JobApp:
    """The zipapp of `modules` (each with its closure) and `jobmain` as its `__main__`."""
    closure = {m.__name__: m for entry in modules for m in module_closure(entry.__name__)}
    files = {"__main__.py": Path(str(jobmain.__file__)).read_bytes()}
    for name, module in closure.items():
        path = Path(*name.split("."))
        text = Path(str(module.__file__)).read_bytes()
        if hasattr(module, "__path__"):  # a package's own module: its __init__.py
            files[(path / "__init__.py").as_posix()] = text
        else:
            files[path.with_suffix(".py").as_posix()] = text
        for package in path.parents[:-1]:
            files.setdefault((package / "__init__.py").as_posix(), b"")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in sorted(files):
            archive.writestr(*_entry(name, files[name]))
    return JobApp(data=buffer.getvalue(), modules=tuple(sorted(closure)))


@functools.cache
def job_app(modules: tuple[ModuleType, ...]) -> JobApp:
    """`build_job_app`, once per process (the installed package does not change under it)."""
    return build_job_app(modules)
