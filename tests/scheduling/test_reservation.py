"""reservation and reactive: unit tests with a fake clock, and simulations."""

import itertools
from unittest.mock import ANY

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.core.cluster import parse_cluster
from hetserve.core.errors import HetserveError
from hetserve.core.latency import LinearModel, LinearParams
from hetserve.core.outcome import LATE, OK, PENDING
from hetserve.core.plan import ModelPlan, Pipeline, Plan, Stage, bind
from hetserve.core.profiles import ProfileSet, TableModel
from hetserve.core.requests import Request
from hetserve.engine.setup import Setup, build_setup
from hetserve.experiments.metrics import summarize
from hetserve.experiments.setup import build_trace, simulate
from hetserve.scheduling import ClusterView, Dispatch, Drop, SetTimer, make_scheduler
from hetserve.scheduling.reservation import ReservationTable
from hetserve.sim.engine import SimConfig

# ------------------------------------------------------------------ the table


def _scan(reserved, resources, t, duration):
    """The earliest free start >= t: candidates are t and every interval end after t."""

    def free(x):
        return all(
            not (s < x + duration and x < s + d) for res, s, d in reserved if res in resources
        )

    return min(x for x in [t] + [s + d for _, s, d in reserved if s + d >= t] if free(x))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 40), st.integers(1, 8)),
        max_size=12,
    ),
    st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True),
    st.integers(0, 50),
    st.integers(1, 10),
)
def test_earliest_slot_matches_a_scan(reserved, resources, t, duration):
    table = ReservationTable()
    for k, (res, s, d) in enumerate(reserved):
        table.add(res, float(s), float(s + d), k)
    got = table.earliest_slot(resources, float(t), float(duration))
    assert got == pytest.approx(_scan(reserved, resources, t, duration))


def test_replace_and_remove():
    t = ReservationTable()
    t.add("w", 0.0, 1.0, 1)
    t.add("w", 2.0, 3.0, 2)
    t.replace("w", 1, 0.0, 2.5)
    assert t.earliest_slot(["w"], 0.0, 0.5) == 3.0
    t.remove_batch(2, ["w"])
    assert t.earliest_slot(["w"], 0.0, 0.5) == 2.5
    t.forget_before(10.0)
    assert t.intervals("w") == []


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 60), st.integers(1, 8)),
        max_size=14,
    ),
    st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=2, unique=True),
    st.integers(0, 50),
    st.integers(3, 10),
    st.integers(0, 4),
    st.integers(0, 30),
)
def test_fast_paths_with_min_gap_match_a_scan(reserved, resources, t, duration, gap, now):
    """``front``/``solid`` answer most queries in O(1); with a ``min_gap`` no longer than any
    query, they must agree with a plain scan, also after past intervals are dropped."""
    table = ReservationTable()
    for res in ("a", "b"):
        table.set_min_gap(res, float(min(gap, 3)))
    table.now = float(now)
    for k, (res, s, d) in enumerate(reserved):
        table.add(res, float(s), float(s + d), k)
    t = max(t, now)
    got = table.earliest_slot(resources, float(t), float(duration))
    assert got == pytest.approx(_scan(reserved, resources, t, duration))


# ------------------------------------------------------------------ probe (PPipe Fig. 5)


def _fig5() -> Setup:
    """Pool 1: one GPU on n0; pool 2: GPUs on n1 and n2 (1 Gbps NICs). Stage latencies
    2 ms and 3 ms at batch 1; 1 MB crosses the cut (8 ms at 1 Gbps with FP32 cuts, which
    these tests ask for)."""
    c = parse_cluster(
        {"name": "fig5", "nodes": [{"count": 3, "name": "n", "gpus": {"V100": 1}, "nic_gbps": 1}]},
        "fig5",
    )
    ps = ProfileSet()
    ps.out_bytes["m"] = [1e6, 1e3]
    ps.latency_us[("m", "V100-16GB", 1, 1)] = [2000.0, 3000.0]
    ps.latency_us[("m", "V100-16GB", 1, 2)] = [3000.0, 4000.0]
    lat = TableModel(ps)
    plan = Plan(
        {
            "m": ModelPlan(
                1.0,
                1.0,
                (
                    Pipeline(
                        (Stage((0, 1), "V100", 1, 1), Stage((1, 2), "V100", 1, 2)), 1, 0.013, 100.0
                    ),
                ),
            )
        }
    )
    pl = bind(plan, c)
    return Setup(c, lat, ["m"], {"m": 1.0}, plan, pl)


def test_probe_picks_the_worker_that_completes_first_and_holds_both_links():
    s = _fig5()
    sched = make_scheduler("reservation")
    sched.start(ClusterView.build(s.cluster, s.latency, s.placement, 1.0), s.plan, 0.0)
    pipe = sched.pools.pipelines["m"][0]
    first = pipe.stages[0][1][0]
    w_a, w_b = pipe.stages[1][1]
    # w_a's downlink is busy until 20 ms: the transfer to w_b can go at once
    node_a = s.placement.worker(w_a).node
    sched.table.add(f"{node_a}:down", 0.0, 0.020, 99)
    pr = sched.probe(pipe, 1, 0.0)
    name = sched.table.names  # (the probe numbers resources)
    assert [name[w] for w in pr.path] == [first, w_b]
    assert pr.finish_s == pytest.approx(0.002 + 0.008 + 0.003)
    assert pr.wait_s == pytest.approx(0.0)
    node_f = s.placement.worker(first).node
    node_b = s.placement.worker(w_b).node
    res = {name[r] for r, _, _ in pr.resv}
    assert {first, w_b, f"{node_f}:up", f"{node_b}:down"} == res
    # and probe is side-effect free
    assert sched.probe(pipe, 1, 0.0).finish_s == pytest.approx(pr.finish_s)


def _three_stage() -> Setup:
    """Four nodes of two V100s (1 Gbps NICs); a 3-stage pipeline over pools of 3, 4 and 1."""
    c = parse_cluster(
        {"name": "p3", "nodes": [{"count": 4, "name": "n", "gpus": {"V100": 2}, "nic_gbps": 1}]},
        "p3",
    )
    ps = ProfileSet()
    ps.out_bytes["m"] = [2e5, 1e5, 1e3]
    for b in (1, 2, 3):
        ps.latency_us[("m", "V100-16GB", 1, b)] = [1000.0 * b, 1500.0 * b, 700.0 * b]
    stages = (Stage((0, 1), "V100", 1, 3), Stage((1, 2), "V100", 1, 4), Stage((2, 3), "V100", 1, 1))
    plan = Plan({"m": ModelPlan(1.0, 1.0, (Pipeline(stages, 3, 0.05, 100.0),))})
    return Setup(c, TableModel(ps), ["m"], {"m": 1.0}, plan, bind(plan, c))


def _stage_options(sched, pipe, batch, t, last, blocks, workers):
    """PPipe Algorithm 2 for one stage, as written: every worker of the pool with plain
    earliest_slot calls; {worker: (completion, busy seconds)}."""
    lat, table = sched.view.latency, sched.table
    out = {}
    for w in workers:
        tw, b = t, 0.0
        if last is not None:
            links, bw, delay = sched._link(last, w)
            if links:
                nbytes = lat.out_bytes("m", blocks[0] - 1) * batch * sched.view.cut_bytes_factor
                l_n = nbytes * 8 / (bw * 1e9) + delay
                tw = table.earliest_slot(links, tw, l_n) + l_n
                b += l_n
        l_i = sched.view.stage_latency_s("m", w, batch, blocks)
        out[w] = (table.earliest_slot([w], tw, l_i) + l_i, b + l_i)
    return out


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 15), st.integers(0, 40), st.integers(1, 12)),
        max_size=25,
    ),
    st.integers(0, 20),
    st.integers(1, 3),
)
def test_probe_with_pool_orders_equals_the_full_scan(reserved, now_ms, batch):
    """The probe visits workers in front order and stops early; at every stage it must pick
    a worker that completes as early as the best one a scan of the whole pool finds."""
    s = _three_stage()
    sched = make_scheduler("reservation")
    sched.start(ClusterView.build(s.cluster, s.latency, s.placement), s.plan, 0.0)
    workers = sorted(sched.view.workers)
    resources = workers + [f"n{i}:{d}" for i in range(4) for d in ("up", "down")]
    for k, (r, a, d) in enumerate(reserved):
        res = resources[r % len(resources)]
        sched.table.add(res, a / 1000, (a + d) / 1000, -1 - k)
    sched.table.now = now_ms / 1000
    pipe = sched.pools.pipelines["m"][0]
    now = now_ms / 1000
    pr = sched.probe(pipe, batch, now)
    # greedy, stage by stage: the chosen worker completes no later than any other of its
    # pool given the same earlier path (ties may go either way)
    t, last, busy = now, None, 0.0
    name = sched.table.names  # (the probe numbers resources)
    for (blocks, workers), w in zip(pipe.stages, [name[x] for x in pr.path], strict=True):
        opts = _stage_options(sched, pipe, batch, t, last, blocks, workers)
        assert opts[w][0] == pytest.approx(min(c for c, _ in opts.values()), abs=1e-9)
        t, last, busy = opts[w][0], w, busy + opts[w][1]
    assert pr.finish_s == pytest.approx(t, abs=1e-9)
    assert pr.wait_s == pytest.approx(t - now - busy, abs=1e-9)
    # the path it returns is feasible: every reservation fits the table as it is
    for res, start, dur in pr.resv:
        assert sched.table.earliest_slot([name[res]], start, dur) == pytest.approx(start)


def test_dispatch_reserves_and_waits_like_algorithm_1():
    s = _fig5()
    sched = make_scheduler("reservation")
    sched.start(ClusterView.build(s.cluster, s.latency, s.placement, 1.0), s.plan, 0.0)
    r0 = Request(0, "m", "s", 0.0, 0.050)
    (d,) = sched.on_arrival(r0, 0.0)  # planned batch 1: goes at once
    assert isinstance(d, Dispatch) and [x.id for x in d.requests] == [0]
    assert d.route[0].planned_start_s == pytest.approx(0.0)
    # the first GPU is now reserved for 2 ms: the next request is planned after it
    (d2,) = sched.on_arrival(Request(1, "m", "s", 0.0005, 0.050), 0.0005)
    assert d2.route[0].planned_start_s == pytest.approx(0.002)
    # a request that cannot finish in time even alone is dropped
    (drop,) = sched.on_arrival(Request(2, "m", "s", 0.001, 0.005), 0.001)
    assert isinstance(drop, Drop) and drop.reason == "deadline"


def test_a_request_for_a_model_no_pipeline_serves_is_refused_in_one_line():
    s = _fig5()
    sched = make_scheduler("reservation")
    sched.start(ClusterView.build(s.cluster, s.latency, s.placement, 1.0), s.plan, 0.0)
    with pytest.raises(HetserveError, match="reservation: no pipeline serves model 'other'"):
        sched.on_arrival(Request(0, "other", "s", 0.0, 0.050), 0.0)
    (d,) = sched.on_arrival(Request(1, "m", "s", 0.0, 0.050), 0.0)  # the others still go
    assert isinstance(d, Dispatch)


def test_waits_for_a_fuller_batch():
    s = _fig5()
    plan = Plan(
        {
            "m": ModelPlan(
                1.0,
                1.0,
                (
                    s.plan.models["m"]
                    .pipelines[0]
                    .__class__(s.plan.models["m"].pipelines[0].stages, 2, 0.015, 100.0),
                ),
            )
        }
    )
    sched = make_scheduler("reservation")
    sched.start(ClusterView.build(s.cluster, s.latency, bind(plan, s.cluster), 1.0), plan, 0.0)
    (timer,) = sched.on_arrival(Request(0, "m", "s", 0.0, 0.100), 0.0)
    assert isinstance(timer, SetTimer)
    # batch 1 takes 2 + 8 + 3 = 13 ms: wait until 100 - 13 = 87 ms
    assert timer.at_s == pytest.approx(0.087)
    (d,) = sched.on_arrival(Request(1, "m", "s", 0.010, 0.100), 0.010)
    assert len(d.requests) == 2


# ------------------------------------------------------------------ simulations


def _invariants(res):
    assert (res.outcome != PENDING).all()
    by_worker = {}
    for row in res.stage_rows:
        by_worker.setdefault(row[3], []).append((row[6], row[7]))
    for iv in by_worker.values():
        iv.sort()
        for (_, e0), (s1, _) in itertools.pairwise(iv):
            assert s1 >= e0 - 1e-12


@pytest.fixture(scope="module")
def pipelined():
    """A PPipe plan with pipelined stages on hc2-s (two T4s per node share a NIC)."""
    from hetserve.core.plan import slos_from_scale
    from hetserve.planning.ppipe import plan_models

    base = build_setup("hc2-s", ["efficientnet-b8"])
    plan = plan_models(
        base.cluster,
        base.latency,
        slos_from_scale(base.cluster, base.latency, base.models, 5.0, "L4"),
    )
    assert any(len(p.stages) > 1 for p in plan.models["efficientnet-b8"].pipelines)
    return build_setup("hc2-s", base.models, plan=plan)


@pytest.mark.parametrize("sched", ["reservation", "reactive"])
def test_simulated_invariants(pipelined, sched):
    tr = build_trace(pipelined, "poisson", pipelined.plan.rates_at(0.8), 3.0, 1)
    res = simulate(pipelined, sched, tr, None, SimConfig(seed=1))
    _invariants(res)
    assert summarize(res)["attainment"] > 0.9


def test_reservation_makes_late_requests_rare_and_corrects_jitter(pipelined):
    tr = build_trace(pipelined, "poisson", pipelined.plan.rates_at(0.9), 3.0, 2)
    res = simulate(pipelined, "reservation", tr, None, SimConfig(seed=2))
    m = summarize(res)
    # every batch is reserved end to end before it goes: without jitter, (almost) nothing
    # finishes late; requests that cannot make it are dropped up front instead
    assert m["late"] <= 0.001 * m["arrived"]
    jit = simulate(
        pipelined, "reservation", tr, None, SimConfig(seed=2, jitter="lognormal", jitter_cv=0.1)
    )
    assert summarize(jit)["attainment"] > 0.9  # feedback correction keeps it on track
    assert (res.outcome == OK).sum() + (res.outcome == LATE).sum() > 0


def test_reactive_takes_the_largest_feasible_batch_at_once():
    c = parse_cluster(
        {"name": "one", "nodes": [{"name": "n", "gpus": {"V100": 1}, "nic_gbps": 10}]}, "one"
    )
    lat = LinearModel({("m", "V100"): LinearParams(0.001, 0.002)})
    plan = Plan(
        {"m": ModelPlan(0.02, 1.0, (Pipeline((Stage((0, 1), "V100", 1, 1),), 4, 0.006, 600.0),))}
    )
    sched = make_scheduler("reactive")
    sched.start(ClusterView.build(c, lat, bind(plan, c)), plan, 0.0)
    (d,) = sched.on_arrival(Request(0, "m", "s", 0.0, 0.020), 0.0)
    assert len(d.requests) == 1  # does not wait to fill a batch
    out = [sched.on_arrival(Request(i, "m", "s", 0.001, 0.0045), 0.001) for i in (1, 2)]
    assert out == [[], []]  # the only worker is busy


def test_reservation_beats_reactive_where_a_small_pool_follows_a_large_one():
    """PPipe 7.4 in miniature: EfficientNet-B8 on hc2-l pipes ~60 T4s into ~14 L4 slices.
    Without reservations each pool batches on its own: the idle T4s take batches of about
    one at once, the L4 pool cannot re-batch them up to the planned size fast enough, its
    queue grows, and requests that already used a T4 are dropped or finish late there. With
    reservations every batch has its slot on both pools before it goes."""
    import numpy as np

    from hetserve.core.plan import slos_from_scale
    from hetserve.planning.ppipe import plan_models

    base = build_setup("hc2-l", ["efficientnet-b8"])
    plan = plan_models(
        base.cluster,
        base.latency,
        slos_from_scale(base.cluster, base.latency, base.models, 5.0, "L4"),
    )
    s = build_setup("hc2-l", base.models, plan=plan)
    tr = build_trace(s, "poisson", plan.rates_at(0.9), 10.0, 1)
    res = {sc: simulate(s, sc, tr, None, SimConfig(seed=1)) for sc in ("reservation", "reactive")}
    att = {sc: summarize(r)["attainment"] for sc, r in res.items()}
    assert att["reservation"] >= 0.99
    assert att["reactive"] < att["reservation"] - 0.05
    # the reactive losses happen after the first pool: its work on them was wasted
    r = res["reactive"]
    bad = r.outcome != OK
    assert bad.sum() and (bad & ~np.isnan(r.dispatch_s)).sum() >= 0.9 * bad.sum()


def test_a_head_that_misses_on_the_chosen_pipeline_goes_to_an_idle_one():
    """Inception-v3 on hc1-l gets two pipelines: batch 1 over L4 slices and P4s (4.5 ms),
    and batch 7 on a whole L4 (SLO 8.2 ms). Requests that waited for a batch of 7 can no
    longer make it through the slow pipeline; Algorithm 1 as printed drops them when that
    pipeline is picked (ties on waiting time), though the L4 could still serve them at a
    smaller batch. At load factor 0.7 nothing needs to be dropped."""

    # the plan PPipe's MILP makes for these models at SLO scale 5 (HiGHS 1.15.1), written
    # out: other optimal plans exist, and which one a solver returns is its choice
    def pipe(batch: int, rps: float, *stages: tuple) -> Pipeline:
        st_ = tuple(Stage(b, g, sh, n, lat, tx) for b, g, sh, n, lat, tx in stages)
        return Pipeline(st_, batch, sum(x.latency_s + x.transfer_s for x in st_), rps)

    plan = Plan({
        "inception-v3": ModelPlan(0.0082050, 1.0, (
            pipe(1, 1689.55, ((0, 5), "L4", 3, 3, 0.0016878, 0.0005919),
                 ((5, 10), "P4", 1, 4, 0.0022638, 0.0)),
            pipe(7, 1533.70, ((0, 10), "L4", 1, 1, 0.0045641, 0.0)),
        )),
        "fcn-resnet101": ModelPlan(0.0918516, 1.0, (
            pipe(1, 1896.16, ((0, 3), "P4", 1, 62, 0.0321376, 0.0111848),
                 ((3, 10), "L4", 1, 22, 0.0116024, 0.0)),
        )),
        "resnet18": ModelPlan(0.0027258, 1.0, (
            pipe(1, 2944.70, ((0, 6), "L4", 4, 4, 0.0006696, 0.0001338),
                 ((6, 10), "P4", 1, 2, 0.0006792, 0.0)),
        )),
    })  # fmt: skip
    models = list(plan.models)
    s = build_setup("hc1-l", models, plan=plan)
    tr = build_trace(s, "poisson", plan.rates_at(0.7), 1.0, 0)
    m = summarize(simulate(s, "reservation", tr, None, SimConfig(seed=0)))
    assert m["per_model"]["inception-v3"]["attainment"] >= 0.995


def test_reactive_rebatches_at_every_pool():
    """Two P4s feed one L4: each P4 takes what is there at once; requests parked on
    different P4s while the L4 was busy ride one L4 batch; a parked request that can no
    longer make its deadline is dropped at the L4 pool."""
    from hetserve.scheduling.protocol import RouteStep, StageReport

    base = build_setup("hc1-s", ["resnet50"])
    st_ = (Stage((0, 5), "P4", 1, 2), Stage((5, 10), "L4", 1, 1))
    plan = Plan({"resnet50": ModelPlan(1.0, 1.0, (Pipeline(st_, 4, 0.0, 100.0),))})
    placement = bind(plan, base.cluster)
    view = ClusterView.build(base.cluster, base.latency, placement)
    p4a, p4b = placement.stages[("resnet50", 0, 0)]
    (l4,) = placement.stages[("resnet50", 0, 1)]
    sched = make_scheduler("reactive")
    sched.start(view, plan, 0.0)
    req = [Request(i, "resnet50", "s", 0.0, 1.0) for i in range(3)]
    (d1,) = sched.on_arrival(req[0], 0.0)
    (d2,) = sched.on_arrival(req[1], 0.0)
    assert [d.route for d in (d1, d2)] == [
        (RouteStep(0, p4a, 0.0, (0, 5)),),
        (RouteStep(0, p4b, 0.0, (0, 5)),),
    ]
    assert sched.on_arrival(req[2], 0.001) == []  # both P4s busy

    def parked(d, w, t):
        return StageReport(
            "stage", d.batch_id, "resnet50", 0, w, 0.0, t, d.requests, True, True, "parked"
        )

    d3, d4 = sched.on_stage_done(parked(d1, p4a, 0.003), 0.003)
    assert d3.requests == (req[0],) and d3.route == (RouteStep(1, l4, 0.003, (5, 10)),)
    assert d4.requests == (req[2],) and d4.route[0].worker == p4a  # the freed P4 goes on
    assert sched.on_stage_done(parked(d2, p4b, 0.004), 0.004) == []  # the L4 is busy
    assert sched.on_stage_done(parked(d4, p4a, 0.006), 0.006) == []
    done = StageReport(
        "stage", d3.batch_id, "resnet50", 1, l4, 0.003, 0.008, d3.requests, True, True
    )
    (d5,) = sched.on_stage_done(done, 0.008)
    assert d5.requests == (req[1], req[2])  # parked on two different P4s, one batch now
    # a parked request that cannot make its deadline any more is dropped at the L4 pool
    late = Request(3, "resnet50", "s", 0.0, 0.0125)
    (d6,) = sched.on_arrival(late, 0.009)
    assert d6.route[0].worker == p4a
    assert sched.on_stage_done(parked(d6, p4a, 0.012), 0.012) == []  # the L4 is still busy
    done5 = StageReport(
        "stage", d5.batch_id, "resnet50", 1, l4, 0.008, 0.0121, d5.requests, True, True
    )
    assert sched.on_stage_done(done5, 0.0121) == [Drop((late,), "deadline", ANY)]
    # requests parked on a lost worker are dropped with that reason
    r5, r6 = (Request(i, "resnet50", "s", 0.02, 1.0) for i in (5, 6))
    (d7,), (d8,) = sched.on_arrival(r5, 0.02), sched.on_arrival(r6, 0.02)
    (d9,) = sched.on_stage_done(parked(d7, d7.route[0].worker, 0.023), 0.023)
    assert d9.route[0].worker == l4
    assert sched.on_stage_done(parked(d8, d8.route[0].worker, 0.024), 0.024) == []
    assert sched.on_worker_lost(d8.route[0].worker, 0.025) == [Drop((r6,), "worker_lost", ANY)]
