"""The ``magicbatch`` scheduler in the simulator: planned batches, deadlines, drops with
reasons, energy as planned, shared GPUs, TF-Serving on the same plan."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.core.latency import RooflineModel
from hetserve.core.outcome import DROPPED, LATE, OK
from hetserve.engine.setup import Setup
from hetserve.experiments.magicbatch.study import edge_cluster, plan_method, simulate_plan
from hetserve.experiments.setup import build_trace, model_rates, simulate
from hetserve.planning.magicbatch import EdgeStream, random_streams

CLUSTER = edge_cluster(2)
LAT = RooflineModel(catalog=CLUSTER.catalog)
MODELS = ("vgg16", "googlenet", "resnet101", "densenet121")


def _run(plan, scheduler="magicbatch", params=None, duration_s=20.0, seed=0, lf=1.0):
    from hetserve.core.plan import bind

    names = list(plan.models)
    setup = Setup(CLUSTER, LAT, names, {m: plan.models[m].slo_s for m in names}, plan,
                  bind(plan, CLUSTER))  # fmt: skip
    trace = build_trace(setup, "poisson", model_rates(setup, None, lf), duration_s, seed)
    return simulate(setup, scheduler, trace, params or {}), trace


def test_each_stream_runs_on_its_gpu_at_its_planned_batch_and_meets_every_deadline():
    streams = random_streams(5, MODELS, seed=3)
    plan, _ = plan_method("exact", streams, CLUSTER, LAT, 0)
    res, trace = _run(plan)
    assert (res.outcome == OK).all()  # every deadline met
    # each batch runs one stream's requests on that stream's GPU, at most its planned size
    stream_of = [r.stream for r in trace.requests()]
    planned = plan.assignments
    batches = {row[0]: row for row in res.stage_rows}
    worker_of = {}
    for rid, bid in enumerate(res.batch.tolist()):
        s = planned[stream_of[rid]]
        row = batches[int(bid)]
        assert row[4] == s.gpu.rsplit("#", 1)[0]  # the planned GPU type
        assert row[5] <= s.batch
        worker_of.setdefault(s.stream, set()).add(row[3])
    # one GPU per stream, and (exact) no two streams on one GPU
    assert all(len(ws) == 1 for ws in worker_of.values())
    assert len({next(iter(ws)) for ws in worker_of.values()}) == len(worker_of)
    # the streams fill their batches: most requests leave in a batch of the planned size
    sizes = [batches[int(b)][5] for b in res.batch.tolist()]
    full = np.mean([sz == planned[stream_of[i]].batch for i, sz in enumerate(sizes)])
    assert full > 0.5


def test_simulated_energy_is_the_planned_energy():
    streams = random_streams(6, MODELS, seed=1)
    plan, _ = plan_method("exact", streams, CLUSTER, LAT, 0)
    sim = simulate_plan(plan, CLUSTER, LAT, "magicbatch", {}, 60.0, 0)
    planned = plan.meta["objective"]["busy_power_w"] * 60.0
    assert sim["energy_j"] == pytest.approx(planned, rel=0.05)
    total = plan.meta["objective"]["total_power_w"] * 60.0
    assert sim["total_j"] == pytest.approx(total, rel=0.05)


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([1.0, 1.5, 3.0]),
       st.sampled_from(["exact", "shared"]))  # fmt: skip
def test_no_request_ever_finishes_late(seed, lf, method):
    """Batches leave in time for their oldest request and a GPU runs one at a time, so a
    request meets its deadline or is dropped with a reason (overload: lf > 1)."""
    streams = random_streams(6, MODELS, seed=seed)
    plan, _ = plan_method(method, streams, CLUSTER, LAT, seed)
    res, _ = _run(plan, duration_s=5.0, seed=seed, lf=lf)
    assert not (res.outcome == LATE).any()
    if lf == 1.0:
        assert (res.outcome == OK).mean() >= 0.999
    reasons = {res.reasons[i] for i in res.reason[res.outcome == DROPPED].tolist()}
    assert reasons <= {"deadline unreachable"}


def test_shared_packs_streams_and_still_meets_every_deadline():
    streams = random_streams(6, MODELS, seed=5)
    plan, a = plan_method("shared", streams, CLUSTER, LAT, 0)
    assert len(set(a.gpu_of.values())) < len(a.gpu_of)  # some GPU serves several streams
    res, _ = _run(plan, duration_s=30.0)
    assert (res.outcome == OK).all()


def test_rejected_streams_are_dropped_with_the_planner_s_reason():
    streams = [*random_streams(2, ("resnet101",), seed=0),
               EdgeStream("hopeless", "vgg16", 20.0, 0.001)]  # fmt: skip
    plan, a = plan_method("exact", streams, CLUSTER, LAT, 0)
    assert "hopeless" in a.rejected
    # serve the rejected stream's requests too: the scheduler drops them, saying why
    plan = replace(plan, assignments={
        **plan.assignments, "hopeless": replace(plan.assignments["hopeless"], model="resnet101")
    })  # fmt: skip
    from hetserve.core.plan import bind
    from hetserve.core.requests import Stream
    from hetserve.workload.arrivals import Poisson
    from hetserve.workload.trace import generate

    trace = generate([Stream("s0000", "resnet101", 0.3, Poisson(20.0)),
                      Stream("hopeless", "resnet101", 0.3, Poisson(20.0))], 5.0, 0)  # fmt: skip
    setup = Setup(CLUSTER, LAT, ["resnet101"], {"resnet101": 0.3}, plan, bind(plan, CLUSTER))
    res = simulate(setup, "magicbatch", trace)
    mine = np.array([s.stream == "hopeless" for s in trace.requests()])
    assert (res.outcome[mine] == DROPPED).all()
    assert all(res.reasons[i] == "not_provisioned" for i in res.reason[mine].tolist())
    assert (res.outcome[~mine] == OK).all()


def test_tf_serving_runs_on_the_same_plan_and_spends_more_energy():
    streams = random_streams(6, MODELS, seed=2)
    fcfs, _ = plan_method("fcfs", streams, CLUSTER, LAT, 0)
    psoga, _ = plan_method("pso-ga", streams, CLUSTER, LAT, 0)
    tf = simulate_plan(fcfs, CLUSTER, LAT, "fixed-batch",
                       {"max_batch": 32, "max_queue_delay_s": 0.03}, 20.0, 0)  # fmt: skip
    mb = simulate_plan(psoga, CLUSTER, LAT, "magicbatch", {}, 20.0, 0)
    assert tf["requests"] == mb["requests"]  # the same streams, the same arrivals
    assert mb["energy_j"] < tf["energy_j"]
    assert mb["attainment"] == 1.0
