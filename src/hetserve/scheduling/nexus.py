"""``nexus``: Nexus as Shepherd adapted it (section 7): periodic provisioning per model for
the peak rate of the coming window, batch sizes from the SLO, fixed schedules in between.

Every ``epoch_s`` (60 s) the scheduler re-provisions, squishy-bin-packing style:

- per model, the batch ``b`` is the largest ``<= max_batch`` with ``2 l(b) <= SLO`` (a request
  may wait one batch before it rides the next); one GPU then serves ``T = b / l(b)``;
- a model with rate ``r`` gets ``floor(r / T)`` GPUs of its own; the rest of its rate runs in
  a duty cycle of half its SLO with the batch that rate fills, ``ceil(rest x cycle)``, and
  takes ``l(batch) / cycle`` of a GPU; these shares are packed first-fit decreasing onto
  shared GPUs (occupancy <= 1), and the model's batch there is capped at that size;
- every model's rate is scaled alike, down until the packing fits the cluster, or up while
  it still does (spare GPUs add capacity rather than idle).

Between epochs the assignment is fixed: a worker serves only the models it was given,
round-robin, each time the largest batch (up to its cap) that meets the most urgent
request's deadline.
Requests that cannot make it even alone are dropped (``"deadline"``), those of a model no
worker serves this epoch with ``"not provisioned"``.

``rates``: per model, the rate to provision for in each epoch (Shepherd gives Nexus the
peak of each coming window: :func:`peak_rates` computes it from a trace); a model's last
value holds for later epochs. Without it, an epoch provisions for the peak 1 s rate seen
in the epoch before, and the first epoch splits the GPUs by the plan's model weights.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Annotated

import numpy as np

from hetserve.core.errors import HetserveError
from hetserve.core.plan import Plan
from hetserve.core.requests import Request
from hetserve.scheduling.flex import GroupScheduler, GroupWorker, ModelQueue
from hetserve.scheduling.params import Range
from hetserve.scheduling.protocol import Action, ClusterView, Drop, SetTimer, register
from hetserve.workload.trace import Trace


def peak_rates(trace: Trace, epoch_s: float = 60.0, bin_s: float = 1.0) -> dict[str, list[float]]:
    """Per model, the highest rate over ``bin_s`` bins within each epoch of the trace."""
    names = np.array([s.model for s in trace.streams])[trace.stream_idx]
    n_ep = max(1, math.ceil(trace.duration_s / epoch_s))
    out: dict[str, list[float]] = {}
    for m in sorted(set(names.tolist())):
        t = trace.time_s[names == m]
        bins = np.bincount((t // bin_s).astype(int), minlength=int(n_ep * epoch_s / bin_s) + 1)
        per = round(epoch_s / bin_s)
        out[m] = [float(bins[k * per : (k + 1) * per].max(initial=0)) / bin_s for k in range(n_ep)]
    return out


@register("nexus")
class Nexus(GroupScheduler):
    def __init__(
        self,
        epoch_s: Annotated[float, Range(0, lo_open=True)] = 60.0,
        rates: Mapping[str, Sequence[float]] | None = None,
        max_batch: Annotated[int, Range(1)] = 128,
        overhead_s: Annotated[float, Range(0)] = 0.0,
    ) -> None:
        super().__init__(max_batch, overhead_s)
        self.epoch_s = float(epoch_s)
        self.rates = {m: [float(x) for x in v] for m, v in (rates or {}).items()}

    def start(self, view: ClusterView, plan: Plan, now: float) -> list[Action]:
        super().start(view, plan, now)
        self.weights = {m: mp.weight for m, mp in plan.models.items()}
        self.batch: dict[str, int] = {}
        self.slo = {m: mp.slo_s for m, mp in plan.models.items()}
        self.cap: dict[tuple[str, str], int] = {}
        for st in self.models.values():
            lat = st.workers[0].lat[st.name]
            slo = plan.models[st.name].slo_s
            self.batch[st.name] = max(1, sum(1 for t in lat if 2 * t <= slo))
        self.serves: dict[str, list[ModelQueue]] = {}  # worker -> models this epoch
        self.turn: dict[str, int] = {}
        self.epoch = -1
        self.seen: dict[str, list[float]] = {m: [] for m in self.models}  # arrival times
        self._provision(0)
        return [self._next_timer()]

    def _next_timer(self) -> Action:
        return SetTimer((self.epoch + 1) * self.epoch_s, ("nexus", self.epoch + 1))

    # ------------------------------------------------------------------ provisioning
    def _rate(self, m: str, epoch: int) -> float:
        if self.rates.get(m):
            r = self.rates[m]
            return r[min(epoch, len(r) - 1)]
        if epoch == 0:
            return math.nan
        t = np.asarray(self.seen[m])
        lo = (epoch - 1) * self.epoch_s
        t = t[t >= lo]
        if not len(t):
            return 0.0
        return float(np.bincount(((t - lo) // 1.0).astype(int)).max())

    def _provision(self, epoch: int) -> None:
        self.epoch = epoch
        workers = [w for w in self.workers.values() if not w.lost]
        rates = {m: self._rate(m, epoch) for m in self.models}
        if any(math.isnan(r) for r in rates.values()):  # first epoch, no rates: by weight
            total_w = sum(self.weights.values())
            rates = {
                m: len(workers) * self.weights[m] / total_w * self._goodput(m) for m in self.models
            }
        lo = (epoch - 1) * self.epoch_s  # only the last epoch's arrivals matter from now on
        self.seen = {m: [t for t in ts if t >= lo] for m, ts in self.seen.items()}
        assign = self._pack(rates, len(workers))
        self.serves = {w.id: [] for w in self.workers.values()}
        self.cap = {}
        for k, (ms, caps) in enumerate(assign):
            w = workers[k]
            self.serves[w.id] = [self.models[m] for m in ms]
            for m, b in zip(ms, caps, strict=True):
                self.cap[(w.id, m)] = b
        self.turn = dict.fromkeys(self.serves, 0)

    def _lat(self, m: str) -> list[float]:
        return self.models[m].workers[0].lat[m]

    def _goodput(self, m: str) -> float:
        return self.batch[m] / self._lat(m)[self.batch[m] - 1]

    def _pack(self, rates: Mapping[str, float], n: int) -> list[tuple[list[str], list[int]]]:
        """Squishy bin packing: whole GPUs at the full batch for the bulk of each model's
        rate; the rest runs in a duty cycle of half the SLO with the batch that rate fills
        (``ceil(rate x cycle)``), taking ``l(batch) / cycle`` of a GPU; those shares are
        packed first-fit decreasing. Every model's rate is scaled alike, down until it fits
        ``n`` GPUs, or up while it still does (spare GPUs add capacity)."""

        def pack(scale: float) -> list[tuple[list[str], list[int]]] | None:
            gpus: list[tuple[list[str], list[int]]] = []
            free: list[float] = []
            shares = []
            for m in sorted(rates):
                r = rates[m] * scale
                if r <= 0:
                    continue
                full = int(r / self._goodput(m))
                gpus += [([m], [self.batch[m]]) for _ in range(full)]
                free += [0.0] * full
                rest = r - full * self._goodput(m)
                if rest > 1e-9:
                    cycle = self.slo[m] / 2
                    b = min(self.batch[m], math.ceil(rest * cycle))
                    shares.append((self._lat(m)[b - 1] / cycle, m, b))
                if len(gpus) > n:
                    return None
            for f, m, b in sorted(shares, key=lambda x: (-x[0], x[1])):
                for k, room in enumerate(free):
                    if room >= f - 1e-9:
                        gpus[k][0].append(m)
                        gpus[k][1].append(b)
                        free[k] -= f
                        break
                else:
                    gpus.append(([m], [b]))
                    free.append(1.0 - f)
            return gpus if len(gpus) <= n else None

        best = pack(1.0)
        scale = 1.0
        if best is None:
            for _ in range(200):
                scale *= 0.97
                best = pack(scale)
                if best is not None:
                    break
            else:
                raise HetserveError(f"nexus: cannot pack {len(rates)} models onto {n} GPUs")
        else:
            for _ in range(200):
                nxt = pack(scale * 1.03)
                if nxt is None or len(nxt) == len(best) == n:
                    break
                scale *= 1.03
                best = nxt
        return best

    # ------------------------------------------------------------------ serving
    def _batch_gen(
        self, w: GroupWorker, now: float, out: list[Action]
    ) -> tuple[ModelQueue | None, int]:
        mine = self.serves.get(w.id, [])
        k0 = self.turn.get(w.id, 0)
        for k in range(len(mine)):
            st = mine[(k0 + k) % len(mine)]
            if not st.queue:
                continue
            self._prune(st, now, out)
            b = min(self._fit(w, st, now), self.cap[(w.id, st.name)])
            if b and st.queue[0][2].rows <= b:
                self.turn[w.id] = (k0 + k + 1) % len(mine)
                return st, b
        return None, 0

    def _arrived(self, st: ModelQueue, now: float, out: list[Action]) -> None:
        self._prune(st, now, out)
        served = False
        for w in st.workers:
            if st not in self.serves.get(w.id, ()) or w.lost:
                continue
            served = True
            if not st.queue:
                return
            if w.bid == 0:
                self._on_free(w, now, out)
        if not served and st.queue:
            reqs = tuple(r for _, _, r in st.queue)
            st.queue.clear()
            st.rows = 0
            out.append(Drop(reqs, "not_provisioned"))

    def on_arrival(self, request: Request, now: float) -> list[Action]:
        if not self.rates:
            self.seen[request.model].append(now)
        return super().on_arrival(request, now)

    def on_timer(self, token: object, now: float) -> list[Action]:
        if not (isinstance(token, tuple) and token[0] == "nexus"):
            return []
        self._provision(int(token[1]))
        out: list[Action] = [self._next_timer()]
        for st in self.models.values():
            if st.queue:
                self._arrived(st, now, out)
        return out
