"""The GPU check's result document, `gpurl.gpu-check/v1` (pure, stdlib only: the job writes it
on the node and gpurl reads it back from the registry; one model for both).

`parse` refuses anything off (an unknown schema, check, status or key; a failed or not-run
check without its reason; a `passed` that its checks do not bear out), so that a document a
pin relies on says exactly what the job found. A check that could not run is "not-run" with
its reason, never "passed".
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import types
from collections.abc import Mapping, Sequence
from typing import Any

from gpurl_tasks.errors import GpurlError, shown

__all__ = [
    "CHECKS",
    "REQUIRED",
    "SCHEMA",
    "STATUSES",
    "Check",
    "Gpu",
    "Node",
    "Result",
    "ResultError",
    "parse",
    "to_json",
]


class ResultError(GpurlError):
    """A GPU result document that is not one gpurl's check writes."""


# the hint of a result document that is not what the check writes
_RERUN_HINT = "it is not what `invoke verify-gpu` writes: run verify-gpu again for this image"

SCHEMA = "gpurl.gpu-check/v1"
CHECKS = ("driver", "kernels", "launches", "network", "build-proof")
REQUIRED = ("driver", "kernels")  # a result passes only when these ran and passed
STATUSES = ("passed", "failed", "not-run")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_CAPABILITY = re.compile(r"[0-9]{1,3}\.[0-9]{1,2}")
_KW = {"frozen": True, "kw_only": True, "slots": True}
Figure = int | float | str


@dataclasses.dataclass(**_KW)
class Gpu:
    index: int
    name: str
    capability: str  # "9.0": the compute capability torch names


@dataclasses.dataclass(**_KW)
class Node:
    hostname: str
    gpus: tuple[Gpu, ...]
    driver: str  # the driver's version ("570.124.06"); "" when it could not be read
    driver_cuda: str  # the newest CUDA the driver runs ("12.8")
    image_cuda: str  # the CUDA the image's torch was built with ("12.8"); "" without torch


@dataclasses.dataclass(**_KW)
class Check:
    name: str
    status: str
    reason: str = ""  # one line; required for failed and not-run
    figures: Mapping[str, Figure] = dataclasses.field(default_factory=dict)
    findings: tuple[str, ...] = ()  # each names a file and the architectures it holds

    def __post_init__(self) -> None:
        _check(self)
        object.__setattr__(self, "figures", types.MappingProxyType(dict(self.figures)))


@dataclasses.dataclass(**_KW)
class Result:
    image: str  # the digest the job was told it runs (sha256:...)
    node: Node
    checks: tuple[Check, ...]

    def __post_init__(self) -> None:
        if not _DIGEST.fullmatch(self.image):
            raise ResultError(f"the GPU result's image is not a sha256 digest: {shown(self.image)}",
                              hint=_RERUN_HINT)
        names = [c.name for c in self.checks]
        if len(set(names)) != len(names):
            raise ResultError(f"the GPU result names a check twice: {', '.join(names)}",
                              hint=_RERUN_HINT)

    @property
    def passed(self) -> bool:
        """Every check passed or not-run, and the required ones ran and passed."""
        status = {c.name: c.status for c in self.checks}
        return all(s != "failed" for s in status.values()) \
            and all(status.get(name) == "passed" for name in REQUIRED)

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)


def _check(check: Check) -> None:
    if check.name not in CHECKS:
        raise ResultError(f"the GPU result has an unknown check {shown(check.name)}",
                         hint=f"checks are {', '.join(CHECKS)}")
    if check.status not in STATUSES:
        raise ResultError(f"the GPU result's {check.name} check has an unknown status "
                         f"{shown(check.status)}", hint=f"statuses are {', '.join(STATUSES)}")
    if check.status != "passed" and not check.reason.strip():
        raise ResultError(f"the GPU result's {check.name} check is {check.status} without a reason",
                          hint=_RERUN_HINT)
    if "\n" in check.reason:
        raise ResultError(f"the GPU result's {check.name} check's reason is not one line",
                          hint=_RERUN_HINT)
    for key, value in check.figures.items():
        if isinstance(value, bool) or not isinstance(value, int | float | str) \
                or (isinstance(value, float) and not math.isfinite(value)):
            raise ResultError(f"the GPU result's {check.name} figure {shown(key)} is not a finite "
                             f"number or a string: {shown(value)}",
                              hint=_RERUN_HINT)


def _to_dict(result: Result) -> dict[str, Any]:
    node = result.node
    return {
        "schema": SCHEMA, "image": result.image,
        "node": {"hostname": node.hostname, "driver": node.driver,
                 "driver_cuda": node.driver_cuda, "image_cuda": node.image_cuda,
                 "gpus": [{"index": g.index, "name": g.name, "capability": g.capability}
                          for g in node.gpus]},
        "checks": [{"name": c.name, "status": c.status,
                    **({"reason": c.reason} if c.reason else {}),
                    "figures": dict(c.figures), "findings": list(c.findings)}
                   for c in result.checks],
        "passed": result.passed,
    }


def to_json(result: Result, *, indent: int | None = None) -> str:
    """The document's text: sorted keys; compact (the log line) unless `indent` is given."""
    return json.dumps(_to_dict(result), sort_keys=True, indent=indent, allow_nan=False,
                      separators=(",", ":") if indent is None else (",", ": "))


def _object(raw: object, where: str, keys: Sequence[str], optional: Sequence[str] = ()
            ) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise ResultError(f"the GPU result's {where} is not an object: {shown(raw)}",
                          hint=_RERUN_HINT)
    missing = [k for k in keys if k not in raw]
    unknown = sorted(set(raw) - set(keys) - set(optional))
    if missing or unknown:
        raise ResultError(f"the GPU result's {where} "
                         + (f"lacks {', '.join(missing)}" if missing else
                            f"has unknown keys {', '.join(map(str, unknown))}"),
                          hint=_RERUN_HINT)
    return raw


def _typed(raw: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = raw[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ResultError(f"the GPU result's {where}.{key} is not a {kind.__name__}: {shown(value)}",
                          hint=_RERUN_HINT)
    return value


def _gpu(raw: object, where: str) -> Gpu:
    gpu = _object(raw, where, ("index", "name", "capability"))
    capability = _typed(gpu, "capability", str, where)
    if not _CAPABILITY.fullmatch(capability):
        raise ResultError(f"the GPU result's {where}.capability is not like 9.0: {shown(capability)}",
                          hint=_RERUN_HINT)
    index = _typed(gpu, "index", int, where)
    if index < 0:
        raise ResultError(f"the GPU result's {where}.index is negative: {index}",
                          hint=_RERUN_HINT)
    return Gpu(index=index, name=_typed(gpu, "name", str, where), capability=capability)


def _node(raw: object) -> Node:
    node = _object(raw, "node", ("hostname", "gpus", "driver", "driver_cuda", "image_cuda"))
    gpus = _typed(node, "gpus", list, "node")
    return Node(hostname=_typed(node, "hostname", str, "node"),
                gpus=tuple(_gpu(g, f"node.gpus[{i}]") for i, g in enumerate(gpus)),
                **{k: _typed(node, k, str, "node") for k in ("driver", "driver_cuda", "image_cuda")})


def _check_of(raw: object, where: str) -> Check:
    check = _object(raw, where, ("name", "status", "figures", "findings"), ("reason",))
    findings = _typed(check, "findings", list, where)
    if not all(isinstance(f, str) for f in findings):
        raise ResultError(f"the GPU result's {where}.findings are not all strings",
                          hint=_RERUN_HINT)
    figures = _typed(check, "figures", dict, where)
    reason = _typed(check, "reason", str, where) if "reason" in check else ""
    return Check(name=_typed(check, "name", str, where), status=_typed(check, "status", str, where),
                 reason=reason, figures=figures, findings=tuple(findings))


def parse(text: str | bytes) -> Result:
    """The document `to_json` wrote; GpurlError on anything off, its `passed` included."""
    try:
        raw = json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        raise ResultError(f"the GPU result is not JSON: {exc}",
                          hint=_RERUN_HINT) from None
    doc = _object(raw, "document", ("schema", "image", "node", "checks", "passed"))
    if doc["schema"] != SCHEMA:
        raise ResultError(f"the GPU result's schema is {shown(doc['schema'])}, not {SCHEMA}",
                         hint="a newer gpurl wrote it, or it is not a GPU check's result")
    checks = _typed(doc, "checks", list, "document")
    result = Result(image=_typed(doc, "image", str, "document"), node=_node(doc["node"]),
                    checks=tuple(_check_of(c, f"checks[{i}]") for i, c in enumerate(checks)))
    if _typed(doc, "passed", bool, "document") != result.passed:
        raise ResultError(f"the GPU result says passed={doc['passed']} but its checks say "
                         f"{result.passed}", hint="a check failed, or driver/kernels did not pass")
    return result


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number JSON allows")
