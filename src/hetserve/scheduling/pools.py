"""Who serves what: the plan's pipelines bound to worker ids, and per-worker busy counts."""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass

from hetserve.core.errors import HetserveError
from hetserve.core.plan import Plan
from hetserve.core.requests import Request
from hetserve.scheduling.protocol import ClusterView, StageReport, WorkerId
from hetserve.scheduling.rows import pop_edf


@dataclass(frozen=True)
class PipelinePool:
    model: str
    index: int
    batch: int
    stages: tuple[tuple[tuple[int, int], tuple[WorkerId, ...]], ...]  # (blocks, workers)


class Pools:
    """Pipelines per model with their workers; outstanding stages per worker."""

    def __init__(self, view: ClusterView, plan: Plan) -> None:
        self.pipelines: dict[str, list[PipelinePool]] = {}
        # the models by the workers of their first stages (in plan order), then by worker:
        # a plan that puts 100 models on the same 1,000 workers visits each worker once
        firsts: dict[tuple[WorkerId, ...], list[str]] = {}
        same: dict[tuple[WorkerId, ...], tuple[WorkerId, ...]] = {}
        for name, m in plan.models.items():
            pipes = []
            for pi, p in enumerate(m.pipelines):
                stages = []
                for si, st in enumerate(p.stages):
                    ws = view.placement.stages.get((name, pi, si), ())
                    if not ws:
                        raise HetserveError(
                            f"placement has no workers for {name} pipeline {pi} stage {si}"
                        )
                    # (one tuple for equal lists of workers: the schedulers key their pools
                    # by it, and a dict compares a key that is not the same object
                    # element by element: 1,000 workers each)
                    t = tuple(ws)
                    t = same.setdefault(t, t)
                    stages.append((st.blocks, t))
                    if si == 0:
                        names = firsts.get(t)
                        if names is None:
                            firsts[t] = [name]
                        elif names[-1] != name:  # (a model's pipelines come together)
                            names.append(name)
                pipes.append(PipelinePool(name, pi, p.batch, tuple(stages)))
            self.pipelines[name] = pipes
        of: dict[WorkerId, list[list[str]]] = {}  # (workers in the order first met)
        for ws, names in firsts.items():
            for w in ws:
                got = of.get(w)
                if got is None:
                    of[w] = [names]
                elif got[-1] is not names:
                    got.append(names)
        rank = {name: i for i, name in enumerate(plan.models)}
        self.models_of: dict[WorkerId, list[str]] = {
            w: list(got[0])
            if len(got) == 1
            else sorted({n for ns in got for n in ns}, key=rank.__getitem__)
            for w, got in of.items()
        }
        self.outstanding: dict[WorkerId, int] = {w: 0 for w in view.workers}
        self.lost: set[WorkerId] = set()
        self._routes: dict[int, tuple[WorkerId, ...]] = {}
        # ``whole_model_workers`` by its pipelines' lists of workers
        self._whole: dict[tuple[tuple[WorkerId, ...], ...], list[WorkerId]] = {}

    def whole_model_workers(self, model: str) -> list[WorkerId]:
        """Workers of the model's single-stage pipelines (deduplicated, in plan order; a
        new list each call). Models whose pipelines have the same lists of workers are
        deduplicated once between them (100 models on the same 1,000 workers: once)."""
        pipes = self.pipelines.get(model, [])
        for p in pipes:
            if len(p.stages) != 1:
                raise HetserveError(
                    f"{model}: this scheduler runs whole models, but the plan "
                    f"has a {len(p.stages)}-stage pipeline"
                )
        key = tuple([p.stages[0][1] for p in pipes])
        got = self._whole.get(key)
        if got is None:
            out: dict[WorkerId, None] = {}  # (a dict: plan order, and O(1) membership)
            for ws in key:
                out.update(dict.fromkeys(ws))
            got = self._whole[key] = list(out)
        return list(got)

    def dispatched(self, batch_id: int, workers: tuple[WorkerId, ...]) -> None:
        self._routes[batch_id] = workers
        for w in workers:
            self.outstanding[w] += 1

    def reported(self, r: StageReport) -> list[WorkerId]:
        """Update counts from a stage report; returns the workers that became idle."""
        if r.kind != "stage" or r.batch_id not in self._routes:
            return []
        route = self._routes[r.batch_id]
        freed = list(route[r.stage :]) if not r.completed else [route[r.stage]]
        if not r.completed or r.last:
            del self._routes[r.batch_id]
        out = []
        for w in freed:
            self.outstanding[w] -= 1
            if self.outstanding[w] == 0 and w not in self.lost:
                out.append(w)
        return out

    def idle(self, w: WorkerId) -> bool:
        return self.outstanding[w] == 0 and w not in self.lost


class DeadlineQueues:
    """Per-model queues of waiting requests, most urgent first (a heap by deadline, then
    request id)."""

    def __init__(self, models: Iterable[str], scheduler: str) -> None:
        self.scheduler = scheduler
        self._q: dict[str, list[tuple[float, int, Request]]] = {m: [] for m in models}
        self.rows: dict[str, int] = dict.fromkeys(self._q, 0)  # each queue's rows together

    def __getitem__(self, model: str) -> list[tuple[float, int, Request]]:
        return self._q[model]

    def push(self, r: Request) -> None:
        q = self._q.get(r.model)
        if q is None:
            raise HetserveError(f"{self.scheduler}: no pipeline serves model {r.model!r}")
        heapq.heappush(q, (r.deadline_s, r.id, r))
        self.rows[r.model] += r.rows

    def pop_head(self, model: str) -> Request:
        """The most urgent request, off the queue."""
        r = heapq.heappop(self._q[model])[2]
        self.rows[model] -= r.rows
        return r

    def pop(self, model: str, limit: int) -> tuple[tuple[Request, ...], int]:
        """The most urgent requests whose rows fit in ``limit`` (``rows.pop_edf``)."""
        reqs, n = pop_edf(self._q[model], limit, self.rows[model])
        self.rows[model] -= n
        return reqs, n

    def requeue(self, requests: Iterable[Request]) -> None:
        """Put preempted requests back (they keep their deadlines)."""
        for r in requests:
            self.push(r)

    def head_deadline(self, model: str) -> float:
        q = self._q[model]
        return q[0][0] if q else math.inf
