"""DeepPlan's load plans (EuroSys 2023, section 4.3), and the exact optimum.

Given a model's ``layers.csv`` rows (estimated or measured, ``core.layertable``):

- ``baseline``: load every layer, then execute;
- ``pipeswitch``: load every layer over the primary's host link, executing each as soon
  as it has arrived (PipeSwitch);
- ``dha``: Algorithm 1 as the paper writes it (:func:`algorithm1`);
- ``pt``: parallel transmission: the model cut into ``parallelism`` contiguous parts of
  equal weight bytes, part ``k`` loaded over GPU ``k``'s host link and forwarded over
  NVLink (section 4.3.3: every layer of parts 2.. is loaded);
- ``pt+dha``: PT's parts, and Algorithm 1 over the first part's layers, with the stalls
  taken from the PT timeline;
- ``optimal`` (beyond the paper): the DHA set that minimises the single-GPU cold-start
  latency, exactly (:func:`optimal_dha`).

The parallelism comes from the cluster (:func:`pt_parallelism`): one GPU per PCIe switch,
all joined by NVLink to the primary; ``p3-8xlarge`` gives 2 (section 4.3.3).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hetserve.core.cluster import Cluster
from hetserve.core.coldstart import (
    DHA,
    LOAD,
    PLAN_KINDS,
    LoadPlan,
    ModelLoadPlan,
    Timeline,
    timeline,
)
from hetserve.core.errors import HetserveError, unknown
from hetserve.core.gpus import GpuType
from hetserve.core.graph import balanced_partition
from hetserve.core.latency import LatencyModel
from hetserve.core.layertable import (
    LayerRow,
    estimate_layer_rows,
    read_layers_csv,
    select_rows,
)
from hetserve.core.models import ZOO, ModelCatalog
from hetserve.core.plan import ModelPlan, Pipeline, Plan, Stage

EPS_S = 1e-12


def pt_parallelism(cluster: Cluster, cap: int | None = None) -> tuple[int, float | None]:
    """How many GPUs' host links a cold start may use (DeepPlan section 4.3.3), and the
    NVLink bandwidth (GB/s) between them: the largest set of GPUs of one node under
    *different* PCIe switches, every pair joined by NVLink. A node without PCIe switch
    groups counts each GPU as its own switch. 1 when no two qualify."""
    best, bw_best = 1, None
    for node in cluster.nodes:
        reps = [min(v) for v in _switch_groups(node).values()]
        pairs = {frozenset(p) for p in node.nvlink_pairs}
        for k in range(len(reps), 1, -1):
            if k <= best:
                break
            for combo in itertools.combinations(reps, k):
                if all(frozenset(p) in pairs for p in itertools.combinations(combo, 2)):
                    bws = [node.gpus[i].type.nvlink_gbps or 0.0 for i in combo]
                    if min(bws) > 0:
                        best, bw_best = k, min(bws)
                        break
    if cap is not None:
        best = max(1, min(best, cap))
    return best, (bw_best if best > 1 else None)


def _switch_groups(node: Any) -> dict[object, list[int]]:
    """A node's GPU indices by PCIe switch (a GPU without one: a switch of its own)."""
    groups: dict[object, list[int]] = {}
    for g in node.gpus:
        sw = node.pcie_switch_of[g.index] if node.pcie_switch_of else None
        groups.setdefault(sw if sw is not None else ("own", g.index), []).append(g.index)
    return groups


def pt_gpus(node: Any, primary: int, n_parts: int) -> list[int]:
    """The GPUs of ``node`` whose host links a cold start on GPU ``primary`` loads parts
    0.. ``n_parts - 1`` over: the primary itself, then one GPU under each other PCIe
    switch, every one joined by NVLink to the primary and to each other (the lowest index
    of its switch where several qualify; the switches in index order), as
    :func:`pt_parallelism` counts them. On ``p3-8xlarge`` GPU 0 pairs with GPU 2 and GPU
    1 with GPU 3, not 0 with 1 (which share a switch). A one-line error when the node has
    fewer."""
    groups = _switch_groups(node)
    mine = next(k for k, v in groups.items() if primary in v)
    pairs = {frozenset(p) for p in node.nvlink_pairs}
    chosen = [primary]

    def joined(g: int) -> bool:
        return all(frozenset((g, c)) in pairs for c in chosen)

    for k in sorted((k for k in groups if k != mine), key=lambda k: min(groups[k])):
        if len(chosen) == n_parts:
            break
        g = next((g for g in sorted(groups[k]) if joined(g)), None)
        if g is not None:
            chosen.append(g)
    if len(chosen) < n_parts:
        raise HetserveError(
            f"{node.name}: a load plan over {n_parts} host links needs {n_parts - 1} GPU(s) "
            f"under other PCIe switches joined by NVLink to GPU {primary}; the node has "
            f"{len(chosen) - 1}"
        )
    return chosen


def pt_parts(rows: Sequence[LayerRow], n_parts: int) -> list[int]:
    """Per layer, the part (0..n_parts-1) of a cut into contiguous parts of about equal
    weight bytes (the largest part as small as possible)."""
    n = len(rows)
    n_parts = max(1, min(n_parts, n))
    bounds = balanced_partition([float(r.param_bytes) for r in rows], n_parts)
    out = [0] * n
    for k in range(n_parts):
        for i in range(bounds[k], bounds[k + 1]):
            out[i] = k
    return out


class _Arrays:
    """A layer table as arrays, for the fast (vectorised) timeline Algorithm 1 re-runs
    after every change: the same numbers as :func:`~hetserve.core.coldstart.timeline`
    (tests hold them equal), without building plan objects."""

    def __init__(self, rows: Sequence[LayerRow], parts: Sequence[int], nvlink_gbps: float | None):
        self.load = np.array([r.load_us for r in rows]) * 1e-6
        self.g = np.array([r.exec_gpu_us for r in rows]) * 1e-6
        self.h = np.array([r.exec_host_us for r in rows]) * 1e-6
        self.weighted = np.array([r.param_bytes > 0 for r in rows])
        self.parts = np.asarray(parts, dtype=np.int64)
        self.fwd = (
            np.array([r.param_bytes for r in rows], dtype=float) / (nvlink_gbps * 1e9)
            if nvlink_gbps
            else np.zeros(len(rows))
        )
        self.n_parts = int(self.parts.max(initial=0)) + 1

    def stalls(self, dha: np.ndarray) -> np.ndarray:
        """Per layer, its stall under the pipelined plan with ``dha`` (bool per layer)."""
        loaded = self.weighted & ~dha
        ready = np.zeros(len(self.g))
        for k in range(self.n_parts):
            sel = loaded & (self.parts == k)
            if not sel.any():
                continue
            arrive = np.cumsum(self.load[sel])
            if k > 0:  # forwarded over NVLink in order: f_i = max(f_{i-1}, arrive_i) + fwd_i
                f = self.fwd[sel]
                cf = np.cumsum(f)
                arrive = cf + np.maximum.accumulate(arrive - (cf - f))
            ready[sel] = arrive
        x = np.where(dha, self.h, self.g)
        cx = np.cumsum(x)
        # e_i = max(e_{i-1}, ready_i) + x_i  =>  e_i = cx_i + max_{k<=i}(ready_k - cx_{k-1})
        e = cx + np.maximum.accumulate(ready - (cx - x))
        prev = np.concatenate([[0.0], e[:-1]])
        return np.maximum(ready - prev, 0.0)


def algorithm1(
    rows: Sequence[LayerRow],
    parts: Sequence[int] | None = None,
    nvlink_gbps: float | None = None,
    kind: str = "dha",
) -> LoadPlan:
    """DeepPlan's Algorithm 1: for each layer with a stall, take earlier layers (not yet
    DHA, sorted by PerfDiff ascending) onto direct host access while the stall exceeds
    their PerfDiff, reducing it by their load time plus their PerfDiff; once a layer's
    stall is eliminated (or its candidates exhausted), the pipeline is recomputed from the
    new plan. With ``parts`` (PT), only layers loaded over the primary's link (part 0)
    are candidates: the others' loads are not on the primary's link."""
    n = len(rows)
    ps = list(parts) if parts is not None else [0] * n
    if any(p > 0 for p in ps) and not nvlink_gbps:
        timeline(rows, LoadPlan.from_sets(kind, n, (), ps))  # the one-line NVLink error
    arr = _Arrays(rows, ps, nvlink_gbps)
    dha = np.zeros(n, dtype=bool)
    perf = [r.perf_diff_us for r in rows]
    stalls = arr.stalls(dha)
    for i in range(n):
        stall_us = float(stalls[i]) * 1e6
        if stall_us <= EPS_S * 1e6:
            continue
        cands = sorted(
            (j for j in range(i + 1) if not dha[j] and ps[j] == 0 and rows[j].param_bytes > 0),
            key=lambda j: (perf[j], j),
        )
        changed = False
        for j in cands:
            if stall_us < perf[j]:
                break
            dha[j] = True
            changed = True
            stall_us -= rows[j].load_us + perf[j]
            if stall_us <= 0:
                break
        if changed:
            stalls = arr.stalls(dha)
    return LoadPlan.from_sets(kind, n, [i for i in range(n) if dha[i]], ps)


def optimal_dha(rows: Sequence[LayerRow], upper_bound_s: float | None = None) -> LoadPlan:
    """The DHA set with the least single-GPU cold-start latency, exactly.

    The timeline's recursion is ``e' = max(e, c + load) + exec_gpu`` for a loaded layer
    (``c' = c + load``) and ``e' = e + exec_host`` for a DHA one, where ``e`` is the
    execution stream's end and ``c`` the load stream's. A partial plan is worth keeping
    only if no other has both a smaller ``e`` and a smaller ``c``, so a dynamic programme
    over layers keeps the Pareto front of ``(e, c)`` pairs, pruned by a lower bound (``e``
    plus the least possible execution of the remaining layers) against the best complete
    plan known (``upper_bound_s``, default: PipeSwitch's and Algorithm 1's)."""
    n = len(rows)
    if n == 0:
        return LoadPlan("optimal", (), ())
    load = np.array([r.load_us * 1e-6 for r in rows])
    g = np.array([r.exec_gpu_us * 1e-6 for r in rows])
    h = np.array([r.exec_host_us * 1e-6 for r in rows])
    weighted = np.array([r.param_bytes > 0 for r in rows])
    rest_min = np.concatenate([np.cumsum(np.where(weighted, np.minimum(g, h), g)[::-1])[::-1], [0]])
    if upper_bound_s is None:
        upper_bound_s = min(
            timeline(rows, LoadPlan.all_loaded(n)).latency_s,
            timeline(rows, algorithm1(rows)).latency_s,
        )
    ub = upper_bound_s * (1 + 1e-9) + 1e-15
    e = np.zeros(1)
    c = np.zeros(1)
    # decisions as a parent-pointer forest: per layer, per state, (parent index, is_dha)
    parents: list[np.ndarray] = []
    choices: list[np.ndarray] = []
    for i in range(n):
        if not weighted[i]:
            e = e + g[i]
            parents.append(np.arange(len(e)))
            choices.append(np.zeros(len(e), dtype=bool))
            continue
        e_load = np.maximum(e, c + load[i]) + g[i]
        c_load = c + load[i]
        e_dha = e + h[i]
        ee = np.concatenate([e_load, e_dha])
        cc = np.concatenate([c_load, c])
        par = np.concatenate([np.arange(len(e)), np.arange(len(e))])
        ch = np.concatenate([np.zeros(len(e), dtype=bool), np.ones(len(e), dtype=bool)])
        keep = ee + rest_min[i + 1] <= ub
        ee, cc, par, ch = ee[keep], cc[keep], par[keep], ch[keep]
        # Pareto front: sort by c then e; keep a state only if its e beats every smaller c
        order = np.lexsort((ee, cc))
        ee, cc, par, ch = ee[order], cc[order], par[order], ch[order]
        best_before = np.minimum.accumulate(np.concatenate([[np.inf], ee[:-1]]))
        front = ee < best_before
        e, c = ee[front], cc[front]
        parents.append(par[front])
        choices.append(ch[front])
        if len(e) == 0:
            raise HetserveError("optimal_dha: the upper bound pruned every plan (a bug)")
    k = int(np.argmin(e))
    dha = []
    for i in range(n - 1, -1, -1):
        if choices[i][k]:
            dha.append(i)
        k = int(parents[i][k])
    return LoadPlan.from_sets("optimal", n, sorted(dha))


@dataclass(frozen=True)
class PlannedLoad:
    """A load plan with its predicted cold-start timeline and warm latency."""

    model: str
    plan: LoadPlan
    timeline: Timeline
    warm_s: float
    parallelism: int
    nvlink_gbps: float | None

    @property
    def cold_s(self) -> float:
        return self.timeline.latency_s


def make_load_plan(
    kind: str,
    rows: Sequence[LayerRow],
    parallelism: int = 1,
    nvlink_gbps: float | None = None,
) -> LoadPlan:
    """The load plan of ``kind`` (one of :data:`~hetserve.core.coldstart.PLAN_KINDS`)."""
    n = len(rows)
    if kind not in PLAN_KINDS:
        raise unknown("load plan kind", kind, PLAN_KINDS)
    if kind in ("pt", "pt+dha"):
        if parallelism < 2 or not nvlink_gbps:
            raise HetserveError(
                f"load plan {kind}: parallel transmission needs two or more GPUs under "
                f"different PCIe switches joined by NVLink (the cluster gives "
                f"{parallelism} GPU{'s' if parallelism != 1 else ''}"
                f"{'' if nvlink_gbps else ', no NVLink'})"
            )
        parts = pt_parts(rows, parallelism)
        if kind == "pt":
            return LoadPlan("pt", (LOAD,) * n, tuple(parts))
        return algorithm1(rows, parts, nvlink_gbps, kind="pt+dha")
    if kind == "baseline":
        return LoadPlan.all_loaded(n, "baseline", pipelined=False)
    if kind == "pipeswitch":
        return LoadPlan.all_loaded(n, "pipeswitch")
    if kind == "dha":
        return algorithm1(rows)
    return optimal_dha(rows)


def plan_load(
    model: str,
    kind: str,
    rows: Sequence[LayerRow],
    parallelism: int = 1,
    nvlink_gbps: float | None = None,
) -> PlannedLoad:
    from hetserve.core.coldstart import warm_latency_s

    p = make_load_plan(kind, rows, parallelism, nvlink_gbps)
    tl = timeline(rows, p, nvlink_gbps)
    par = p.n_parts
    return PlannedLoad(model, p, tl, warm_latency_s(rows, p), par, nvlink_gbps if par > 1 else None)


def dha_summary(rows: Sequence[LayerRow], plan: LoadPlan) -> list[str]:
    """``"index:kind"`` of the DHA layers (the paper's Table 3 excerpts)."""
    return [f"{i}:{rows[i].kind}" for i, m in enumerate(plan.modes) if m == DHA]


# ------------------------------------------------------------------ plans for a cluster


def layer_rows_for(
    model: str,
    gpu: GpuType,
    batch: int = 1,
    layers_csv: str | None = None,
    model_catalog: ModelCatalog = ZOO,
) -> tuple[list[LayerRow], str]:
    """A model's ``layers.csv`` rows on ``gpu``: from a file (measured or estimated), or
    estimated from its layer table (``model_catalog``'s). Returns the rows and where they
    came from."""
    from hetserve.core.layerlatency import base_model

    arch = base_model(model)
    if layers_csv:
        rows = select_rows(read_layers_csv(layers_csv), arch, gpu.name, batch, layers_csv)
        if model_catalog.has_layer_table(arch):
            want = len(model_catalog.layer_table(arch))
            if len(rows) != want:
                raise HetserveError(
                    f"{layers_csv}: model {arch} has {len(rows)} layers; its layer table has "
                    f"{want} (rows 0..{want - 1}, as hetserve profile estimate --layers "
                    f"writes them)"
                )
        return rows, layers_csv
    return estimate_layer_rows(model_catalog.layer_table(arch), gpu, batch), "estimate"


def plan_cold_starts(
    cluster: Cluster,
    models: Sequence[str],
    latency: LatencyModel | None,
    kind: str = "pt+dha",
    slos_s: dict[str, float] | None = None,
    batch: int = 1,
    layers_csv: str | None = None,
    pt_max: int | None = None,
    gpu: str | None = None,
    progress: Callable[[], None] | None = None,
    model_catalog: ModelCatalog = ZOO,
) -> tuple[Plan, dict[str, dict[str, PlannedLoad]]]:
    """A DeepPlan plan: every model served whole on every GPU of type ``gpu`` (the
    cluster's only type by default), one instance per GPU, with the ``kind`` load plan per
    model. Returns the plan and, per model, every kind's planned load (for reports)."""
    types = [g.name for g in cluster.gpu_types()]
    if gpu is None:
        if len(types) > 1:
            raise HetserveError(
                f"cluster {cluster.name} has GPU types {', '.join(types)}: name one with --gpu"
            )
        gpu = types[0]
    g = cluster.catalog.get(gpu)
    if g.name not in types:
        raise HetserveError(f"--gpu {gpu}: cluster {cluster.name} has {', '.join(types)}")
    if kind not in PLAN_KINDS:
        raise unknown("load plan kind", kind, PLAN_KINDS)
    par, nv = pt_parallelism(cluster, pt_max)
    if kind in ("pt", "pt+dha") and par < 2:
        raise HetserveError(
            f"--kind {kind}: cluster {cluster.name} has no two GPUs under different PCIe "
            f"switches joined by NVLink (parallel transmission needs them)"
            + (f"; --pt-max {pt_max} allows one" if pt_max == 1 else "")
        )
    n_gpus = cluster.gpu_counts()[g.name]
    slos_s = slos_s or {}
    models_out: dict[str, ModelPlan] = {}
    load_plans: dict[str, ModelLoadPlan] = {}
    every: dict[str, dict[str, PlannedLoad]] = {}
    by_arch: dict[str, tuple[dict[str, PlannedLoad], str]] = {}
    from hetserve.core.layerlatency import base_model

    for m in models:
        arch = base_model(m)
        if arch not in by_arch:  # instances of one architecture share its plans
            rows, source = layer_rows_for(arch, g, batch, layers_csv, model_catalog)
            kinds = [k for k in PLAN_KINDS if k not in ("pt", "pt+dha") or par >= 2]
            by_arch[arch] = ({k: plan_load(arch, k, rows, par, nv) for k in kinds}, source)
        every[m], source = by_arch[arch]
        chosen = every[m][kind]
        tl = chosen.timeline
        load_plans[m] = ModelLoadPlan(
            chosen.plan, g.name, batch, chosen.parallelism, chosen.nvlink_gbps, source,
            {
                "cold_ms": chosen.cold_s * 1e3,
                "warm_ms": chosen.warm_s * 1e3,
                "stall_ms": tl.total_stall_s * 1e3,
                "gpu_mb": tl.gpu_bytes / 1e6,
                "dha_mb": tl.dha_bytes / 1e6,
            },
        )  # fmt: skip
        nb = latency.num_blocks(m) if latency is not None else 1
        warm = chosen.warm_s
        stage = Stage((0, nb), g.name, 1, n_gpus, warm)
        models_out[m] = ModelPlan(
            slos_s.get(m, 0.1), 1.0, (Pipeline((stage,), batch, warm, n_gpus * batch / warm),)
        )
        if progress is not None:
            progress()
    plan = Plan(
        models_out,
        shared_pools=True,
        meta={
            "planner": "deepplan",
            "objective": {"kind": kind},
            "solve": {"parallelism": par, "nvlink_gbps": nv, "gpu": g.name, "batch": batch},
        },
        load_plans=load_plans,
    )
    return plan, every
