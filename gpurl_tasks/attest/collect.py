"""What the SBOM lists for a config's variant, from the inputs gpurl already holds: the lock's
install closure for the target (less what the compiled wheels provide), the declared installs
outside the lock, the compiled wheels. Read the same way when the SBOM is written and when
verify-layers checks it, so the two agree exactly for an image built from this commit."""

from __future__ import annotations

from gpurl_tasks.attest.sbom import PythonPackage
from gpurl_tasks.config import Config
from gpurl_tasks.plan.lock import Closure, install_closure, load_lock
from gpurl_tasks.plan.profile import outside_lock
from gpurl_tasks.plan.sizes import select_wheel
from gpurl_tasks.plan.target import target_tags
from gpurl_tasks.plan.wheelglobs import provided_names

__all__ = ["listed"]


def listed(config: Config) -> tuple[tuple[PythonPackage, ...], tuple[str, ...]]:
    """What the variant's image holds, from one walk of the lock's closure: every package it
    installs from the lock (local ones included, the compiled wheels' left out) with the
    artifact the target installs, and the installs outside the lock as declared (harbor at
    its commit)."""
    closure = install_closure(load_lock(config.lock), config.target, config.python)
    return _python(config, closure), outside_lock(config.build, closure)


def _python(config: Config, closure: Closure) -> tuple[PythonPackage, ...]:
    provided = set(provided_names(config.build.wheel_globs))
    tags = target_tags(config.target)
    found = []
    for package in (*closure.packages, *closure.local):
        if package.name in provided:
            continue
        artifact = select_wheel(package, tags) or package.sdist
        digest = artifact.hash if artifact is not None and artifact.hash else ""
        found.append(PythonPackage(
            name=package.name, version=package.version or "", source=package.source_kind,
            location=str(package.source.get(package.source_kind, "")),
            artifact_url=artifact.url or "" if artifact is not None else "",
            sha256=digest.removeprefix("sha256:") if digest.startswith("sha256:") else ""))
    return tuple(found)
