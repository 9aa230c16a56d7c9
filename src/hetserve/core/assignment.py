"""MagicBatch's stream assignments as a plan file holds them (``assignments`` in
docs/formats.md#plans)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hetserve.core.errors import ConfigError


@dataclass(frozen=True)
class StreamAssignment:
    """MagicBatch: a stream (the paper's device) bound to one GPU instance (``"<type>#k"``)
    with a batch size, and the options every method chose from (per GPU type: batch,
    latency, energy per request, or why it is infeasible), so an assignment can be
    re-checked. Times in seconds here, milliseconds in the file."""

    stream: str
    model: str
    rate_rps: float
    deadline_s: float
    gpu: str  # GPU instance, "" when rejected
    batch: int = 0
    latency_s: float = 0.0
    energy_j: float = 0.0  # per request
    rejected: str = ""  # why, when it is
    options: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "model": self.model, "rate_rps": self.rate_rps, "deadline_ms": self.deadline_s * 1e3,
            "gpu": self.gpu, "batch": self.batch, "latency_ms": self.latency_s * 1e3,
            "energy_j_per_request": self.energy_j,
        }  # fmt: skip
        if self.rejected:
            out["rejected"] = self.rejected
        out["options"] = self.options
        return out

    @staticmethod
    def from_json(name: str, d: Any, where: str) -> StreamAssignment:
        try:
            return StreamAssignment(
                name, str(d["model"]), float(d["rate_rps"]), float(d["deadline_ms"]) / 1e3,
                str(d.get("gpu", "")), int(d.get("batch", 0)),
                float(d.get("latency_ms", 0.0)) / 1e3, float(d.get("energy_j_per_request", 0.0)),
                str(d.get("rejected", "")), dict(d.get("options", {})),
            )  # fmt: skip
        except KeyError as e:
            raise ConfigError(f"{where}: missing field {e}") from None
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{where}: malformed stream assignment ({e})") from None
