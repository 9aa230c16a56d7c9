"""Admission at arrival: refuse a request at once when its deadline cannot be met even in
the best case, instead of queueing it until a scheduler drops it.

For a model, the best case for a new request is: the requests already queued ahead of it
(arrived, not yet dispatched) are served at the plan's full capacity — every worker that
can run the model's first stage, each running batches of the largest planned size back to
back, as if it served no other model and had nothing in flight — and then the request runs
through the fastest pipeline alone (batch 1, transfers included). If even that ends after
the deadline, no scheduler can meet it: the request is refused (``hetserve serve``
answers 503 at once). The estimate is optimistic by construction, so a request that could
be served in time is never refused; requests refused later by the scheduler are those the
best case did not rule out.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetserve.core.plan import Plan
from hetserve.scheduling.protocol import ClusterView


@dataclass(frozen=True)
class ModelCapacity:
    rate_rps: float  # requests per second the first stage's workers serve, at most
    min_latency_s: float  # one request alone through the fastest pipeline


class Admission:
    def __init__(self, view: ClusterView, plan: Plan, max_batch: int = 0) -> None:
        """``max_batch``: the scheduler's largest batch, where it exceeds the plan's."""
        self.capacity: dict[str, ModelCapacity] = {}
        for m, mp in plan.models.items():
            rate = 0.0
            best = float("inf")
            seen: set[str] = set()
            for p_idx, pipe in enumerate(mp.pipelines):
                firsts = view.placement.stages.get((m, p_idx, 0), ())
                lat = 0.0
                for s_idx, st in enumerate(pipe.stages):
                    ws = view.placement.stages.get((m, p_idx, s_idx), ())
                    if not ws:
                        lat = float("inf")
                        break
                    lat += min(view.stage_latency_s(m, w, 1, st.blocks) for w in ws)
                    lat += st.transfer_s
                best = min(best, lat)
                blocks = pipe.stages[0].blocks if pipe.stages else None
                for w in firsts:
                    if w in seen:
                        continue
                    seen.add(w)
                    rate += _best_rate(view, m, w, max(1, pipe.batch, max_batch), blocks)
            self.capacity[m] = ModelCapacity(rate, best)

    def best_finish_s(self, model: str, queued_ahead: int) -> float:
        """Seconds from now until a new request could finish at best."""
        cap = self.capacity.get(model)
        if cap is None or cap.rate_rps <= 0:
            return float("inf")
        return queued_ahead / cap.rate_rps + cap.min_latency_s


def _best_rate(
    view: ClusterView, model: str, worker: str, max_batch: int, blocks: tuple[int, int] | None
) -> float:
    """The highest requests per second of a worker at any batch up to ``max_batch`` that
    its latency model covers."""
    best = 0.0
    for b in range(1, max_batch + 1):
        try:
            t = view.stage_latency_s(model, worker, b, blocks)
        except Exception:  # a profile without this batch size: the batches below it count
            break
        if t > 0:
            best = max(best, b / t)
    return best
