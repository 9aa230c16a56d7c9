"""What the server says of its workers and models: readiness that follows lost workers,
the list ``GET /v2/cluster/workers`` answers (each worker, where it runs and its state), and
the start-up log of where each worker was placed."""

from __future__ import annotations

from typing import Any, Protocol

from hetserve.runtime.metrics import LOG
from hetserve.scheduling import ClusterView


class Server(Protocol):
    """What this module reads of a server (``runtime.server.Server``)."""

    engine: Any  # the RuntimeEngine (None before it starts)
    draining: bool
    setup: Any  # the Setup it serves
    places: dict[str, Any]  # Ray's engine: where each worker runs
    stage_overhead_s: dict[str, float]  # Ray's engine: a stage call beyond compute
    served: dict[str, int]  # stages run to their end, per worker
    infos: dict[str, Any] | None  # the workers' WorkerInfo (made here on first use)


def model_ready(server: Server, model: str) -> bool:
    eng = server.engine
    if eng is None or server.draining:
        return False
    if not eng.lost:
        return True
    stages = server.setup.placement.stages
    for p_idx, pipe in enumerate(server.setup.plan.models[model].pipelines):
        if all(
            any(w not in eng.lost for w in stages.get((model, p_idx, s_idx), ()))
            for s_idx in range(len(pipe.stages))
        ):
            return True
    return False


def worker_infos(server: Server) -> dict[str, Any]:
    if server.infos is None:
        st = server.setup
        server.infos = ClusterView.build(st.cluster, st.latency, st.placement).workers
    return server.infos


def workers(server: Server) -> list[dict[str, Any]]:
    """Per worker: id, planned GPU type and share, the stages it holds, where it runs
    (Ray's node id and the node's address, GPU index, the driver's GPU name: None
    where the engine is not Ray's), state (ready, busy, lost), queue and batches
    served, and what a stage call costs there beyond compute (``stage_overhead_ms``,
    measured at start-up by the Ray executor; 0 in process). ``GET /v2/cluster/workers``
    answers with this list."""
    eng = server.engine
    places, overhead = server.places, server.stage_overhead_s
    held: dict[str, list[dict[str, Any]]] = {}
    plan = server.setup.plan
    for (model, p_idx, s_idx), ws in server.setup.placement.stages.items():
        blocks = list(plan.models[model].pipelines[p_idx].stages[s_idx].blocks)
        for w in ws:
            held.setdefault(w, []).append(
                {"model": model, "pipeline": p_idx, "stage": s_idx, "blocks": blocks}
            )
    out = []
    for wid, info in worker_infos(server).items():
        p = places.get(wid)
        if eng is None:
            state, queue = "starting", 0
        elif wid in eng.lost:
            state, queue = "lost", 0
        else:
            state = "busy" if eng.running(wid) is not None else "ready"
            queue = eng.queued(wid)
        out.append({
            "id": wid, "gpu_type": info.gpu.name, "share": info.share,
            "planned_gpu": info.gpu_id, "stages": held.get(wid, []),
            "node_id": p.node_id if p else None,
            "node_address": p.node_address if p else None,
            "gpu_index": p.gpu_index if p else None,
            "gpu_name": p.gpu_name if p else None,
            "gpu_uuid": p.gpu_uuid if p else None,
            "state": state, "queue": queue, "batches_served": server.served.get(wid, 0),
            "stage_overhead_ms": round(overhead.get(wid, 0.0) * 1e3, 3),
        })  # fmt: skip
    return out


def log_places(server: Server) -> None:
    """The start-up summary of where each worker runs and what its calls cost (Ray's
    engine)."""
    places = server.places
    if not places:
        return
    infos = worker_infos(server)
    overhead = server.stage_overhead_s
    LOG.info("%d workers placed and checked against the plan:", len(places))
    for wid, p in places.items():
        w = infos[wid]
        if p.gpu_index is None and p.gpu_uuid is None:
            gpu = "CPU"
        else:
            gpu = "GPU" if p.gpu_index is None else f"GPU {p.gpu_index}"
        said = ", ".join(x for x in (p.gpu_name, p.gpu_uuid) if x)
        said = f" ({said})" if said else ""
        LOG.info(
            "  %s: %s%s on node %s (%s), %s%s; a stage call costs %.1f ms beyond compute",
            wid, w.gpu.name, f"/{w.share}" if w.share > 1 else "", p.node_id[:8],
            p.node_address, gpu, said, overhead.get(wid, 0.0) * 1e3,
        )  # fmt: skip
