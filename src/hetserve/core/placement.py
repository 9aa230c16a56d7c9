"""Placements: a plan bound to concrete worker slots (node, GPU, slice).

Worker ids are ``"<gpu id>:<slice>/<share>"``, e.g. ``"l4-0/gpu0:0/1"``. :func:`bind` places
a plan by its GPU types; a plan that pins its own placement (RAMPA's: every stage on a
chosen GPU) carries it as ``Plan.binding``, written to the plan file as ``binding``
(``docs/formats.md#plans``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from hetserve.core.cluster import Cluster
from hetserve.core.errors import ConfigError, HetserveError


class Plan(Protocol):
    """What placing reads of a plan (``core.plan.Plan``; a Protocol here, so that this
    module, which ``core.plan`` imports, needs nothing of it)."""

    models: Mapping[str, Any]  # name -> ModelPlan (pipelines of stages)
    groups: tuple[Any, ...]  # HERD's serving groups
    shared_pools: bool
    binding: Placement | None  # RAMPA's: every stage bound to a chosen GPU


@dataclass(frozen=True)
class WorkerSlot:
    id: str
    gpu_id: str
    node: str
    gpu: str  # GPU type name
    share: int
    slice: int


@dataclass(frozen=True)
class Placement:
    workers: tuple[WorkerSlot, ...]
    # (model, pipeline index, stage index) -> worker ids serving that stage
    stages: dict[tuple[str, int, int], tuple[str, ...]]
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)  # serving group -> workers

    def worker(self, wid: str) -> WorkerSlot:
        for w in self.workers:
            if w.id == wid:
                return w
        raise HetserveError(f"placement has no worker {wid!r}")

    def to_json(self) -> dict[str, Any]:
        """The plan file's ``binding`` (docs/formats.md#plans)."""
        return {
            "workers": [
                {"id": w.id, "gpu_id": w.gpu_id, "node": w.node, "gpu": w.gpu,
                 "share": w.share, "slice": w.slice}
                for w in self.workers
            ],
            "stages": [
                {"model": m, "pipeline": pi, "stage": si, "workers": list(ws)}
                for (m, pi, si), ws in self.stages.items()
            ],
        }  # fmt: skip

    @staticmethod
    def from_json(data: Any, source: str) -> Placement:
        try:
            workers = tuple(
                WorkerSlot(str(w["id"]), str(w["gpu_id"]), str(w["node"]), str(w["gpu"]),
                           int(w["share"]), int(w["slice"]))
                for w in data["workers"]
            )  # fmt: skip
            known = {w.id for w in workers}
            stages: dict[tuple[str, int, int], tuple[str, ...]] = {}
            for k, st in enumerate(data["stages"]):
                ws = tuple(str(x) for x in st["workers"])
                bad = [x for x in ws if x not in known]
                if bad or not ws:
                    raise ConfigError(
                        f"{source}.stages[{k}].workers: expected ids from {source}.workers, "
                        f"got {bad or 'none'}"
                    )
                stages[(str(st["model"]), int(st["pipeline"]), int(st["stage"]))] = ws
        except KeyError as e:
            raise ConfigError(f"{source}: missing field {e}") from None
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{source}: malformed binding ({e})") from None
        return Placement(workers, stages)

    def check_against(self, plan: Plan, cluster: Cluster, source: str) -> None:
        """Every stage of the plan has workers, on GPUs of the cluster of the stage's type."""
        for name, m in plan.models.items():
            for pi, p in enumerate(m.pipelines):
                for si in range(len(p.stages)):
                    if (name, pi, si) not in self.stages:
                        raise ConfigError(
                            f"{source}: no workers for {name} pipeline {pi} stage {si}"
                        )
        by_id = {g.id: g for g in cluster.gpus}
        for w in self.workers:
            g = by_id.get(w.gpu_id)
            if g is None or g.type.name not in (w.gpu, _canonical(cluster, w.gpu)):
                raise ConfigError(
                    f"{source}: worker {w.id} is on GPU {w.gpu_id} ({w.gpu}), which cluster "
                    f"{cluster.name} does not have"
                )


def _canonical(cluster: Cluster, gpu: str) -> str | None:
    """A GPU type's catalog name, None for a name the catalog does not know."""
    try:
        return cluster.catalog.get(gpu).name
    except HetserveError:
        return None


def worker_id(gpu_id: str, slice_: int, share: int) -> str:
    return f"{gpu_id}:{slice_}/{share}"


def bind(
    plan: Plan, cluster: Cluster, prefer: Mapping[str, frozenset[tuple]] | None = None
) -> Placement:
    """Bind a plan to worker slots.

    Shared-pool plans: every stage on GPU type ``t`` with share 1 gets every GPU of that type.
    Serving groups: each group takes its GPUs (round-robin over nodes), and every model of
    the group is served whole by all of them.
    Otherwise slices are taken GPU by GPU, spreading each stage's GPUs round-robin over
    nodes (to balance NIC load); slices of one GPU stay in one pool.
    A plan with a ``binding`` of its own is placed there.
    ``prefer`` (re-planning: ``control.reconcile.placement_hint``): per GPU id, the
    ``(model, blocks, share)`` stages it served before; a stage takes such GPUs first, so
    that a new plan moves as few workers as it can.
    """
    if plan.binding is not None:
        plan.binding.check_against(plan, cluster, "plan: binding")
        return plan.binding
    by_type: dict[str, list] = {}
    for g in cluster.gpus:
        by_type.setdefault(g.type.name, []).append(g)
    slots: dict[str, WorkerSlot] = {}
    stages: dict[tuple[str, int, int], tuple[str, ...]] = {}

    def add(g: Any, s: int, k: int) -> str:
        wid = worker_id(g.id, s, k)
        slots.setdefault(wid, WorkerSlot(wid, g.id, g.node, g.type.name, k, s))
        return wid

    if plan.shared_pools:
        # (one tuple per GPU type and share, shared by its stages: schedulers key pools by
        # their workers, and equal keys that are one object compare at once)
        pools: dict[tuple[str, int], tuple[str, ...]] = {}
        for name, m in plan.models.items():
            for pi, p in enumerate(m.pipelines):
                for si, st in enumerate(p.stages):
                    gt = cluster.catalog.get(st.gpu).name
                    gpus = by_type.get(gt, [])
                    if not gpus:
                        raise HetserveError(
                            f"plan uses {gt}, which cluster {cluster.name} does not have"
                        )
                    pool = pools.get((gt, st.share))
                    if pool is None:
                        pool = pools[(gt, st.share)] = tuple(
                            add(g, s, st.share) for g in gpus for s in range(st.share)
                        )
                    stages[(name, pi, si)] = pool
        return Placement(tuple(slots.values()), stages)

    # disjoint pools and groups: order each type's GPUs round-robin across nodes
    free: dict[str, list] = {}
    for t, gpus in by_type.items():
        per_node: dict[str, list] = {}
        for g in gpus:
            per_node.setdefault(g.node, []).append(g)
        order, lists = [], list(per_node.values())
        while any(lists):
            for lst in lists:
                if lst:
                    order.append(lst.pop(0))
        free[t] = order
    if plan.groups:
        by_group: dict[str, tuple[str, ...]] = {}
        for grp in plan.groups:
            gt = cluster.catalog.get(grp.gpu).name
            if len(free.get(gt, [])) < grp.gpus:
                raise HetserveError(
                    f"plan needs {grp.gpus} {gt} GPUs for group {grp.name}; cluster "
                    f"{cluster.name} has {len(free.get(gt, []))} left"
                )
            gpus, free[gt] = free[gt][: grp.gpus], free[gt][grp.gpus :]
            ids = tuple(add(g, 0, 1) for g in gpus)
            by_group[grp.name] = ids
            for name in grp.models:
                for pi, p in enumerate(plan.models[name].pipelines):
                    if len(p.stages) != 1:
                        raise HetserveError(
                            f"group {grp.name}: {name} pipeline {pi} has {len(p.stages)} "
                            f"stages; serving groups run whole models"
                        )
                    # a model in several groups: all their GPUs (requests go by stream)
                    stages[(name, pi, 0)] = stages.get((name, pi, 0), ()) + ids
        return Placement(tuple(slots.values()), stages, by_group)
    for name, m in plan.models.items():
        for pi, p in enumerate(m.pipelines):
            for si, st in enumerate(p.stages):
                gt = cluster.catalog.get(st.gpu).name
                need = math.ceil(st.instances / st.share)
                if len(free.get(gt, [])) < need:
                    raise HetserveError(
                        f"plan needs {need} more {gt} GPUs for {name} "
                        f"pipeline {pi} stage {si}; cluster {cluster.name} has "
                        f"{len(free.get(gt, []))} left"
                    )
                if prefer:  # GPUs that served this stage before come first
                    key = (name, st.blocks, st.share)
                    held = [g for g in free[gt] if key in prefer.get(g.id, ())]
                    if held:
                        free[gt] = held + [g for g in free[gt] if g not in held]
                gpus, free[gt] = free[gt][:need], free[gt][need:]
                ids = [add(g, s, st.share) for g in gpus for s in range(st.share)]
                stages[(name, pi, si)] = tuple(ids[: st.instances])
    return Placement(tuple(slots.values()), stages)


def gpus_needed(plan: Plan, catalog: Any) -> dict[str, int]:
    """The physical GPUs a plan needs, per type (catalog names): what :func:`bind` takes
    from a cluster (a shared pool takes every GPU of its type, and needs at least one)."""
    need: Counter[str] = Counter()
    if plan.binding is not None:
        seen = {(s.gpu_id, catalog.get(s.gpu).name) for s in plan.binding.workers}
        need.update(t for _, t in seen)
        return dict(need)
    if plan.groups:
        for grp in plan.groups:
            need[catalog.get(grp.gpu).name] += grp.gpus
        return dict(need)
    for m in plan.models.values():
        for p in m.pipelines:
            for st in p.stages:
                t = catalog.get(st.gpu).name
                if plan.shared_pools:
                    need[t] = 1
                else:
                    need[t] += math.ceil(st.instances / st.share)
    return dict(need)
