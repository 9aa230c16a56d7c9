"""What a server checks about what it serves: that the plan gives each served model
workers, and that an answer matches the output tensors its model advertises."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hetserve.core.errors import HetserveError
from hetserve.core.plan import Placement, Plan
from hetserve.core.tensors import TensorSpec


def check_served(plan: Plan, placement: Placement, models: list[str]) -> None:
    """Every requested model has a pipeline whose every stage has workers: else a one-line
    error naming the model and why."""
    for m in models:
        mp = plan.models.get(m)
        if mp is None:
            raise HetserveError(f"the plan does not serve {m!r}: it has no entry for it")
        if not mp.pipelines:
            raise HetserveError(
                f"the plan leaves {m!r} without workers: it has no pipeline for it (the "
                f"cluster may be too small for all models, or the SLO too tight); plan with "
                f"fewer models, a looser --slo or another --planner"
            )
        for p_idx, pipe in enumerate(mp.pipelines):
            for s_idx, _ in enumerate(pipe.stages):
                if not placement.stages.get((m, p_idx, s_idx)):
                    raise HetserveError(
                        f"the plan leaves {m!r} without workers: pipeline {p_idx} stage "
                        f"{s_idx} is bound to no GPU of the cluster"
                    )


def answer_mismatch(model: str, specs: Sequence[TensorSpec], output: Any, rows: int) -> str:
    """Why a request's answer (its ``rows`` rows) does not match the output tensors the
    model advertises (``specs``, its metadata): empty when it does."""
    parts = output if isinstance(output, (tuple, list)) else (output,)
    if len(parts) != len(specs):
        return (
            f"model {model!r}: it returned {len(parts)} outputs for a request; it "
            f"advertises {len(specs)} ({', '.join(s.name for s in specs)})"
        )
    for spec, part in zip(specs, parts, strict=True):
        try:
            shape = tuple(int(d) for d in part.shape)
        except (AttributeError, TypeError):
            return f"model {model!r}: output {spec.name!r} is a {type(part).__name__}"
        if not shape or shape[0] != rows:
            return (
                f"model {model!r}: output {spec.name!r} has shape {list(shape)} for a "
                f"request of {rows} rows; its first dimension must be the rows"
            )
        shape = shape[1:]
        want = tuple(spec.shape)
        if len(shape) != len(want) or any(
            w not in (-1, d) for d, w in zip(shape, want, strict=True)
        ):
            return (
                f"model {model!r}: output {spec.name!r} has shape {list(shape)} for a "
                f"request; it advertises {list(want)}"
            )
    return ""
