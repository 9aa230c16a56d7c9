"""A worker's per-stage overhead (an engine's call path, measured by the Ray executor at
start-up) is part of every stage time a scheduler or admission reads from the view, and of
nothing else: the blocks' latency model and the simulator are untouched."""

import pytest

from hetserve.scheduling import ClusterView
from hetserve.scheduling.admission import Admission
from tests.helpers import linear_setup


def test_stage_times_carry_each_workers_overhead():
    s = linear_setup(n_gpus=2, alpha_s=0.010, beta_s=0.002, max_batch=4)
    view = ClusterView.build(s.cluster, s.latency, s.placement)
    w0, w1 = sorted(view.workers)
    before = [view.stage_latency_s("m", w0, b) for b in (1, 2, 4)]
    assert before == pytest.approx([0.012, 0.022, 0.042])
    view.stage_overhead_s[w0] = 0.005
    assert [view.stage_latency_s("m", w0, b) for b in (1, 2, 4)] == pytest.approx(
        [0.017, 0.027, 0.047]
    )
    assert view.latency_table("m", w0, 2) == pytest.approx([0.017, 0.027])
    assert view.stage_latency_s("m", w1, 1) == pytest.approx(0.012)  # only that worker
    # the blocks' own latency model is unchanged (the simulator and emulation use it)
    w = view.workers[w0]
    assert s.latency.latency("m", w.gpu, w.share, 1, None) == pytest.approx(0.012)


def test_admission_sees_the_overhead():
    s = linear_setup(n_gpus=1, alpha_s=0.010, beta_s=0.0, max_batch=4)
    view = ClusterView.build(s.cluster, s.latency, s.placement)
    plain = Admission(view, s.plan, 4).best_finish_s("m", 0)
    (w,) = view.workers
    view2 = ClusterView.build(s.cluster, s.latency, s.placement)
    view2.stage_overhead_s[w] = 0.004
    assert Admission(view2, s.plan, 4).best_finish_s("m", 0) == pytest.approx(plain + 0.004)


def test_a_latency_table_is_each_stage_time_and_a_list_of_its_own():
    """The view keeps a table's blocks' part per GPU type and share: what it gives is still
    ``stage_latency_s`` at each batch size, exactly, overhead included, and the caller's
    to change."""
    s = linear_setup(n_gpus=2, alpha_s=0.010, beta_s=0.002, max_batch=4)
    view = ClusterView.build(s.cluster, s.latency, s.placement)
    w0, w1 = sorted(view.workers)
    t = view.latency_table("m", w0, 4)
    assert t == [view.stage_latency_s("m", w0, b) for b in range(1, 5)]
    t[0] = -1.0
    assert view.latency_table("m", w1, 4) == [view.stage_latency_s("m", w1, b) for b in range(1, 5)]
    view.stage_overhead_s[w1] = 0.003
    assert view.latency_table("m", w1, 4) == [view.stage_latency_s("m", w1, b) for b in range(1, 5)]
    assert view.latency_table("m", w0, 4) == [view.stage_latency_s("m", w0, b) for b in range(1, 5)]


def test_the_tables_of_many_workers_are_each_ones_table():
    """``latency_tables`` (one look-up per run of workers of one GPU type and share) gives
    each worker's ``latency_table``, in the order asked, overheads included: workers of
    two GPU types interleaved, with and without overheads. Without, the workers of one
    GPU type and share share one list; with, each has a list of its own."""
    from hetserve.engine.setup import build_setup

    s = build_setup("hc1-l", ["resnet50"])
    view = ClusterView.build(s.cluster, s.latency, s.placement)
    ws = sorted(view.workers, key=lambda w: (view.workers[w].gpu.name, w))
    ws = [w for pair in zip(ws, reversed(ws), strict=True) for w in pair]  # interleaved
    assert len({view.workers[w].gpu.name for w in ws}) > 1
    for overhead in (False, True):
        if overhead:
            view.stage_overhead_s.update({w: 0.001 * k for k, w in enumerate(ws[::3])})
        tables = view.latency_tables("resnet50", ws, 8, (0, 3))
        assert tables == [view.latency_table("resnet50", w, 8, (0, 3)) for w in ws]
        kinds = {(view.workers[w].gpu.name, view.workers[w].share) for w in ws}
        assert len({id(t) for t in tables}) == (len(ws) if overhead else len(kinds))
