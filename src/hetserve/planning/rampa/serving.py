"""RAMPA placements as a plan, so that every engine serves what RAMPA placed.

A placement is a plan: one pipeline per placed service (its model named
``p<k>-<service>``), its stages bound to the chosen GPUs (``Plan.binding``), its cuts to
the chosen paths (``Plan.paths``: transfers take them and share their lanes with every
other service's). Operations take RAMPA's time (``FLOPs / FLOPS + memory / memory
bandwidth``, times the batch) and cuts carry Table VI's output sizes as they are (FP32:
the plan's ``meta.cut_bytes_factor`` is 1). The plan names its latency source
(``meta.latency_source = "rampa"``, ``meta.services``: the service of each model), so a
plan file alone rebuilds it (:func:`rampa_latency`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hetserve.core.cluster import Cluster
from hetserve.core.errors import ConfigError
from hetserve.core.gpus import GpuType
from hetserve.core.graph import ModelGraph
from hetserve.core.latency import busy_power_w
from hetserve.core.plan import ModelPlan, Pipeline, Placement, Plan, Stage, WorkerSlot, worker_id
from hetserve.planning.rampa.perf import Op
from hetserve.planning.rampa.state import Placement as RampaPlacement


class RampaLatency:
    """The ``LatencyModel`` of placed services: per operation (one block each) RAMPA's time
    on the GPU, linear in the batch."""

    def __init__(self, ops: Mapping[str, Sequence[Op]]) -> None:
        self.ops = {m: list(v) for m, v in ops.items()}

    def num_blocks(self, model: str) -> int:
        return len(self.ops[model])

    def out_bytes(self, model: str, block: int) -> float:
        return self.ops[model][block].out_bytes

    def latency(
        self, model: str, gpu: GpuType, share: int, batch: int, blocks: range | None = None
    ) -> float:
        ops = self.ops[model]
        rng = range(len(ops)) if blocks is None else blocks
        per = sum(ops[i].flops / (gpu.fp32_tflops * 1e12)
                  + ops[i].memory_bytes / (gpu.mem_bw_gbps * 1e9) for i in rng)  # fmt: skip
        return per * batch * share

    def energy(
        self, model: str, gpu: GpuType, share: int, batch: int, blocks: range | None = None
    ) -> float:
        return self.latency(model, gpu, share, batch, blocks) * busy_power_w(gpu, share, 1.0)


def placements_plan(
    placed: Sequence[RampaPlacement], cluster: Cluster, meta: Mapping[str, object] | None = None
) -> Plan:
    """The plan of placements: pipelines, their binding to the chosen GPUs and the pinned
    cut paths (module docstring)."""
    models: dict[str, ModelPlan] = {}
    slots: dict[str, WorkerSlot] = {}
    stages: dict[tuple[str, int, int], tuple[str, ...]] = {}
    pins: dict[tuple[str, str], tuple[str, ...]] = {}
    services: dict[str, str] = {}
    for k, p in enumerate(placed):
        name = f"p{k:03d}-{p.service.name}"
        services[name] = p.service.name
        st = []
        for s, g in enumerate(p.gpus):
            gpu = cluster.gpu(g)
            wid = worker_id(g, 0, 1)
            slots.setdefault(wid, WorkerSlot(wid, g, gpu.node, gpu.type.name, 1, 0))
            stages[(name, 0, s)] = (wid,)
            st.append(Stage((p.bounds[s], p.bounds[s + 1]), gpu.type.name, 1, 1,
                            p.est.stage_s[s]))  # fmt: skip
        for s, path in enumerate(p.paths):
            pins[(p.gpus[s], p.gpus[s + 1])] = tuple(path)
        pipe = Pipeline(tuple(st), 1, p.est.latency_s, p.est.throughput_tps)
        # weighted by the required throughput: ``--rate`` at the plan's ``required_rps``
        # offers every service exactly its required rate
        models[name] = ModelPlan(p.service.latency_s, p.service.throughput_tps, (pipe,))
    required = sum(p.service.throughput_tps for p in placed)
    info = {"planner": "rampa", **dict(meta or {}), "latency_source": "rampa",
            "services": services, "cut_bytes_factor": 1.0, "required_rps": required}  # fmt: skip
    return Plan(models, meta=info, binding=Placement(tuple(slots.values()), stages), paths=pins)


def rampa_latency(plan: Plan, source: str = "plan") -> RampaLatency:
    """The latency model a RAMPA plan names (``meta.services``: Table V's services)."""
    from hetserve.planning.rampa.place import table_v_services

    services = table_v_services()
    named = plan.meta.get("services")
    if not isinstance(named, dict):
        raise ConfigError(f"{source}: meta.services: expected the service of each model")
    ops = {}
    for m in plan.models:
        svc = named.get(m)
        if svc not in services:
            raise ConfigError(
                f"{source}: meta.services.{m}: expected one of {', '.join(services)}, got {svc!r}"
            )
        ops[m] = services[svc].ops
    return RampaLatency(ops)


def service_graph(plan: Plan, model: str) -> ModelGraph:
    """The graph of a RAMPA plan's model (its service's Table VI model), with one FP32
    input of one value per request: what an emulated server accepts for it."""
    from dataclasses import replace

    from hetserve.core.rampa_data import rampa_graph
    from hetserve.core.tensors import TensorSpec
    from hetserve.planning.rampa.place import table_v_services

    svc = table_v_services()[str(plan.meta.get("services", {}).get(model))]
    g = rampa_graph(svc.model)
    return replace(g, input_shape=(1,), inputs=(TensorSpec("input", "FP32", (1,)),))
