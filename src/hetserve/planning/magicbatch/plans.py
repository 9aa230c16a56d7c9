"""MagicBatch's inputs (stream files, seeded random streams) and plans."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hetserve.core.gpus import GpuType
from hetserve.core.latency import LatencyModel
from hetserve.planning.magicbatch.assign import assign
from hetserve.planning.magicbatch.options import (
    Assignment,
    EdgeStream,
    Option,
    stream_options,
    type_of,
)
from hetserve.planning.magicbatch.psoga import PsoGaParams, pso_ga
from hetserve.planning.magicbatch.shared import shared, total_power_w

STREAM_COLUMNS = ("name", "model", "rate_rps", "deadline_ms")


def read_streams(path: str) -> list[EdgeStream]:
    """A stream file (CSV, ``name,model,rate_rps,deadline_ms``, docs/formats.md); every
    bad row is a one-line error naming the file, line and stream."""
    from hetserve.core.errors import ConfigError
    from hetserve.core.files import csv_rows

    out: list[EdgeStream] = []
    seen: set[str] = set()
    for line, row in csv_rows(path, STREAM_COLUMNS):
        name = row["name"].strip()
        if not name:
            raise ConfigError(f"{path}:{line}: field 'name': expected a stream name")
        if name in seen:
            raise ConfigError(f"{path}:{line}: stream {name} appears twice")
        seen.add(name)
        vals = {}
        for col, what in (("rate_rps", "a rate > 0 in requests/s"),
                          ("deadline_ms", "a deadline > 0 in ms")):  # fmt: skip
            try:
                v = float(row[col])
            except ValueError:
                v = math.nan
            if not (math.isfinite(v) and v > 0):
                raise ConfigError(
                    f"{path}:{line}: stream {name}: field '{col}': expected {what}, "
                    f"got {row[col]!r}"
                )
            vals[col] = v
        out.append(EdgeStream(name, row["model"].strip(), vals["rate_rps"],
                              vals["deadline_ms"] / 1e3))  # fmt: skip
    if not out:
        raise ConfigError(f"{path}: no streams (one row per stream after the header)")
    return out


def random_streams(
    n: int,
    models: Sequence[str],
    seed: int,
    rate_rps: tuple[float, float] = (5.0, 50.0),
    deadline_ms: tuple[float, float] = (100.0, 500.0),
) -> list[EdgeStream]:
    """Seeded random streams as in the paper's evaluation (section 5.1: "the arrival rate
    and deadline of tasks are randomly generated"; it gives no ranges, these are ours):
    models round-robin, rates and deadlines uniform in the ranges."""
    rng = np.random.default_rng(seed)
    return [
        EdgeStream(f"s{i:04d}", models[i % len(models)],
                   float(np.round(rng.uniform(*rate_rps), 2)),
                   float(np.round(rng.uniform(*deadline_ms), 1)) / 1e3)
        for i in range(n)
    ]  # fmt: skip


def plan_streams(
    method: str,
    streams: Sequence[EdgeStream],
    counts: Mapping[str, int],
    gpus: Mapping[str, GpuType],
    latency: LatencyModel,
    *,
    order: Sequence[str] | None = None,
    park_idle: bool = False,
    max_batch: int = 256,
    seed: int = 0,
    shared_limits: Mapping[str, Any] | None = None,
) -> tuple[Any, Assignment, dict[str, dict[str, Option]]]:
    """A core plan for ``method``'s assignment (``assignments`` per stream, with the
    options every method chose from; per model a whole-model pipeline on each GPU type its
    streams use), the assignment and the options. ``shared_limits``: ``time_limit_s`` and
    ``max_nodes`` for ``shared``'s MILP."""
    from hetserve.core.assignment import StreamAssignment
    from hetserve.core.plan import ModelPlan, Pipeline, Plan, ServingGroup, Stage

    opts = stream_options(latency, streams, list(gpus.values()), max_batch)
    if method == "shared":
        a = shared(streams, counts, opts, gpus, park_idle, **(shared_limits or {}))
    elif method == "pso-ga":
        a = pso_ga(streams, counts, opts, PsoGaParams(seed=seed))
    else:
        a = assign(method, streams, counts, opts, order)
    records = {}
    for s in streams:
        o = a.option_of.get(s.name)
        table = {
            t: ({"batch": x.batch, "latency_ms": x.latency_s * 1e3, "energy_j": x.energy_j}
                if x.feasible else {"why": x.why})
            for t, x in opts[s.name].items()
        }  # fmt: skip
        records[s.name] = StreamAssignment(
            s.name, s.model, s.rate_rps, s.deadline_s, a.gpu_of.get(s.name, ""),
            o.batch if o else 0, o.latency_s if o else 0.0, o.energy_j if o else 0.0,
            a.rejected.get(s.name, ""), table,
        )  # fmt: skip
    models: dict[str, ModelPlan] = {}
    for m in dict.fromkeys(s.model for s in streams if s.name in a.gpu_of):
        mine = [s for s in streams if s.model == m and s.name in a.gpu_of]
        by_type: dict[str, set[str]] = {}
        for s in mine:
            by_type.setdefault(type_of(a.gpu_of[s.name]), set()).add(a.gpu_of[s.name])
        pipes = []
        for t, used in by_type.items():
            b = max(a.option_of[s.name].batch for s in mine if a.gpu_of[s.name] in used)
            lat = latency.latency(m, gpus[t], 1, b)
            stage = Stage((0, latency.num_blocks(m)), t, 1, len(used), lat)
            pipes.append(Pipeline((stage,), b, lat, len(used) * b / lat))
        slo = min(s.deadline_s for s in mine)
        models[m] = ModelPlan(slo, 1.0, tuple(pipes))
    # one serving group per GPU instance that serves streams: its streams, by name
    on: dict[str, list[EdgeStream]] = {}
    for s in streams:
        if s.name in a.gpu_of:
            on.setdefault(a.gpu_of[s.name], []).append(s)
    groups = tuple(
        ServingGroup(inst, tuple(dict.fromkeys(s.model for s in ss)), 1, type_of(inst),
                     tuple(s.name for s in ss))
        for inst, ss in sorted(on.items(), key=lambda kv: _instance_key(kv[0]))
    )  # fmt: skip
    busy = a.power_w(streams)
    total = total_power_w(a, streams, gpus, counts, park_idle)
    plan = Plan(
        models,
        meta={
            "planner": "magicbatch",
            "objective": {
                "method": method,
                "busy_power_w": busy,
                "total_power_w": total,
                "park_idle": park_idle,
                "placed": len(a.gpu_of),
                "rejected": len(a.rejected),
            },
            "solve": {"gpus": dict(counts), "streams": len(streams), **a.solve},
        },
        groups=groups,
        assignments=records,
    )
    return plan, a, opts


def _instance_key(inst: str) -> tuple[str, int]:
    t, _, k = inst.rpartition("#")
    return t, int(k)
