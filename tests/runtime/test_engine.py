"""The runtime engine: the same scheduler decisions as the simulator, exactly one outcome
per request, and real PyTorch execution."""

import pytest

from hetserve.core.outcome import OK
from hetserve.engine.modelled import ModelledExecutor
from hetserve.engine.setup import build_setup
from hetserve.experiments.setup import build_trace
from hetserve.experiments.shepherd.scenarios import group_setup
from hetserve.runtime.engine import RuntimeEngine, VirtualClock
from hetserve.scheduling import ClusterView, make_scheduler
from hetserve.sim.engine import SimConfig, Simulator
from hetserve.workload.maf import maf_trace


def _runtime(setup, name, trace, params=None, fail=None):
    clock = VirtualClock()
    view = ClusterView.build(setup.cluster, setup.latency, setup.placement)
    done = {}

    def on_done(r, outcome, reason, out):
        assert r.id not in done  # exactly once
        done[r.id] = outcome

    eng = RuntimeEngine(
        view, setup.plan, make_scheduler(name, params), ModelledExecutor(), clock, on_done
    )
    eng.start()
    for r in trace.requests():
        clock.at(r.arrival_s, lambda r=r: eng.submit(r))
    if fail is not None:
        clock.at(fail[1], lambda: eng.worker_lost(fail[0]))
    clock.run()
    return eng, done


def _sim_dispatches(res):
    """(first stage start... ) per batch: model, requests and route workers."""
    reqs = {}
    for i, b in enumerate(res.batch.tolist()):
        reqs.setdefault(b, []).append(i)
    route = {}
    for row in res.stage_rows:
        route.setdefault(row[0], {})[row[2]] = row[3]
    return {
        b: (res.trace.streams[res.trace.stream_idx[ids[0]]].model, tuple(ids),
            tuple(route[b][k] for k in sorted(route[b])))
        for b, ids in reqs.items() if b >= 0
    }  # fmt: skip


def _check_parity(setup, name, trace, params=None, fail=None):
    sim = Simulator(
        setup.cluster, setup.latency, setup.plan, setup.placement,
        make_scheduler(name, params), trace, SimConfig(),
    )  # fmt: skip
    if fail is not None:
        sim.fail_worker(*fail)
    res = sim.run()
    eng, done = _runtime(setup, name, trace, params, fail)
    sim = _sim_dispatches(res)
    rt = {}
    for _, bid, model, ids, workers in eng.dispatch_log:
        rt[bid] = (model, tuple(sorted(ids)), workers)
    # the last dispatch of every request is the same batch, with the same route
    last = {}
    for _, bid, _, ids, _ in eng.dispatch_log:
        for i in ids:
            last[i] = bid
    rt_final = {}
    for i, bid in last.items():
        rt_final.setdefault(bid, []).append(i)
    assert {b: sim[b] for b in sim} == {
        b: (rt[b][0], tuple(sorted(ids)), rt[b][2]) for b, ids in rt_final.items()
    }
    # and the same outcome for every request
    assert len(done) == len(trace)
    assert [done[i] for i in range(len(trace))] == res.outcome.tolist()
    return res, eng


def test_parity_edf_adaptive_whole_models():
    s = build_setup("hc1-s", ["resnet50", "efficientnet-b0"])
    tr = build_trace(s, "gamma:cv=2", s.plan.rates_at(0.9), 2.0, seed=3)
    _check_parity(s, "edf-adaptive", tr)


def test_parity_flex_with_preemptions():
    models = ["resnet18", "resnet50", "rs200"]
    s = group_setup(2, dict.fromkeys(models, 0.1))
    tr = maf_trace("maf-bursty", models, 40, 400.0, 3.0, 0.1, seed=2)
    res, eng = _check_parity(s, "flex", tr)
    assert eng.scheduler.preemptions > 0  # the case that matters
    assert (res.outcome == OK).mean() > 0.5


@pytest.mark.parametrize("name", ["flex", "edf-adaptive"])
def test_parity_when_a_worker_is_lost(name):
    """A worker lost mid-run: in both engines the scheduler hears of it first, its batches
    come back and are re-dispatched on the others the same way; nothing is lost."""
    models = ["resnet18", "resnet50"]
    s = group_setup(3, dict.fromkeys(models, 0.1))
    tr = maf_trace("maf-bursty", models, 40, 300.0, 2.0, 0.1, seed=4)
    w0 = s.placement.workers[0].id
    eng, _ = _runtime(s, name, tr)  # lose w0 just after a batch started on it
    t_fail = next(t for t, _, _, _, ws in eng.dispatch_log if t > 0.5 and ws[0] == w0) + 1e-4
    res, eng = _check_parity(s, name, tr, fail=(w0, t_fail))
    again = [i for _, _, _, ids, _ in eng.dispatch_log for i in ids]
    assert len(again) > len(set(again))  # some requests were dispatched twice
    assert w0 in eng.lost
    late = [ws for t, _, _, _, ws in eng.dispatch_log if t > t_fail]
    assert late and all(w0 not in ws for ws in late)
    assert (res.outcome == OK).mean() > 0.5


def _two_pool_setup(model="resnet50", n=(12, 4)):
    from hetserve.core.plan import ModelPlan, Pipeline, Plan, Stage, bind
    from hetserve.engine.setup import Setup

    base = build_setup("hc1-s", [model])
    st = (Stage((0, 5), "P4", 1, n[0]), Stage((5, 10), "L4", 1, n[1]))
    plan = Plan({model: ModelPlan(base.slos_s[model], 1.0, (Pipeline(st, 4, 0.0, 2000.0),))})
    return Setup(base.cluster, base.latency, [model], base.slos_s, plan, bind(plan, base.cluster))


def test_parity_reservation_pipelines_with_transfers():
    s = _two_pool_setup()
    tr = build_trace(s, "poisson", {"resnet50": 1500.0}, 1.0, seed=1)
    res, _ = _check_parity(s, "reservation", tr)
    assert any(row[2] == 1 for row in res.stage_rows)  # two-stage batches ran


def test_parity_reactive_open_routes():
    """reactive runs one stage per dispatch (open routes, rule 4): requests park on a P4
    worker and a later dispatch gathers them, possibly from several, onto an L4 worker."""
    s = _two_pool_setup()
    tr = build_trace(s, "poisson", {"resnet50": 1500.0}, 1.0, seed=1)
    res, eng = _check_parity_open(s, "reactive", tr)
    assert not eng.parked  # every request ended, nothing left parked
    assert (res.outcome == OK).mean() > 0.5


def _check_parity_open(setup, name, trace):
    """Open routes: a request is dispatched once per stage, so compare every dispatch (its
    worker and size) and every outcome."""
    sim = Simulator(
        setup.cluster, setup.latency, setup.plan, setup.placement,
        make_scheduler(name), trace, SimConfig(),
    )  # fmt: skip
    res = sim.run()
    eng, done = _runtime(setup, name, trace)
    sim_d = {row[0]: (row[3], row[5]) for row in res.stage_rows}
    rt_d = {bid: (ws[0], len(ids)) for _, bid, _, ids, ws in eng.dispatch_log}
    assert sim_d == rt_d
    assert any(row[2] == 1 and row[5] > 1 for row in res.stage_rows)  # continued, batched
    assert len(done) == len(trace)
    assert [done[i] for i in range(len(trace))] == res.outcome.tolist()
    return res, eng


def test_unknown_model_is_refused():
    from hetserve.core.errors import HetserveError
    from hetserve.core.requests import Request

    s = group_setup(1, {"resnet18": 0.1})
    eng = RuntimeEngine(
        ClusterView.build(s.cluster, s.latency, s.placement), s.plan, make_scheduler("flex"),
        ModelledExecutor(), VirtualClock(),
    )  # fmt: skip
    eng.start()
    with pytest.raises(HetserveError, match="no model 'bert'"):
        eng.submit(Request(0, "bert", "s", 0.0, 1.0))


@pytest.mark.torch
@pytest.mark.parametrize("sched", ["fixed-batch", "reactive"])
def test_real_execution_of_a_two_stage_pipeline_with_fp16_cuts(sched):
    """Requests with payloads go through a P4 stage and an L4 stage running the zoo model's
    blocks for real; every request's output is the single-process output (FP16 cut).
    ``reactive`` runs each stage as an open route: activations park on the P4 worker(s)
    and are gathered for the L4 stage."""
    torch = pytest.importorskip("torch")
    from hetserve.core.plan import ModelPlan, Pipeline, Plan, Stage, bind
    from hetserve.core.requests import Request
    from hetserve.engine.setup import Setup
    from hetserve.runtime.torch_executor import TorchExecutor
    from hetserve.zoo.registry import build

    base = build_setup("hc1-s", ["resnet18"])
    st = (Stage((0, 6), "P4", 1, 2), Stage((6, 10), "L4", 1, 1))
    plan = Plan({"resnet18": ModelPlan(10.0, 1.0, (Pipeline(st, 2, 0.0, 100.0),))})
    s = Setup(base.cluster, base.latency, ["resnet18"], {"resnet18": 10.0}, plan,
              bind(plan, base.cluster))  # fmt: skip
    outs = {}
    clock = VirtualClock()
    eng = RuntimeEngine(
        ClusterView.build(s.cluster, s.latency, s.placement), plan,
        make_scheduler(sched, {"max_batch": 2, "max_queue_delay_s": 0.001} if sched ==
                       "fixed-batch" else {}),
        TorchExecutor(build), clock, lambda r, o, why, out: outs.__setitem__(r.id, (o, out)),
    )  # fmt: skip
    eng.start()
    model = build("resnet18")
    xs = [model.input_spec.example(1, seed=i)[0] for i in range(5)]
    for i, x in enumerate(xs):
        clock.at(
            0.0001 * i,
            lambda i=i, x=x: eng.submit(Request(i, "resnet18", "s", 0.0001 * i, 10.0), x[None]),
        )
    clock.run()
    assert sorted(outs) == list(range(5)) and all(o == OK for o, _ in outs.values())
    with torch.inference_mode():
        ref = model(torch.stack(xs))
    for i in range(5):
        got = outs[i][1][0]  # (a request's answer: its rows, here one)
        assert ((got - ref[i]).norm() / ref[i].norm()).item() < 1e-3
    assert any(len(ids) >= 2 for _, _, _, ids, _ in eng.dispatch_log)  # batched
    if sched == "reactive":  # every request was dispatched once per stage
        assert len({ws for *_, ws in eng.dispatch_log}) >= 2 and not eng.parked
        assert sum(len(ids) for *_, ids, _ in eng.dispatch_log) == 10


class _LateClock(VirtualClock):
    """Callbacks run 0.1 ms after their time, as on an event loop."""

    def call_at(self, t, fn, a=None, b=None):
        super().call_at(t + 1e-4, fn, a, b)


@pytest.mark.parametrize(
    "name", ["edf-adaptive", "fixed-batch", "reservation", "reactive", "flex", "clockwork"]
)
def test_timers_that_fire_late_are_still_honoured(name):
    """On a wall clock a timer fires a little after its time; a scheduler must still act on
    it (a lone request waiting for its batch to fill would otherwise wait forever)."""
    from hetserve.core.requests import Request

    s = build_setup("hc1-s", ["resnet50"])
    done = {}
    clock = _LateClock()
    eng = RuntimeEngine(
        ClusterView.build(s.cluster, s.latency, s.placement), s.plan,
        make_scheduler(name, {"margin_s": 1e-3} if name in ("edf-adaptive", "reservation") else {}),
        ModelledExecutor(), clock, lambda r, o, why, out: done.setdefault(r.id, o),
    )  # fmt: skip
    eng.start()
    slo = s.plan.models["resnet50"].slo_s
    clock.at(0.0, lambda: eng.submit(Request(0, "resnet50", "s", 1e-4, 1e-4 + slo)))
    clock.run(until=10.0)
    assert done == {0: OK}


def test_a_timer_the_clock_fires_early_still_reaches_the_scheduler_at_its_time():
    """Rule 6 on the wall clock: asyncio may run a callback a little before its time; the
    engine must not hand the scheduler a time before the one it asked for (MagicBatch
    then found nothing due, set no new timer, and its queue waited forever)."""
    from hetserve.scheduling import BaseScheduler, SetTimer

    class EarlyClock(VirtualClock):
        def call_at(self, t, fn, a=None, b=None):
            super().call_at(t - 1e-7, fn, a, b)  # fires 100 ns early

    seen = []

    class Timed(BaseScheduler):
        def start(self, view, plan, now):
            super().start(view, plan, now)
            return [SetTimer(0.25, "t")]

        def on_timer(self, token, now):
            seen.append(now)
            return []

    setup = build_setup("hc1-s", ["resnet50"])
    view = ClusterView.build(setup.cluster, setup.latency, setup.placement)
    clock = EarlyClock()
    eng = RuntimeEngine(view, setup.plan, Timed(), ModelledExecutor(), clock)
    eng.start()
    clock.run()
    assert seen == [0.25]
