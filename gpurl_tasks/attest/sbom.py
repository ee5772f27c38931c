"""The image's SBOM as CycloneDX 1.6 JSON, exact by construction (pure).

Why CycloneDX rather than SPDX 2.3: a component carries its package URL, hashes and free
properties in one object, which is all gpurl knows per package (the lock's pin and artifact
hash, a wheel's MANIFEST key), and a container image is a component type of its own; SPDX 2.3
needs a relationship graph and a document namespace for the same facts. Scanners and
Dependency-Track read both.

Every input is data gpurl already holds: the lock's install closure (name, version, source,
the artifact the target installs and its hash), the compiled wheels (filename, sha256, the
MANIFEST's ABI key), the declared post-installs, the apt packages as dpkg lists them in the
built image, and the base image. The document has no timestamp and its serial number is
derived from its content: the same inputs give the same bytes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

__all__ = [
    "MEDIA_TYPE",
    "AptPackage",
    "CompiledWheel",
    "PythonPackage",
    "SbomInputs",
    "apt_packages_from_dpkg",
    "apt_packages_from_status",
    "cyclonedx",
    "python_components",
    "requirement_name",
]

MEDIA_TYPE = "application/vnd.cyclonedx+json"  # the artifactType the referrers list it under
_KW = {"frozen": True, "kw_only": True, "slots": True}
_PROP = "gpurl:"  # the prefix of gpurl's own component properties


@dataclasses.dataclass(**_KW)
class PythonPackage:
    """One package of the environment: from the lock, or installed after it (`post-install`)."""

    name: str
    version: str
    source: str  # the lock's source kind: registry, git, url, path, editable, virtual; or post-install
    location: str = ""  # the index URL, git URL or path the lock records
    artifact_url: str = ""  # the file the target installs (wheel, else sdist)
    sha256: str = ""  # its hash, hex


@dataclasses.dataclass(**_KW)
class CompiledWheel:
    filename: str
    sha256: str
    abi_key: str = ""  # the MANIFEST's ABI key line, when it has one


@dataclasses.dataclass(**_KW)
class AptPackage:
    name: str
    version: str
    architecture: str


@dataclasses.dataclass(**_KW)
class SbomInputs:
    image: str  # host/repository
    tag: str
    python: tuple[PythonPackage, ...]
    wheels: tuple[CompiledWheel, ...] = ()
    post_installs: tuple[str, ...] = ()  # as declared (a requirement line each)
    apt: tuple[AptPackage, ...] = ()
    base_image: str = ""  # the reference, by digest where known


def apt_packages_from_dpkg(text: str) -> tuple[AptPackage, ...]:
    """`dpkg-query -W -f '${Package}\\t${Version}\\t${Architecture}\\n'` output, sorted."""
    found = set()
    for line in text.splitlines():
        parts = line.strip().split("\t")
        if len(parts) == 3 and all(parts):
            found.add(AptPackage(name=parts[0], version=parts[1], architecture=parts[2]))
    return tuple(sorted(found, key=lambda p: (p.name, p.architecture)))


def apt_packages_from_status(text: str) -> tuple[AptPackage, ...]:
    """dpkg's status file (var/lib/dpkg/status) read as `apt_packages_from_dpkg` reads
    `dpkg-query -W`: every package whose status is not `not-installed`, sorted."""
    found = set()
    for paragraph in text.split("\n\n"):
        fields = dict(line.split(":", 1) for line in paragraph.splitlines()
                      if ":" in line and not line.startswith((" ", "\t")))
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        name, version, arch = (fields.get(k, "") for k in ("Package", "Version", "Architecture"))
        if name and version and arch and not fields.get("Status", "").endswith("not-installed"):
            found.add(AptPackage(name=name, version=version, architecture=arch))
    return tuple(sorted(found, key=lambda p: (p.name, p.architecture)))


def _purl_pypi(name: str, version: str) -> str:
    return f"pkg:pypi/{quote(name.lower().replace('_', '-'))}@{quote(version)}"


def _properties(items: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"name": _PROP + k, "value": v} for k, v in sorted(items.items()) if v]


def _python(package: PythonPackage) -> dict[str, Any]:
    component: dict[str, Any] = {
        "type": "library", "bom-ref": f"pypi:{package.name}@{package.version}",
        "name": package.name, "version": package.version,
        "purl": _purl_pypi(package.name, package.version)}
    if package.sha256:
        component["hashes"] = [{"alg": "SHA-256", "content": package.sha256}]
    if package.artifact_url:
        component["externalReferences"] = [{"type": "distribution", "url": package.artifact_url}]
    component["properties"] = _properties({"source": package.source, "location": package.location})
    return component


def _wheel(wheel: CompiledWheel) -> dict[str, Any]:
    name, version = [*wheel.filename.split("-"), "", ""][:2]
    return {"type": "library", "bom-ref": f"wheel:{wheel.filename}", "name": name,
            "version": version, "purl": _purl_pypi(name, version),
            "hashes": [{"alg": "SHA-256", "content": wheel.sha256}],
            "properties": _properties({"source": "compiled-wheel", "filename": wheel.filename,
                                       "abi-key": wheel.abi_key})}


def _apt(package: AptPackage) -> dict[str, Any]:
    return {"type": "library", "bom-ref": f"deb:{package.name}:{package.architecture}",
            "name": package.name, "version": package.version,
            "purl": f"pkg:deb/debian/{quote(package.name)}@{quote(package.version)}"
                    f"?arch={quote(package.architecture)}",
            "properties": _properties({"source": "apt"})}


def requirement_name(line: str) -> str:
    """The distribution a declared install line names (`harbor[x] @ git+...`: harbor)."""
    return line.split("@")[0].split("==")[0].split("[")[0].strip()


def _post_install(line: str) -> dict[str, Any]:
    name = requirement_name(line)
    version = line.split("==", 1)[1].strip() if "==" in line else ""
    return {"type": "library", "bom-ref": f"post-install:{line}", "name": name,
            **({"version": version, "purl": _purl_pypi(name, version)} if version else {}),
            "properties": _properties({"source": "post-install", "requirement": line})}


def cyclonedx(inputs: SbomInputs) -> dict[str, Any]:
    """The SBOM document: the image as the described component, then every component sorted
    by kind and name (Python packages, compiled wheels, post-installs, apt packages, the base)."""
    components = [_python(p) for p in sorted(inputs.python, key=lambda p: (p.name, p.version))]
    components += [_wheel(w) for w in sorted(inputs.wheels, key=lambda w: w.filename)]
    components += [_post_install(line) for line in sorted(inputs.post_installs)]
    components += [_apt(p) for p in inputs.apt]
    if inputs.base_image:
        components.append({"type": "container", "bom-ref": "base-image",
                           "name": inputs.base_image.split("@")[0],
                           "version": inputs.base_image.partition("@")[2] or "unknown",
                           "properties": _properties({"source": "base-image",
                                                      "reference": inputs.base_image})})
    body = {"components": components,
            "metadata": {"component": {"type": "container", "bom-ref": "image",
                                       "name": inputs.image, "version": inputs.tag},
                         "tools": {"components": [{"type": "application", "name": "gpurl"}]}}}
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    return {"bomFormat": "CycloneDX", "specVersion": "1.6",
            "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, 'gpurl:' + digest)}",
            "version": 1, **body}


def python_components(document: Mapping[str, Any]) -> dict[str, set[tuple[str, str]]]:
    """{source: {(name, version)}} of an SBOM's Python components, as `cyclonedx` writes them
    (the lock's by source kind, `compiled-wheel`, `post-install`): what verify compares."""
    out: dict[str, set[tuple[str, str]]] = {}
    for component in document.get("components", []) or []:
        if not isinstance(component, Mapping):
            continue
        props = {p.get("name"): p.get("value") for p in component.get("properties", []) or []
                 if isinstance(p, Mapping)}
        source = props.get(_PROP + "source")
        if not isinstance(source, str) or source in ("apt", "base-image"):
            continue
        out.setdefault(source, set()).add((str(component.get("name", "")),
                                           str(component.get("version", ""))))
    return out

