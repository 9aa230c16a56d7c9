"""fixed-batch driven through the protocol with a fake clock (no engine)."""

import pytest

from hetserve.core.requests import Request
from hetserve.scheduling import ClusterView, Dispatch, SetTimer, StageReport, make_scheduler
from tests.helpers import linear_setup


def _start(max_batch=4, delay=0.01, n_gpus=1):
    s = linear_setup(n_gpus=n_gpus, max_batch=max_batch, slo_s=1.0)
    sched = make_scheduler("fixed-batch", {"max_batch": max_batch, "max_queue_delay_s": delay})
    view = ClusterView.build(s.cluster, s.latency, s.placement)
    assert sched.start(view, s.plan, 0.0) == []
    return sched


def _req(i, t, slo=1.0):
    return Request(i, "m", "s", t, t + slo)


def _done(d: Dispatch, start, end):
    st = d.route[0]
    return StageReport(
        "stage",
        d.batch_id,
        d.model,
        0,
        st.worker,
        start,
        end,
        d.requests,
        True,
        True,
        "",
        st.blocks,
        st.blocks[1] - st.blocks[0],
    )


def test_timeout_dispatches_partial_batch():
    s = _start()
    acts = s.on_arrival(_req(0, 0.0), 0.0)
    assert acts == [SetTimer(0.01, ("m", 0))]
    assert s.on_arrival(_req(1, 0.001), 0.001) == []
    assert s.on_arrival(_req(2, 0.002), 0.002) == []
    (d,) = s.on_timer(("m", 0), 0.01)
    assert isinstance(d, Dispatch) and [r.id for r in d.requests] == [0, 1, 2]


def test_full_batch_goes_at_once_and_waits_for_a_free_worker():
    s = _start(max_batch=2)
    s.on_arrival(_req(0, 0.0), 0.0)
    (d1,) = s.on_arrival(_req(1, 0.001), 0.001)
    assert [r.id for r in d1.requests] == [0, 1]
    acts = s.on_arrival(_req(2, 0.002), 0.002)
    assert acts == [SetTimer(0.012, ("m", 2))]
    assert s.on_arrival(_req(3, 0.003), 0.003) == []  # full, but the only worker is busy
    (d2,) = s.on_stage_done(_done(d1, 0.001, 0.005), 0.005)
    assert [r.id for r in d2.requests] == [2, 3]
    assert len({d1.batch_id, d2.batch_id}) == 2


def test_stale_timer_ignored_and_fifo_order():
    s = _start(max_batch=3, delay=0.01)
    s.on_arrival(_req(0, 0.0), 0.0)
    s.on_arrival(_req(1, 0.0), 0.0)
    (d,) = s.on_arrival(_req(2, 0.0), 0.0)
    assert [r.id for r in d.requests] == [0, 1, 2]
    assert s.on_timer(("m", 0), 0.01) == []  # request 0 already gone


def test_uses_every_worker():
    s = _start(max_batch=1, n_gpus=3)
    ws = set()
    for i in range(3):
        (d,) = s.on_arrival(_req(i, 0.0), 0.0)
        ws.add(d.route[0].worker)
    assert len(ws) == 3
    assert s.on_arrival(_req(3, 0.0), 0.0) == []


def test_preempted_requests_return_first():
    s = _start(max_batch=2)
    s.on_arrival(_req(0, 0.0), 0.0)
    (d,) = s.on_arrival(_req(1, 0.0), 0.0)
    (timer,) = s.on_arrival(_req(2, 0.001), 0.001)
    assert timer == SetTimer(0.011, ("m", 2))
    st = d.route[0]
    rep = StageReport(
        "stage",
        d.batch_id,
        "m",
        0,
        st.worker,
        0.0,
        0.002,
        d.requests,
        False,
        False,
        "preempted",
        st.blocks,
        0,
    )
    (d2,) = s.on_stage_done(rep, 0.002)  # (request 2 is the head again: its timer is armed)
    assert [r.id for r in d2.requests] == [0, 1]
    assert s.on_timer(timer.token, 0.011) == []  # (its worker is busy: it waits)


def test_bad_parameters():
    from hetserve.core.errors import HetserveError

    with pytest.raises(HetserveError):
        make_scheduler("fixed-batch", {"max_batch": 0})
    with pytest.raises(HetserveError, match="unknown parameter 'colour'; it takes max_batch"):
        make_scheduler("fixed-batch", {"colour": 1})
    with pytest.raises(HetserveError, match="max_batch must be an integer >= 1, got 'abc'"):
        make_scheduler("fixed-batch", {"max_batch": "abc"})
    with pytest.raises(HetserveError, match="did you mean 'fixed-batch'"):
        make_scheduler("fixed-bach")


def test_every_scheduler_copes_with_a_model_without_pipelines():
    """A plan that gives a model no pipeline: every scheduler starts, and requests for that
    model are dropped at arrival as "not provisioned" (the other models are served)."""
    from hetserve.core.plan import ModelPlan, Plan, bind
    from hetserve.core.requests import Request
    from hetserve.engine.setup import build_setup
    from hetserve.scheduling import ClusterView, Drop, make_scheduler
    from hetserve.scheduling.protocol import BUILTIN, SCHEDULERS, scheduler_factory

    for name in BUILTIN:
        assert scheduler_factory(name) is not None, name
    s = build_setup("hc1-s", ["resnet50", "efficientnet-b0"])
    models = dict(s.plan.models)
    models["efficientnet-b0"] = ModelPlan(models["efficientnet-b0"].slo_s)
    plan = Plan(models, s.plan.shared_pools, s.plan.meta, s.plan.groups)
    view = ClusterView.build(s.cluster, s.latency, bind(plan, s.cluster))
    for name in sorted(SCHEDULERS):
        if name == "magicbatch":  # serves stream assignments only; its own tests drop
            continue  # requests of streams the plan does not place, with the reason
        sched = make_scheduler(name, {})
        sched.start(view, plan, 0.0)
        acts = sched.on_arrival(Request(1, "efficientnet-b0", "s", 0.0, 1.0), 0.0)
        assert acts == [Drop(acts[0].requests, "not_provisioned")], name
        sched.on_arrival(Request(2, "resnet50", "s", 0.0, 1.0), 0.0)  # served as before


def test_the_idle_sets_hold_the_idle_first_stage_workers_through_a_run():
    """fixed-batch finds a free first-stage worker from its idle sets (``idle_of``): after
    every call of a run (two models, a two-stage pipeline, bursts, three workers lost),
    each model's set holds exactly the places in ``first_workers`` whose worker has
    nothing outstanding and is not lost, as ``Pools.idle`` says worker by worker."""
    from hetserve.core.plan import ModelPlan, Pipeline, Plan, Stage, bind
    from hetserve.engine.setup import Setup, build_setup
    from hetserve.experiments.setup import build_trace
    from hetserve.scheduling.fixed_batch import FixedBatch
    from hetserve.sim.engine import SimConfig, Simulator

    checks = [0]

    class Checked(FixedBatch):
        def _check(self):
            for m, first in self.first_workers.items():
                idle = self.idle_of[m]
                want = [i for i, (w, _) in enumerate(first) if self.pools.idle(w)]
                got, i = [], idle.first_from(0)
                while i >= 0:
                    got.append(i)
                    i = idle.first_from(i + 1)
                assert got == want and idle.count == len(want), m
            checks[0] += 1

    def checked(name):  # (the protocol's call ``name``, then the check)
        def call(self, event, now):
            out = getattr(FixedBatch, name)(self, event, now)
            self._check()
            return out

        return call

    for name in ("on_arrival", "on_timer", "on_stage_done", "on_worker_lost"):
        setattr(Checked, name, checked(name))

    base = build_setup("hc1-s", ["resnet50", "resnet18"])
    two = (Stage((0, 5), "P4", 1, 6), Stage((5, 10), "L4", 1, 4))
    one = (Stage((0, 10), "P4", 1, 6),)
    plan = Plan({
        "resnet50": ModelPlan(base.slos_s["resnet50"], 1.0, (Pipeline(two, 4, 0.0, 900.0),)),
        "resnet18": ModelPlan(base.slos_s["resnet18"], 1.0, (Pipeline(one, 4, 0.0, 900.0),)),
    })  # fmt: skip
    s = Setup(base.cluster, base.latency, ["resnet50", "resnet18"], base.slos_s, plan,
              bind(plan, base.cluster))  # fmt: skip
    tr = build_trace(s, "gamma:cv=2", {"resnet50": 700.0, "resnet18": 700.0}, 2.0, seed=5)
    sched = Checked(max_batch=4, max_queue_delay_s=0.002)
    sim = Simulator(s.cluster, s.latency, s.plan, s.placement, sched, tr, SimConfig(seed=1))
    for k, at in ((1, 0.5), (8, 0.9), (13, 1.4)):
        sim.fail_worker(s.placement.workers[k].id, at)
    res = sim.run()
    assert checks[0] > len(tr) and len(sched.pools.lost) == 3
    assert (res.outcome != 0).all()  # (every request ended: none left pending)
