"""Summary metrics of a simulation (``summary.json``).

- ``attainment``: ok / arrived (SLO attainment);
- ``goodput_rps``: ok requests per second of trace duration; ``offered_rps``: arrivals per
  second;
- ``latency_ms``: p50 / p90 / p99 / mean over completed requests (ok and late);
- ``utilization``: per GPU type, busy time / (simulated time x slices of that type);
- ``energy_j``: every GPU of the cluster, idle included (``energy_by_gpu_type_j``; GPUs
  no worker uses count as ``unplaced``); ``energy_per_request_j`` per completed request;
- ``batch_sizes``: histogram of first-stage batch sizes of completed batches;
- ``dropped`` / ``late`` / ``failed``: counts, with ``drops_by_reason`` and
  ``failures_by_reason``; ``per_model``: the request-level metrics per model.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from hetserve.core.outcome import CANCELLED, DROPPED, FAILED, LATE, OK
from hetserve.sim.result import SimResult


def _request_metrics(res: SimResult, sel: np.ndarray, duration: float) -> dict[str, Any]:
    out = res.outcome[sel]
    n = int(sel.sum())
    ok = int((out == OK).sum())
    done = (out == OK) | (out == LATE)
    lat = (res.finish_s[sel][done] - res.trace.time_s[sel][done]) * 1e3
    pct = (
        {
            "p50": float(np.percentile(lat, 50)),
            "p90": float(np.percentile(lat, 90)),
            "p99": float(np.percentile(lat, 99)),
            "mean": float(lat.mean()),
        }
        if len(lat)
        else {"p50": None, "p90": None, "p99": None, "mean": None}
    )
    reasons = res.reason[sel]
    drops = Counter(res.reasons[r] for r in reasons[out == DROPPED])
    fails = Counter(res.reasons[r] for r in reasons[out == FAILED])
    return {
        "arrived": n,
        "ok": ok,
        "late": int((out == LATE).sum()),
        "dropped": int((out == DROPPED).sum()),
        "failed": int((out == FAILED).sum()),
        "cancelled": int((out == CANCELLED).sum()),
        "attainment": ok / n if n else 1.0,
        "offered_rps": n / duration if duration > 0 else 0.0,
        "goodput_rps": ok / duration if duration > 0 else 0.0,
        "latency_ms": pct,
        "drops_by_reason": dict(sorted(drops.items())),
        "failures_by_reason": dict(sorted(fails.items())),
    }


def summarize(res: SimResult) -> dict[str, Any]:
    duration = res.trace.duration_s
    everything = np.ones(len(res.trace), dtype=bool)
    s = _request_metrics(res, everything, duration)
    busy: Counter[str] = Counter()
    slices: Counter[str] = Counter()
    for w, b in res.worker_busy_s.items():
        busy[res.worker_gpu[w]] += b
        slices[res.worker_gpu[w]] += 1
    s["simulated_s"] = res.end_s
    s["utilization"] = {
        g: busy[g] / (res.end_s * slices[g]) if res.end_s > 0 else 0.0 for g in sorted(slices)
    }
    energy = float(sum(res.gpu_energy_j.values()))
    completed = s["ok"] + s["late"]
    s["energy_j"] = energy
    by_type: Counter[str] = Counter()
    gpu_type = {g_id: g for w, g in res.worker_gpu.items() for g_id in [w.split(":")[0]]}
    for g_id, e in res.gpu_energy_j.items():
        by_type[gpu_type.get(g_id, "unplaced")] += e
    s["energy_by_gpu_type_j"] = dict(sorted(by_type.items()))
    s["energy_per_request_j"] = energy / completed if completed else None
    # GPU-hours the plan(s) held, per type (re-planning: as they changed)
    s["gpu_hours"] = {t: v / 3600 for t, v in res.gpu_seconds.items()}
    c = res.stages
    # first stages of completed batches, by their codes (no string per row)
    completed = [k for k, name in enumerate(c.names) if name == "completed"]
    first = (c.stage == 0) & np.isin(c.status_code, completed)
    sizes, counts = np.unique(c.batch_size[first], return_counts=True)
    hist = dict(zip(sizes.tolist(), counts.tolist(), strict=True))
    s["batch_sizes"] = {str(k): v for k, v in hist.items()}
    s["mean_batch_size"] = (
        sum(k * v for k, v in hist.items()) / sum(hist.values()) if hist else None
    )
    # per model: each request's model as a code (the models' names sorted), not a string
    names = sorted({st.model for st in res.trace.streams})
    of_stream = np.array([names.index(st.model) for st in res.trace.streams], dtype=np.int64)
    code = of_stream[res.trace.stream_idx]
    s["per_model"] = {
        names[k]: _request_metrics(res, code == k, duration) for k in np.unique(code).tolist()
    }
    return s
