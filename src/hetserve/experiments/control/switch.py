"""One plan switch, simulated and live, measured alike (``benchmarks/bench_switch_live.py``
and ``bench_switch_ray.py``): a trace's requests, and at ``at_s`` a switch to ``target``.

Both return the same figures: the switch's wall time (``switch_s``: decision to the old
plan drained) beside the control loop's prediction (``predicted_s``, and its requests
``predicted_delayed``), the requests that arrived during the switch (``during``) and of
those how many missed their SLO (``missed``), attainment overall and in the window from
1 s before the switch to 2 s after (``window``)."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from hetserve.control.controller import AtTimes
from hetserve.core.outcome import OK
from hetserve.engine.control import ControlConfig, ControlSpec
from hetserve.experiments.setup import simulate
from hetserve.workload.trace import Trace


def window(arrival_s: np.ndarray, ok: np.ndarray, lo: float, hi: float) -> float:
    """Attainment of the requests that arrived in ``[lo, hi)`` (nan: none did)."""
    sel = (arrival_s >= lo) & (arrival_s < hi)
    return float(ok[sel].mean()) if sel.any() else float("nan")


def simulated_switch(
    setup: Any, trace: Trace, target: Any, mode: str, at_s: float, scheduler: str = "reservation"
) -> dict[str, Any]:
    """``simulate`` on ``trace`` with the switch asked for at ``at_s``
    (``control.controller.AtTimes``; the planner answers ``target`` at once)."""
    cfg = ControlConfig(switch=mode, tick_s=0.01, window_s=1.0, long_window_s=2.0, solve_s=0.0)
    spec = ControlSpec(AtTimes((at_s,), "operator (simulated)"), lambda r, p, pl: target,
                       dict(setup.plan.rates_at(1.0)), cfg)  # fmt: skip
    res = simulate(setup, scheduler, trace, control=spec)
    rec = next(r for r in res.control if r["switched"])
    arr, ok = trace.time_s, res.outcome == OK
    during = (arr >= rec["decided_s"]) & (arr <= rec["done_s"])
    return {
        "predicted_s": rec["predicted_switch_s"], "predicted_delayed": rec["predicted_delayed"],
        "switch_s": rec["done_s"] - rec["decided_s"], "during": int(during.sum()),
        "missed": int((during & ~ok).sum()), "attainment": float(ok.mean()),
        "window": window(arr, ok, rec["decided_s"] - 1.0, rec["decided_s"] + 2.0),
        "steps": rec["steps"],
    }  # fmt: skip


async def live_switch(
    server: Any, trace: Trace, target: Any, at_s: float, lead_s: float = 0.2
) -> dict[str, Any]:
    """Start ``server`` (a ``Server`` with ``--replan``), send ``trace``'s requests at
    their times (from ``lead_s`` after the start) and ``Operator.apply_plan(target)`` at
    ``at_s``; stop it when every request has its answer."""
    server.start()
    loop = asyncio.get_running_loop()
    names = np.array([s.model for s in trace.streams])[trace.stream_idx]
    futs = [loop.create_future() for _ in range(len(trace))]
    sent_s = np.zeros(len(trace))
    t0 = loop.time() + lead_s

    def send(i: int) -> None:
        sent_s[i] = server.engine.clock.now()
        task = asyncio.ensure_future(server.infer(str(names[i])))
        task.add_done_callback(lambda t: futs[i].set_result(t.result()))

    for i, t in enumerate(trace.time_s.tolist()):
        loop.call_at(t0 + t, send, i)
    await asyncio.sleep(max(0.0, t0 + at_s - loop.time()))
    rec = await server.operator.apply_plan(target)
    results = await asyncio.gather(*futs)
    await server.stop()
    ok = np.array([r.outcome == "ok" for r in results])
    get = server.metrics.registry.get_sample_value
    met = get("hetserve_switch_requests_total", {"result": "ok"}) or 0.0
    missed = get("hetserve_switch_requests_total", {"result": "missed"}) or 0.0
    return {
        "predicted_s": rec.predicted_switch_s, "predicted_delayed": rec.predicted_delayed,
        "switch_s": rec.done_s - rec.decided_s, "during": int(met + missed),
        "missed": int(missed), "attainment": float(ok.mean()),
        "window": window(sent_s, ok, rec.decided_s - 1.0, rec.decided_s + 2.0),
        "steps": rec.steps,
    }  # fmt: skip
