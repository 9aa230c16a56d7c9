"""The simulator's configuration."""

from __future__ import annotations

from dataclasses import dataclass

from hetserve.core.errors import HetserveError
from hetserve.engine.modelled import JITTERS


@dataclass(frozen=True)
class SimConfig:
    seed: int = 0
    jitter: str = "none"  # none | lognormal | exponential
    jitter_cv: float = 0.0  # lognormal: coefficient of variation of the stage-time multiplier
    cut_bytes_factor: float = 0.5  # activation bytes at cuts: 0.5 FP16 (default), 1.0 FP32
    warm: bool = True  # the plan's blocks are resident at t = 0
    drain_s: float | None = None  # run on after the last arrival (default: 10 x max SLO + 1 s)
    record_links: bool = False  # keep every transfer's link intervals (for checks)
    # per-request control and data overhead of a batch (moving inputs in, results out),
    # added to its first stage: Shepherd's per-request overhead
    request_overhead_s: float = 0.0
    # clients that give up: a request not ended this long after its arrival is cancelled
    # (``Kernel.cancel``: out of its queue, or its part of a batch discarded); None: they wait
    patience_s: float | None = None

    def __post_init__(self) -> None:
        if self.jitter not in JITTERS:
            raise HetserveError(
                f"jitter must be none, lognormal or exponential, got {self.jitter!r}"
            )
        if self.jitter_cv < 0 or self.cut_bytes_factor <= 0 or self.request_overhead_s < 0:
            raise HetserveError(
                "jitter_cv and request_overhead_s must be >= 0 and cut_bytes_factor > 0"
            )
        if self.patience_s is not None and not self.patience_s > 0:
            raise HetserveError(f"patience_s must be > 0 (or None), got {self.patience_s}")
