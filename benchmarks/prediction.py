"""Section 3: predicted vs measured compressed size of each sync layer of a real build.

The figures come from a file written after a real build (`benchmarks/data/measured-layers.json`,
`{"build": name, "layers": [{"step": i, "predicted": bytes, "actual": bytes}]}`). Without it the
section says so; nothing is estimated in its place.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

__all__ = ["MEASURED_LAYERS", "LayerError", "MeasuredBuild", "MeasuredFileError", "load_measured"]

MEASURED_LAYERS = Path(__file__).resolve().parent / "data" / "measured-layers.json"


class MeasuredFileError(ValueError):
    """The measured-layers file exists but does not have the documented shape."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class LayerError:
    step: int
    predicted: int
    actual: int

    @property
    def error_percent(self) -> float:
        """(predicted - actual) / actual: positive when the planner over-predicts."""
        return 100.0 * (self.predicted - self.actual) / self.actual if self.actual else float("inf")


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeasuredBuild:
    build: str
    layers: tuple[LayerError, ...]

    @property
    def max_abs_error_percent(self) -> float:
        return max((abs(x.error_percent) for x in self.layers), default=0.0)

    @property
    def total_error_percent(self) -> float:
        actual = sum(x.actual for x in self.layers)
        predicted = sum(x.predicted for x in self.layers)
        return 100.0 * (predicted - actual) / actual if actual else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"build": self.build,
                "layers": [{**dataclasses.asdict(x), "error_percent": x.error_percent}
                           for x in self.layers],
                "max_abs_error_percent": self.max_abs_error_percent,
                "total_error_percent": self.total_error_percent}


def _count(entry: dict[str, Any], key: str, where: str) -> int:
    value = entry.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise MeasuredFileError(f"{where}.{key} must be a byte count, got {value!r}")
    return value


def load_measured(path: Path = MEASURED_LAYERS) -> MeasuredBuild | None:
    """The measured build, or None when no build has been measured yet."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as exc:
        raise MeasuredFileError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("layers"), list):
        raise MeasuredFileError(f"{path} must hold {{\"build\": name, \"layers\": [...]}}")
    layers = []
    for i, entry in enumerate(data["layers"]):
        if not isinstance(entry, dict):
            raise MeasuredFileError(f"{path}: layers[{i}] must be an object")
        layers.append(LayerError(step=_count(entry, "step", f"layers[{i}]"),
                                 predicted=_count(entry, "predicted", f"layers[{i}]"),
                                 actual=_count(entry, "actual", f"layers[{i}]")))
    return MeasuredBuild(build=str(data.get("build", path.name)), layers=tuple(layers))
