"""``Pools``: the models each worker serves first (in plan order, whatever pools the
plan's stages share), one tuple for equal lists of workers; and the schedulers' starts
that read per-worker latencies by GPU type and share."""

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.core.placement import bind
from hetserve.engine.setup import build_setup
from hetserve.scheduling import ClusterView, make_scheduler
from hetserve.scheduling.pools import Pools

WORKERS = [f"w{i}" for i in range(6)]


def _stage(blocks, workers):
    return SimpleNamespace(blocks=blocks, workers=workers)


@st.composite
def plans(draw):
    """A plan of up to 5 models, each of 1-2 pipelines of 1-2 stages on lists of workers
    drawn from a few (so that pools repeat, overlap and share workers), as ``Pools``
    reads it: the plan's models and a placement's stages."""
    pools = draw(
        st.lists(
            st.lists(st.sampled_from(WORKERS), min_size=1, max_size=4, unique=True),
            min_size=1,
            max_size=4,
        )
    )
    models, stages = {}, {}
    for mi in range(draw(st.integers(1, 5))):
        name = f"m{mi}"
        pipes = []
        for pi in range(draw(st.integers(1, 2))):
            n = draw(st.integers(1, 2))
            pipes.append(
                SimpleNamespace(batch=4, stages=[_stage((s, s + 1), None) for s in range(n)])
            )
            for si in range(n):
                # (a new list each time: equal lists are not the same object)
                stages[(name, pi, si)] = list(draw(st.sampled_from(pools)))
        models[name] = SimpleNamespace(pipelines=pipes)
    plan = SimpleNamespace(models=models)
    view = SimpleNamespace(placement=SimpleNamespace(stages=stages), workers=dict.fromkeys(WORKERS))
    return plan, view


@settings(max_examples=200, deadline=None)
@given(plans())
def test_whole_model_workers_are_a_models_workers_once_each_in_plan_order(pv):
    """A model of single-stage pipelines: its pipelines' workers in plan order, each once
    (the plain rule, written out here), a new list each call; one of more stages: an
    error."""
    from hetserve.core.errors import HetserveError

    plan, view = pv
    pools = Pools(view, plan)
    for name, m in plan.models.items():
        if any(len(p.stages) != 1 for p in m.pipelines):
            with pytest.raises(HetserveError, match="whole models"):
                pools.whole_model_workers(name)
            continue
        want: list[str] = []
        for pi in range(len(m.pipelines)):
            for w in view.placement.stages[(name, pi, 0)]:
                if w not in want:
                    want.append(w)
        got = pools.whole_model_workers(name)
        assert got == want
        got.append("changed by the caller")
        assert pools.whole_model_workers(name) == want


@settings(max_examples=200, deadline=None)
@given(plans())
def test_models_of_lists_each_workers_first_stage_models_in_plan_order(pv):
    plan, view = pv
    pools = Pools(view, plan)
    # the rule, the plain way: models in plan order, each worker as first met
    want: dict[str, list[str]] = {}
    for name, m in plan.models.items():
        for pi in range(len(m.pipelines)):
            for w in view.placement.stages[(name, pi, 0)]:
                got = want.setdefault(w, [])
                if name not in got:
                    got.append(name)
    assert pools.models_of == want
    assert list(pools.models_of) == list(want)  # the workers' order too
    # equal lists of workers: one tuple
    seen: dict[tuple[str, ...], tuple[str, ...]] = {}
    for pipes in pools.pipelines.values():
        for p in pipes:
            for _, ws in p.stages:
                assert seen.setdefault(ws, ws) is ws


def test_a_shared_pool_plan_binds_one_tuple_per_gpu_type():
    s = build_setup("hc1-l", ["resnet50", "efficientnet-b0"])
    assert s.plan.shared_pools
    placed = bind(s.plan, s.cluster)
    by_content: dict[tuple[str, ...], tuple[str, ...]] = {}
    for ws in placed.stages.values():
        assert by_content.setdefault(ws, ws) is ws
    assert len(by_content) > 1


def test_the_least_latency_is_each_workers_least_table_entry():
    """``least_latency_s`` plus a worker's overhead is the least entry of its
    ``latency_table``, exactly; ``by_kind`` groups workers by GPU type and share in
    their order."""
    s = build_setup("hc1-l", ["resnet50"])
    view = ClusterView.build(s.cluster, s.latency, s.placement)
    ws = sorted(view.workers, reverse=True)
    kinds = view.by_kind(ws)
    assert [w for g in kinds.values() for w in g] == sorted(ws, key=lambda w: list(kinds).index(
        (view.workers[w].gpu.name, view.workers[w].share)))  # fmt: skip
    for key, group in kinds.items():
        assert all((view.workers[w].gpu.name, view.workers[w].share) == key for w in group)
        assert group == [w for w in ws if w in group]
    view.stage_overhead_s.update({w: 0.0007 * k for k, w in enumerate(ws[::2])})
    for blocks in (None, (0, 3), (2, 5)):
        for w in ws:
            least = view.least_latency_s("resnet50", w, 8, blocks)
            o = view.stage_overhead_s.get(w, 0.0)
            assert least + o == min(view.latency_table("resnet50", w, 8, blocks))


@pytest.mark.parametrize("overhead", [False, True])
def test_reservation_gaps_are_each_workers_shortest_stage(overhead):
    """``reservation`` marks gaps shorter than a worker's shortest stage as taken: the
    least entry of the latency tables of all the stages it serves (read per GPU type
    and share, plus the worker's overhead)."""
    s = build_setup("hc1-l", ["resnet50", "efficientnet-b0", "vit-b16"])
    view = ClusterView.build(s.cluster, s.latency, s.placement)
    if overhead:
        view.stage_overhead_s.update(
            {w: 0.0003 * k for k, w in enumerate(sorted(view.workers)[::3])}
        )
    sched = make_scheduler("reservation")
    sched.start(view, s.plan, 0.0)
    inner = sched.inner
    want: dict[str, float] = {}
    for pipes in inner.pools.pipelines.values():
        for p in pipes:
            for blocks, workers in p.stages:
                for w in workers:
                    t = min(view.latency_table(p.model, w, inner._bs(p), blocks))
                    want[w] = min(want.get(w, float("inf")), t)
    got = {w: inner.table.core.min_gap[inner.table.ids[w]] for w in want}
    assert got == want


def test_flex_reads_each_workers_table_with_its_own_overhead():
    s = build_setup("hc1-l", ["resnet50", "efficientnet-b0"])
    view = ClusterView.build(s.cluster, s.latency, s.placement)
    ws = sorted(view.workers)
    view.stage_overhead_s.update({w: 0.0004 * (k + 1) for k, w in enumerate(ws[::2])})
    sched = make_scheduler("flex")
    sched.start(view, s.plan, 0.0)
    inner = sched.inner
    checked = 0
    for wid, w in inner.workers.items():
        for m, lat in w.lat.items():
            base = view.latency_table(m, wid, inner.max_batch)
            assert lat == [float(t + inner.overhead_s * (b + 1)) for b, t in enumerate(base)]
            checked += 1
    assert checked >= len(ws)
    # the hot paths read a worker's table by its kind from the model's queue: the very
    # same list, for every worker of every queue (workers with other overheads: other kinds)
    kinds = set()
    for q in inner.models.values():
        for w in q.workers:
            assert q.lat_of[w.kind] is w.lat[q.name]
            kinds.add(w.kind)
    infos = view.workers
    assert len(kinds) == len({(infos[w].gpu.name, infos[w].share, view.stage_overhead_s.get(w, 0.0))
                              for w in ws})  # fmt: skip
