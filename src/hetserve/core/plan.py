"""Plans and placements.

A **Plan** says, per model, which pooled pipelines serve it: each pipeline is a sequence of
stages (a contiguous block range on a GPU type, a virtual-GPU share ``k`` = one of ``k`` MPS
slices, a number of instances) with one unified batch size; the planner records the planned
latency and throughput. Plans are JSON-serialisable (``Plan.to_json`` / ``Plan.load``; format
in ``docs/formats.md``).

A plan holds what every planner decides: pipelines and shares (PPipe), serving groups
(HERD), load plans (DeepPlan), stream assignments (MagicBatch), a pinned binding of stages to
GPUs and pinned cut paths (RAMPA), and the scheduler that serves it by default. A
**Placement** (``core.placement``) binds a plan to concrete worker slots.

:func:`default_plan` is the plan used when none is given: every model may run whole on every
GPU of the cluster (share 1), one pipeline per GPU type, the pools shared by all models.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetserve.core.assignment import StreamAssignment
from hetserve.core.cluster import Cluster
from hetserve.core.coldstart import ModelLoadPlan
from hetserve.core.errors import ConfigError, HetserveError
from hetserve.core.files import read_json
from hetserve.core.latency import LatencyModel
from hetserve.core.placement import Placement, WorkerSlot, bind, worker_id

__all__ = [
    "ModelPlan", "Pipeline", "Placement", "Plan", "SchedulerChoice", "ServingGroup", "Stage",
    "WorkerSlot", "best_batch", "bind", "default_plan", "slos_from_scale", "worker_id",
]  # fmt: skip


@dataclass(frozen=True)
class Stage:
    blocks: tuple[int, int]  # [start, stop)
    gpu: str
    share: int
    instances: int
    latency_s: float = 0.0  # planned, at the pipeline's batch size
    transfer_s: float = 0.0  # planned transfer of this stage's output to the next stage


@dataclass(frozen=True)
class Pipeline:
    stages: tuple[Stage, ...]
    batch: int
    latency_s: float = 0.0  # planned end-to-end, transfers included
    throughput_rps: float = 0.0  # planned


@dataclass(frozen=True)
class ModelPlan:
    slo_s: float
    weight: float = 1.0
    pipelines: tuple[Pipeline, ...] = ()

    @property
    def throughput_rps(self) -> float:
        return sum(p.throughput_rps for p in self.pipelines)


@dataclass(frozen=True)
class ServingGroup:
    """Shepherd's serving group: models whose requests share ``gpus`` GPUs of type ``gpu``
    (every GPU of the group serves every model of it, whole). ``streams``: which streams of
    its models it serves; empty means all of them. A model may be in several groups only
    if each of them names its streams (its requests go by stream)."""

    name: str
    models: tuple[str, ...]
    gpus: int
    gpu: str
    streams: tuple[str, ...] = ()


@dataclass(frozen=True)
class SchedulerChoice:
    """The scheduler that serves a plan by default: a registered name (or ``module:Class``)
    and its parameters."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    models: dict[str, ModelPlan]
    shared_pools: bool = False  # True: every model's pipelines use the same GPUs
    meta: dict[str, Any] = field(default_factory=dict)
    groups: tuple[ServingGroup, ...] = ()  # non-empty: the models share GPUs by group
    # DeepPlan: per model, how a cold start loads it (``core.coldstart``)
    load_plans: dict[str, ModelLoadPlan] = field(default_factory=dict)
    # MagicBatch: per stream, its GPU and batch (``StreamAssignment``)
    assignments: dict[str, StreamAssignment] = field(default_factory=dict)
    scheduler: SchedulerChoice | None = None  # serves it unless a command names another
    # RAMPA: stages bound to chosen GPUs, and the links each cut between two GPUs takes
    binding: Placement | None = None
    paths: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.groups:
            seen: dict[str, str] = {}
            streams: dict[str, str] = {}
            for g in self.groups:
                if g.gpus < 1:
                    raise ConfigError(f"plan: group {g.name} needs >= 1 GPU, got {g.gpus}")
                for st in g.streams:
                    if st in streams:
                        raise ConfigError(
                            f"plan: stream {st} is in groups {streams[st]} and {g.name}"
                        )
                    streams[st] = g.name
                for m in g.models:
                    if m not in self.models:
                        raise ConfigError(f"plan: group {g.name} names unknown model {m}")
                    if m in seen:
                        other = next(x for x in self.groups if x.name == seen[m])
                        if not (g.streams and other.streams):
                            raise ConfigError(
                                f"plan: model {m} is in groups {seen[m]} and {g.name}; a "
                                f"model in several groups needs their streams named"
                            )
                    seen[m] = g.name
            missing = sorted(set(self.models) - set(seen))
            if missing:
                raise ConfigError(f"plan: models in no serving group: {', '.join(missing)}")

    def capacity_rps(self) -> float:
        """Planned normalised capacity ``C``: at load factor 1, model ``m`` receives
        ``C * w_m / sum(w)`` requests/s.

        Disjoint pools (PPipe): ``C = min_m T_m / share_m``. Shared pools: the models split
        the GPUs' time, ``C = 1 / sum_m (share_m / T_m)``. Serving groups: shared pools
        within each group, the smallest over the groups.
        """
        total_w = sum(m.weight for m in self.models.values())
        caps = {n: m.throughput_rps for n, m in self.models.items()}
        if any(c <= 0 for c in caps.values()):
            bad = [n for n, c in caps.items() if c <= 0]
            raise HetserveError(f"plan has no capacity for {', '.join(bad)}")
        if self.groups:
            return min(
                1.0 / sum(self.models[n].weight / total_w / caps[n] for n in g.models)
                for g in self.groups
            )
        if self.shared_pools:
            return 1.0 / sum(m.weight / total_w / caps[n] for n, m in self.models.items())
        return min(caps[n] / (m.weight / total_w) for n, m in self.models.items())

    def rates_at(self, load_factor: float) -> dict[str, float]:
        """Per-model request rates at a load factor."""
        c = self.capacity_rps() * load_factor
        total_w = sum(m.weight for m in self.models.values())
        return {n: c * m.weight / total_w for n, m in self.models.items()}

    # ------------------------------------------------------------------ JSON
    def to_json(self) -> dict[str, Any]:
        """The plan file (docs/formats.md#plans): times in ms, throughputs in req/s."""
        meta = dict(self.meta)
        out: dict[str, Any] = {
            "planner": meta.pop("planner", "unknown"),
            "objective": meta.pop("objective", {"normalized_rps": self.capacity_rps()}),
            "solve": meta.pop("solve", {}),
            "shared_pools": self.shared_pools,
            "models": {},
            "meta": meta,
        }
        if self.groups:
            out["groups"] = [
                {"name": g.name, "models": list(g.models), "gpus": g.gpus, "gpu": g.gpu}
                | ({"streams": list(g.streams)} if g.streams else {})
                for g in self.groups
            ]
        if self.load_plans:
            out["load_plans"] = {m: lp.to_json() for m, lp in self.load_plans.items()}
        if self.assignments:
            out["assignments"] = {n: a.to_json() for n, a in self.assignments.items()}
        if self.scheduler is not None:
            out["scheduler"] = {"name": self.scheduler.name, "params": self.scheduler.params}
        if self.binding is not None:
            out["binding"] = self.binding.to_json()
        if self.paths:
            out["paths"] = [{"from": a, "to": b, "links": list(p)}
                            for (a, b), p in self.paths.items()]  # fmt: skip
        for n, m in self.models.items():
            out["models"][n] = {
                "slo_ms": m.slo_s * 1e3,
                "weight": m.weight,
                "planned_rps": m.throughput_rps,
                "pipelines": [
                    {
                        "batch": p.batch,
                        "planned_rps": p.throughput_rps,
                        "latency_ms": p.latency_s * 1e3,
                        "stages": [
                            {
                                "blocks": list(st.blocks),
                                "gpu": st.gpu,
                                "share": st.share,
                                "instances": st.instances,
                                "latency_ms": st.latency_s * 1e3,
                                "transfer_ms": st.transfer_s * 1e3,
                            }
                            for st in p.stages
                        ],
                    }
                    for p in m.pipelines
                ],
            }
        return out

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n")

    @staticmethod
    def from_json(data: Any, source: str) -> Plan:
        try:
            models = {}
            for name, m in data["models"].items():
                pipes = []
                for pi, p in enumerate(m["pipelines"]):
                    stages = []
                    for si, s in enumerate(p["stages"]):
                        where = f"{source}: models.{name}.pipelines[{pi}].stages[{si}]"
                        b = s["blocks"]
                        if not (isinstance(b, list) and len(b) == 2 and 0 <= b[0] < b[1]):
                            raise ConfigError(
                                f"{where}.blocks: expected [start, stop) with "
                                f"0 <= start < stop, got {b!r}"
                            )
                        if int(s["share"]) < 1 or int(s["instances"]) < 1:
                            raise ConfigError(f"{where}: share and instances must be >= 1")
                        stages.append(
                            Stage(
                                (int(b[0]), int(b[1])),
                                str(s["gpu"]),
                                int(s["share"]),
                                int(s["instances"]),
                                float(s.get("latency_ms", 0.0)) / 1e3,
                                float(s.get("transfer_ms", 0.0)) / 1e3,
                            )
                        )
                    if not stages:
                        raise ConfigError(f"{source}: models.{name}.pipelines[{pi}]: no stages")
                    for a, b2 in itertools.pairwise(stages):
                        if a.blocks[1] != b2.blocks[0]:
                            raise ConfigError(
                                f"{source}: models.{name}.pipelines[{pi}]: "
                                f"stages must be contiguous, got "
                                f"{a.blocks} then {b2.blocks}"
                            )
                    if stages[0].blocks[0] != 0:
                        raise ConfigError(
                            f"{source}: models.{name}.pipelines[{pi}]: the first "
                            f"stage must start at block 0"
                        )
                    if int(p["batch"]) < 1:
                        raise ConfigError(
                            f"{source}: models.{name}.pipelines[{pi}].batch: expected >= 1"
                        )
                    pipes.append(
                        Pipeline(
                            tuple(stages),
                            int(p["batch"]),
                            float(p.get("latency_ms", 0.0)) / 1e3,
                            float(p.get("planned_rps", 0.0)),
                        )
                    )
                models[name] = ModelPlan(
                    float(m["slo_ms"]) / 1e3, float(m.get("weight", 1.0)), tuple(pipes)
                )
            if not models:
                raise ConfigError(f"{source}: models: expected at least one model")
            meta = dict(data.get("meta", {}))
            for k in ("planner", "objective", "solve"):
                if k in data:
                    meta[k] = data[k]
            groups = tuple(
                ServingGroup(
                    str(g["name"]),
                    tuple(str(m) for m in g["models"]),
                    int(g["gpus"]),
                    str(g["gpu"]),
                    tuple(str(x) for x in g.get("streams", ())),
                )
                for g in data.get("groups", [])
            )
            load_plans = {
                str(m): ModelLoadPlan.from_json(lp, f"{source}: load_plans.{m}")
                for m, lp in dict(data.get("load_plans", {})).items()
            }
            unknown_lp = sorted(set(load_plans) - set(models))
            if unknown_lp:
                raise ConfigError(
                    f"{source}: load_plans names {unknown_lp[0]}, not among the plan's models"
                )
            assignments = {
                str(n): StreamAssignment.from_json(str(n), a, f"{source}: assignments.{n}")
                for n, a in dict(data.get("assignments", {})).items()
            }
            sched = None
            if "scheduler" in data:
                sc = data["scheduler"]
                if not isinstance(sc, dict) or not isinstance(sc.get("name"), str):
                    raise ConfigError(f"{source}: scheduler: expected {{name, params}}")
                sched = SchedulerChoice(sc["name"], dict(sc.get("params", {})))
            binding = None
            if "binding" in data:
                binding = Placement.from_json(data["binding"], f"{source}: binding")
            paths = {
                (str(p["from"]), str(p["to"])): tuple(str(x) for x in p["links"])
                for p in data.get("paths", [])
            }
            return Plan(
                models, bool(data.get("shared_pools", False)), meta, groups, load_plans,
                assignments, sched, binding, paths,
            )  # fmt: skip
        except KeyError as e:
            raise ConfigError(f"{source}: missing field {e}") from None
        except (TypeError, ValueError, AttributeError) as e:
            raise ConfigError(f"{source}: malformed plan ({e})") from None

    @staticmethod
    def load(path: str | Path) -> Plan:
        return Plan.from_json(read_json(path, "plan"), str(path))

    def check_against(self, latency: LatencyModel, source: str = "plan") -> None:
        """Every pipeline covers its model's blocks exactly."""
        for name, m in self.models.items():
            n = latency.num_blocks(name)
            for pi, p in enumerate(m.pipelines):
                if p.stages[-1].blocks[1] != n:
                    raise HetserveError(
                        f"{source}: models.{name}.pipelines[{pi}]: the last "
                        f"stage must end at block {n} (the model has {n} "
                        f"blocks), got {p.stages[-1].blocks[1]}"
                    )


def best_batch(
    latency: LatencyModel, model: str, gpu: str, share: int, budget_s: float, max_batch: int
) -> tuple[int, float]:
    """Largest batch ``<= max_batch`` whose latency fits ``budget_s`` -> (batch, latency);
    (0, inf) if even batch 1 does not fit. Latency grows with batch size. A latency model
    that covers only some batch sizes (a profile set) bounds the batch too: the largest
    profiled batch is the most it plans."""
    best = (0, math.inf)
    for b in range(1, max_batch + 1):
        try:
            t = latency.latency(model, gpu, share, b)
        except HetserveError:
            if b == 1:
                raise
            break  # not profiled at this batch size
        if t > budget_s:
            break
        best = (b, t)
    return best


def default_plan(
    cluster: Cluster,
    latency: LatencyModel,
    slos_s: Mapping[str, float],
    weights: Mapping[str, float] | None = None,
    max_batch: int = 8,
    slo_margin: float = 0.4,
) -> Plan:
    """Every model whole on every GPU type of the cluster (share 1, pools shared).

    The planned batch per (model, GPU type) is the largest ``<= max_batch`` whose latency fits
    ``(1 - slo_margin) * SLO`` (PPipe's planning margin); a GPU type on which not even
    batch 1 fits is left out of that model's pools.
    """
    models = {}
    counts = cluster.gpu_counts()
    for name, slo in slos_s.items():
        pipes = []
        for t, n in counts.items():
            b, lat = best_batch(latency, name, t, 1, (1 - slo_margin) * slo, max_batch)
            if b == 0:
                continue
            nb = latency.num_blocks(name)
            pipes.append(Pipeline((Stage((0, nb), t, 1, n, lat),), b, lat, n * b / lat))
        if not pipes:
            fastest = min(latency.latency(name, t, 1, 1) for t in counts)
            raise HetserveError(
                f"model {name}: no GPU of cluster {cluster.name} meets "
                f"{1 - slo_margin:.2f} x SLO = {(1 - slo_margin) * slo * 1e3:.2f} "
                f"ms even at batch 1 (fastest: {fastest * 1e3:.2f} ms)"
            )
        w = 1.0 if weights is None else float(weights.get(name, 1.0))
        models[name] = ModelPlan(slo, w, tuple(pipes))
    return Plan(
        models,
        shared_pools=True,
        meta={"planner": "default", "max_batch": max_batch, "slo_margin": slo_margin},
    )


def slos_from_scale(
    cluster: Cluster,
    latency: LatencyModel,
    models: Sequence[str],
    scale: float,
    ref_gpu: str | None = None,
    graphs: Callable[[str], Any] | None = None,
) -> dict[str, float]:
    """SLO = ``scale`` x batch-1 whole-model latency on ``ref_gpu`` (default: the cluster's
    fastest GPU type for that model). PPipe uses 5 x the L4 latency. A repository model
    whose config.yaml gives ``slo_ms`` has that SLO (``graphs``: the models' graphs by
    name, a ``ModelCatalog``'s; default the shipped ones)."""
    if ref_gpu is not None:
        g = cluster.catalog.get(ref_gpu)
        out = {m: scale * latency.latency(m, g, 1, 1) for m in models}
    else:
        types = list(cluster.gpu_counts())
        out = {m: scale * min(latency.latency(m, t, 1, 1) for t in types) for m in models}
    if graphs is None:
        from hetserve.core.graph import get_graph

        graphs = get_graph
    return {m: _configured_slo_s(m, v, graphs) for m, v in out.items()}


def _configured_slo_s(model: str, default_s: float, graphs: Callable[[str], Any]) -> float:
    from hetserve.core.layerlatency import base_model

    try:
        ms = graphs(base_model(model)).meta.get("slo_ms")
    except HetserveError:  # a model known only to its latency source (e.g. RAMPA's)
        return default_s
    return default_s if ms is None else float(ms) / 1e3
