"""Switching plans live: every request ends exactly once whatever the switches do.

A simulated run is switched between two plans (ppipe for an 80/20 and a 20/80 mix; some
workers keep their stage, some change) at random times, in either mode, with a random
bound on workers loading at once, and sometimes a worker lost at a random time; every
request must end exactly once, none may fail unless a worker was lost, and every switch
asked for must complete."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetserve.control.controller import Decision, Replan
from hetserve.control.switching import Switching
from hetserve.core.errors import HetserveError
from hetserve.core.outcome import FAILED, PENDING
from hetserve.engine.control import ControlConfig, ControlSpec
from hetserve.experiments.setup import simulate
from hetserve.scheduling.protocol import BaseScheduler, make_scheduler
from hetserve.sim.engine import SimConfig, Simulator
from tests.control.scenario import plan_for, setup_for, turning_trace

TICK_S = 0.05


class Scripted:
    """A controller that asks for a re-plan at the given ticks and always switches."""

    def __init__(self, ticks: set[int]) -> None:
        self.ticks = ticks

    def observe(self, snap):  # type: ignore[no-untyped-def]
        k = round(snap.now_s / TICK_S)
        if k in self.ticks and not snap.busy:
            return Replan(dict(snap.rate_rps), f"tick {k}")
        return None

    def judge(self, snap, want, est):  # type: ignore[no-untyped-def]
        return Decision(True, 0.0, est.delayed, 0.0, "switch: scripted")


def alternate(rates, plan, placement):  # type: ignore[no-untyped-def]
    """The other of the two plans."""
    a, b = plan_for(0.8), plan_for(0.2)
    return b if plan.models["resnet50"].weight == a.models["resnet50"].weight else a


def tight_memory_gb(setup) -> float:  # type: ignore[no-untyped-def]
    """Memory per worker that holds the largest stage either plan puts on one worker,
    and little more: a worker that keeps its blocks has no room for others beside them."""
    from hetserve.control.reconcile import needs
    from hetserve.core.plan import bind
    from hetserve.engine.residency import Residency

    res = Residency(setup.cluster, setup.latency)
    most = 0.0
    for plan in (plan_for(0.8), plan_for(0.2)):
        for need in needs(plan, bind(plan, setup.cluster)).values():
            most = max(most, sum(res.bytes_of(m, mask) for m, mask in need.items()))
    return most * 1.05 / 1e9


def run(ticks, mode, max_parallel, scheduler, lose, tight=False, monkeypatch=None):  # type: ignore[no-untyped-def]
    setup = setup_for(0.8)
    if tight:  # every worker's memory (the modelled executor's): see tight_memory_gb
        import hetserve.engine.modelled as modelled
        from hetserve.engine.residency import Held

        cap = tight_memory_gb(setup) * 1e9

        class Tight(Held):
            __slots__ = ()

            def __init__(self, info) -> None:  # type: ignore[no-untyped-def]
                super().__init__(info)
                self.mem_cap = cap

        monkeypatch.setattr(modelled.ModelledExecutor, "held_class", Tight)
    trace = turning_trace(setup, 0.8 * setup.plan.capacity_rps(), 1.0, 1.0, seed=3)
    spec = ControlSpec(
        Scripted(ticks), alternate, {},
        ControlConfig(switch=mode, max_parallel=max_parallel, tick_s=TICK_S, solve_s=0.01,
                      poll_s=0.002),
    )  # fmt: skip
    sched = Switching(lambda: make_scheduler(scheduler))
    sim = Simulator(setup.cluster, setup.latency, setup.plan, setup.placement, sched, trace,
                    SimConfig(seed=1), control=spec)  # fmt: skip
    if lose is not None:
        worker = sorted(sim.kernel.workers)[lose[0] % len(sim.kernel.workers)]
        sim.fail_worker(worker, lose[1])
    ended: dict[int, int] = {}
    inner = sim.recorder.ended

    def counting(requests, outcomes, reason, now, outputs):  # type: ignore[no-untyped-def]
        for r in requests:
            ended[r.id] = ended.get(r.id, 0) + 1
        inner(requests, outcomes, reason, now, outputs)

    sim.recorder.ended = counting  # type: ignore[method-assign]
    res = sim.run()
    return trace, res, ended, sim


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    ticks=st.sets(st.integers(1, 39), max_size=6),
    mode=st.sampled_from(["mbb", "flush"]),
    max_parallel=st.integers(1, 4),
    scheduler=st.sampled_from(["reservation", "edf-adaptive"]),
    lose=st.none() | st.tuples(st.integers(0, 100), st.floats(0.1, 1.9)),
    tight=st.booleans(),
)  # fmt: skip
def test_every_request_ends_once_across_switches(  # type: ignore[no-untyped-def]
    ticks, mode, max_parallel, scheduler, lose, tight, monkeypatch
):
    """(``tight``: workers with room for one plan's blocks only: make-before-break
    switches load late on the workers that change.)"""
    with monkeypatch.context() as mp:
        trace, res, ended, _ = run(ticks, mode, max_parallel, scheduler, lose, tight, mp)
    assert len(ended) == len(trace)
    assert set(ended.values()) == {1}
    assert not (res.outcome == PENDING).any()
    if lose is None:
        assert not (res.outcome == FAILED).any(), [res.reasons[i] for i in set(res.reason)]
    switched = [r for r in res.control if r["switched"]]
    assert all(r["done_s"] is not None for r in switched)
    # one switch at a time: they do not overlap, and versions count up
    assert [r["version"] for r in switched] == list(range(1, len(switched) + 1))
    for a, b in itertools.pairwise(switched):
        assert a["done_s"] <= b["asked_s"] + 1e-9


def test_a_switch_reports_its_steps_and_times():
    _, res, _, sim = run({10}, "mbb", 2, "reservation", None)
    (rec,) = res.control
    assert rec["switched"] and rec["mode"] == "mbb" and rec["fallback"] == ""
    assert rec["moved"] > 0 and "keep" in rec["steps"]
    assert rec["decided_s"] == pytest.approx(10 * TICK_S + 0.01)
    assert rec["decided_s"] <= rec["cutover_s"] <= rec["done_s"]
    assert rec["paused_s"] == 0.0 and rec["waited"] == 0  # make-before-break: no pause
    assert sim.control is not None and sim.control.version == 1


def test_without_room_beside_the_old_blocks_a_switch_loads_late_and_never_pauses(
    monkeypatch,
):  # type: ignore[no-untyped-def]
    """Workers with room for one plan's blocks only: the make-before-break switch cuts
    over at once, the workers that change load their new blocks after the old plan has
    drained (their stages waiting for them, then running each block as it arrives), and
    ingestion never stops; no request fails. (Before: the switch fell back to PPipe's
    pause-flush-switch.)"""
    trace, res, ended, sim = run({10}, "mbb", 4, "reservation", None, True, monkeypatch)
    (rec,) = res.control
    assert rec["switched"] and rec["mode"] == "mbb" and rec["fallback"] == ""
    assert rec["late"], rec  # some workers had no room beside their old blocks
    assert rec["paused_s"] == 0.0 and rec["waited"] == 0
    assert rec["decided_s"] <= rec["cutover_s"] < rec["done_s"]
    assert set(ended.values()) == {1} and len(ended) == len(trace)
    assert not (res.outcome == FAILED).any(), [res.reasons[i] for i in set(res.reason)]
    # the late workers hold the new plan's blocks, and nothing waits any more
    held = sim.executor.held
    assert all(not held[w].waits and not held[w].streams for w in rec["late"])
    # the estimate saw them too: the switch was predicted to last their load longer
    assert rec["predicted_switch_s"] > 0


def test_flush_pauses_and_the_waiting_requests_are_served():
    _, res, _, _ = run({10}, "flush", 4, "reservation", None)
    (rec,) = res.control
    assert rec["paused_s"] > 0 and rec["waited"] > 0
    assert not math.isnan(rec["cutover_s"])


def test_replanning_needs_batch_ids_from_the_base_scheduler():
    class Own:
        preempts = False

        def start(self, view, plan, now):  # type: ignore[no-untyped-def]
            return []

    with pytest.raises(HetserveError, match="BaseScheduler"):
        Switching(lambda: Own())  # type: ignore[arg-type,return-value]
    assert isinstance(make_scheduler("fixed-batch").inner, BaseScheduler)  # type: ignore[attr-defined]


def test_the_wrapper_costs_nothing_when_nothing_switches():
    """With re-planning on but no switch, a run's outcomes are the static run's."""
    setup = setup_for(0.8)
    trace = turning_trace(setup, 0.8 * setup.plan.capacity_rps(), 0.5, 0.5)
    static = simulate(setup, "reservation", trace)
    spec = ControlSpec(Scripted(set()), alternate, {}, ControlConfig(tick_s=TICK_S))
    wrapped = simulate(setup, "reservation", trace, control=spec)
    assert (static.outcome == wrapped.outcome).all()
    np.testing.assert_array_equal(static.finish_s, wrapped.finish_s)  # (NaN: not finished)
