"""MagicBatch's first slice: the batch choice (Eqs. 2-4 and the keep-up check), the exact
assignment against brute force, and the paper's FCFS and Greedy."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.core.errors import HetserveError
from hetserve.core.gpus import DEFAULT_CATALOG
from hetserve.core.latency import LinearModel, LinearParams
from hetserve.planning.magicbatch import (
    EdgeStream,
    Option,
    assign,
    batch_choice,
    stream_options,
)

V100 = DEFAULT_CATALOG.get("V100")
LAT = LinearModel({("m", "V100"): LinearParams(0.005, 0.020)})


def test_the_largest_batch_that_meets_the_deadline_and_keeps_up():
    # exec(B) = 5 ms x B + 20 ms. At 100 req/s, D = 150 ms: (B-1)/100 + exec(B) <= 0.15
    # gives B <= 9.33; keeping up, exec(B) <= B / 100, needs B >= 4: B = 9
    o = batch_choice(LAT, EdgeStream("s", "m", 100.0, 0.150), V100)
    assert o.batch == 9
    assert o.latency_s == pytest.approx(0.08 + 0.065)
    # by hand: exec = 65 ms, busy 45 of it (u = 45/65), V100 power 40 + 260 (0.3 + 0.7 u)
    # = 244 W, so a request costs 0.065 x 244 / 9 J
    assert o.energy_j == pytest.approx(0.065 * 244.0 / 9)
    # at 10 req/s the wait dominates: B = 2 (0.1 s + 30 ms); B = 3 would wait 0.2 s
    assert batch_choice(LAT, EdgeStream("s", "m", 10.0, 0.150), V100).batch == 2


def test_energy_per_request_falls_with_the_batch():
    e = [LAT.energy("m", V100, 1, b) / b for b in range(1, 20)]
    assert all(a > b for a, b in itertools.pairwise(e))


def test_infeasible_options_say_why():
    late = batch_choice(LAT, EdgeStream("s", "m", 100.0, 0.010), V100)
    assert not late.feasible and "misses the deadline" in late.why
    # 1,000 req/s: every batch runs longer than its arrivals take
    fast = batch_choice(LAT, EdgeStream("s", "m", 1000.0, 1.0), V100)
    assert not fast.feasible and "longer than" in fast.why
    with pytest.raises(HetserveError, match="rate must be > 0"):
        EdgeStream("s", "m", 0.0, 1.0)
    with pytest.raises(HetserveError, match="unknown model"):
        batch_choice(LAT, EdgeStream("s", "nosuch", 10.0, 1.0), V100)


def _table(energies):
    """Streams s0.. with rate 1 and the given energy per request on GPU types A, B."""
    streams = [EdgeStream(f"s{i}", "m", 1.0, 1.0) for i in range(len(energies))]
    opts = {
        f"s{i}": {t: (Option(t, 1, 0.1, 0.1, e) if e is not None else Option(t, why="no"))
                  for t, e in zip("AB", row, strict=True)}
        for i, row in enumerate(energies)
    }  # fmt: skip
    return streams, opts


def test_greedy_is_not_optimal_the_paper_s_example():
    """Section 5.2: task 1 costs 100 J on GPU 1 and 110 J on GPU 2, task 2 50 J and 200 J;
    Greedy puts task 1 on GPU 1 and pays 300 J, the optimum 160 J."""
    streams, opts = _table([(100.0, 110.0), (50.0, 200.0)])
    counts = {"A": 1, "B": 1}
    greedy = assign("greedy", streams, counts, opts)
    exact = assign("exact", streams, counts, opts)
    assert greedy.power_w(streams) == 300.0 and exact.power_w(streams) == 160.0
    assert exact.gpu_of == {"s0": "B#0", "s1": "A#0"}


def test_fcfs_takes_the_least_advanced_idle_gpu_first():
    streams, opts = _table([(100.0, 110.0), (50.0, 200.0), (10.0, None)])
    a = assign("fcfs", streams, {"A": 1, "B": 2}, opts, order=["B", "A"])
    assert a.gpu_of == {"s0": "B#0", "s1": "B#1", "s2": "A#0"}


def test_streams_that_fit_nowhere_are_rejected_with_a_reason():
    streams, opts = _table([(None, None), (5.0, 7.0), (6.0, None)])
    a = assign("exact", streams, {"A": 1, "B": 1}, opts)
    assert a.gpu_of == {"s1": "B#0", "s2": "A#0"}
    assert "s0" in a.rejected and "A: no" in a.rejected["s0"]
    more = assign("exact", *_table([(1.0, 2.0)] * 3)[:1], {"A": 1, "B": 1},
                  _table([(1.0, 2.0)] * 3)[1])  # fmt: skip
    assert len(more.gpu_of) == 2 and "no GPU left" in next(iter(more.rejected.values()))


energy = st.one_of(st.none(), st.integers(1, 50).map(float))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(energy, energy), min_size=1, max_size=5),
    st.integers(0, 3),
    st.integers(0, 3),
    st.lists(st.integers(1, 5), min_size=5, max_size=5),
)
def test_exact_equals_brute_force_and_beats_the_baselines(rows, n_a, n_b, rates):
    streams, opts = _table(rows)
    streams = [EdgeStream(s.name, "m", float(r), 1.0) for s, r in zip(streams, rates, strict=False)]
    counts = {"A": n_a, "B": n_b}
    placed, power = _brute_one_per_gpu(rows, rates, counts)
    ex = assign("exact", streams, counts, opts)
    assert len(ex.gpu_of) == placed
    assert _power(ex, rows, rates) == pytest.approx(power)
    for method in ("fcfs", "greedy"):
        other = assign(method, streams, counts, opts)
        assert len(other.gpu_of) <= placed
        if len(other.gpu_of) == placed:
            assert _power(other, rows, rates) >= power - 1e-9
    assert len(ex.gpu_of) + len(ex.rejected) == len(streams)


def _power(a, rows, rates):
    """Eq. 5 per second, written out: energy per request on the stream's GPU type x rate."""
    return sum(rows[int(s[1:])]["AB".index(g[0])] * rates[int(s[1:])] for s, g in a.gpu_of.items())


def _brute_one_per_gpu(rows, rates, counts):
    """(streams placed, J/s) of the best one-stream-per-GPU assignment, by trying every
    choice of a GPU type or none per stream (GPUs of a type are interchangeable), written
    from the table alone: more streams first, then less energy."""
    best = (0, 0.0)
    for pick in itertools.product((None, 0, 1), repeat=len(rows)):
        if any(p is not None and rows[i][p] is None for i, p in enumerate(pick)):
            continue  # infeasible there
        if pick.count(0) > counts["A"] or pick.count(1) > counts["B"]:
            continue
        n = sum(p is not None for p in pick)
        j = sum(rows[i][p] * rates[i] for i, p in enumerate(pick) if p is not None)
        if n > best[0] or (n == best[0] and j < best[1]):
            best = (n, j)
    return best


def test_exact_weighs_energy_by_rate():
    """Rates 2 and 1: s0 costs 100 J on A and 110 J on B, s1 50 J and 200 J. Greedy takes
    A for s0 (2 x 100 + 1 x 200 = 400 J/s); the optimum puts s0 on B and s1 on A
    (2 x 110 + 1 x 50 = 270 J/s)."""
    streams, opts = _table([(100.0, 110.0), (50.0, 200.0)])
    streams = [EdgeStream(s.name, "m", r, 1.0) for s, r in zip(streams, (2.0, 1.0), strict=True)]
    greedy = assign("greedy", streams, {"A": 1, "B": 1}, opts)
    exact = assign("exact", streams, {"A": 1, "B": 1}, opts)
    assert greedy.power_w(streams) == 400.0 and exact.power_w(streams) == 270.0
    assert exact.gpu_of == {"s0": "B#0", "s1": "A#0"}


@pytest.mark.parametrize(
    ("reply", "needle"),
    [
        (("time_limit", 0.0, "x"), "without an optimum (time_limit)"),
        (("optimal", 0.0, "half"), "not integral (a value 0.5"),
    ],
)
def test_exact_checks_the_lps_status_and_integrality(monkeypatch, reply, needle):
    """A status other than optimal, or a fractional value, is an error, never rounded."""
    import numpy as np

    import hetserve.planning.milp as milp

    streams, opts = _table([(1.0, 2.0), (3.0, 1.0)])

    def fake(a, *args, **kw):
        n = a.shape[1]
        x = np.full(n, 0.5) if reply[2] == "half" else np.eye(1, n).ravel()
        return reply[0], reply[1], x

    monkeypatch.setattr(milp, "solve_highs", fake)
    with pytest.raises(HetserveError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        assign("exact", streams, {"A": 1, "B": 1}, opts)


def test_options_over_real_models_and_gpus():
    from hetserve.core.latency import RooflineModel

    rm = RooflineModel()
    gpus = [DEFAULT_CATALOG.get(n) for n in ("GTX-1080-Ti", "RTX-2080-Ti", "RTX-3090")]
    streams = [EdgeStream("a", "resnet101", 50.0, 0.2), EdgeStream("b", "densenet121", 200.0, 0.1)]
    opts = stream_options(rm, streams, gpus, max_batch=64)
    for s in streams:
        for g, o in opts[s.name].items():
            assert o.feasible, (s.name, g, o.why)
            assert o.latency_s <= s.deadline_s and o.exec_s <= o.batch / s.rate_rps
    a = assign("exact", streams, {g.name: 1 for g in gpus}, opts)
    assert set(a.gpu_of) == {"a", "b"}


def test_pso_ga_is_seeded_feasible_and_never_below_the_optimum():
    import numpy as np

    from hetserve.planning.magicbatch import PsoGaParams, pso_ga

    streams, opts = _table([(100.0, 110.0), (50.0, 200.0)])
    assert assign("pso-ga", streams, {"A": 1, "B": 1}, opts).power_w(streams) == 160.0
    rng = np.random.default_rng(4)
    rows = [(float(rng.integers(1, 60)), float(rng.integers(1, 60))) for _ in range(12)]
    streams, opts = _table(rows)
    counts = {"A": 6, "B": 8}
    ex = assign("exact", streams, counts, opts)
    runs = [pso_ga(streams, counts, opts, PsoGaParams(seed=s)) for s in (1, 1, 2)]
    assert runs[0] == runs[1]  # the same seed, the same answer
    for a in runs:
        assert len(a.gpu_of) == 12 and a.power_w(streams) >= ex.power_w(streams) - 1e-9
        used = [g.split("#")[0] for g in a.gpu_of.values()]
        assert used.count("A") <= 6 and used.count("B") <= 8
        assert len(set(a.gpu_of.values())) == 12  # one stream per GPU


def test_pso_ga_rejects_when_types_run_out():
    from hetserve.planning.magicbatch import PsoGaParams, pso_ga

    streams, opts = _table([(1.0, None)] * 3)  # all need type A, which has one GPU
    a = pso_ga(streams, {"A": 1, "B": 2}, opts, PsoGaParams(iterations=5))
    assert len(a.gpu_of) == 1 and len(a.rejected) == 2


def _shared_table(rows, exec_s=0.02, deadline_s=0.1):
    """Streams with rate 10/s, batch 1, the given energy per request on types A and B."""
    streams = [EdgeStream(f"s{i}", "m", 10.0, deadline_s) for i in range(len(rows))]
    opts = {
        f"s{i}": {t: (Option(t, 1, exec_s, exec_s, e) if e is not None else Option(t, why="no"))
                  for t, e in zip("AB", row, strict=True)}
        for i, row in enumerate(rows)
    }  # fmt: skip
    gpus = {"A": DEFAULT_CATALOG.get("P4"), "B": DEFAULT_CATALOG.get("V100")}
    return streams, opts, gpus


def _brute_shared(streams, counts, opts, gpus, park):
    """Every mapping of streams to GPU instances (or rejection) that keeps utilisation
    <= 1 and every deadline with the others' batches ahead: (placed, power)."""
    import itertools

    from hetserve.planning.magicbatch import Assignment, gpu_instances, total_power_w

    inst = gpu_instances(counts)
    best = (0, float("inf"))
    for pick in itertools.product([None, *inst], repeat=len(streams)):
        gpu_of, opt_of, ok = {}, {}, True
        for s, g in zip(streams, pick, strict=True):
            if g is None:
                continue
            o = opts[s.name][g.split("#")[0]]
            if not o.feasible:
                ok = False
                break
            gpu_of[s.name], opt_of[s.name] = g, o
        if not ok:
            continue
        for g in set(gpu_of.values()):
            on = [s for s in streams if gpu_of.get(s.name) == g]
            if (
                sum(opt_of[s.name].exec_s * s.rate_rps / opt_of[s.name].batch for s in on)
                > 1 + 1e-12
            ):
                ok = False
            for s in on:
                ahead = sum(opt_of[k.name].exec_s for k in on if k is not s)
                if opt_of[s.name].latency_s + ahead > s.deadline_s + 1e-12:
                    ok = False
        if not ok:
            continue
        a = Assignment("x", gpu_of, opt_of)
        p = total_power_w(a, streams, gpus, counts, park)
        if len(gpu_of) > best[0] or (len(gpu_of) == best[0] and p < best[1] - 1e-9):
            best = (len(gpu_of), p)
    return best


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(energy, energy), min_size=1, max_size=4),
    st.integers(0, 2),
    st.integers(0, 2),
    st.booleans(),
    st.sampled_from([0.03, 0.06, 0.1]),
)
def test_shared_is_optimal_and_never_above_exact(rows, n_a, n_b, park, deadline):
    from hetserve.planning.magicbatch import shared, total_power_w

    streams, opts, gpus = _shared_table(rows, deadline_s=deadline)
    counts = {"A": n_a, "B": n_b}
    sh = shared(streams, counts, opts, gpus, park_idle=park)
    assert sh.solve.get("status", "optimal") == "optimal"  # no solve when nothing fits
    placed, power = _brute_shared(streams, counts, opts, gpus, park)
    assert len(sh.gpu_of) == placed
    assert total_power_w(sh, streams, gpus, counts, park) == pytest.approx(power, abs=1e-6)
    ex = assign("exact", streams, counts, opts)
    if len(ex.gpu_of) == placed:
        assert total_power_w(sh, streams, gpus, counts, park) <= (
            total_power_w(ex, streams, gpus, counts, park) + 1e-6
        )
    assert len(sh.gpu_of) >= len(ex.gpu_of)


def test_shared_packs_streams_onto_fewer_gpus():
    from hetserve.planning.magicbatch import shared, total_power_w

    streams, opts, gpus = _shared_table([(5.0, 6.0)] * 4)  # 20 ms each at 10/s: 20% busy
    counts = {"A": 4, "B": 0}
    sh = shared(streams, counts, opts, gpus, park_idle=True)
    assert len(set(sh.gpu_of.values())) == 1  # all four on one GPU (80% busy, 80 ms late)
    ex = assign("exact", streams, counts, opts)
    assert total_power_w(sh, streams, gpus, counts, True) < total_power_w(
        ex, streams, gpus, counts, True
    )


def test_a_node_limited_shared_solve_says_so():
    """The MagicBatch study's 15 streams on 10 GPUs of each type: one branch-and-bound node
    does not prove the optimum, and the plan says so (status and gap in its meta)."""
    from hetserve.core.latency import RooflineModel
    from hetserve.experiments.magicbatch.study import MagicBatchConfig, edge_cluster
    from hetserve.planning.magicbatch import plan_streams, random_streams

    cfg = MagicBatchConfig()
    cluster = edge_cluster(10)
    gpus = {g.name: g for g in cluster.gpu_types()}
    streams = random_streams(15, cfg.models, 15)
    plan, a, _ = plan_streams("shared", streams, cluster.gpu_counts(), gpus,
                              RooflineModel(catalog=cluster.catalog), park_idle=True,
                              shared_limits={"time_limit_s": 600.0, "max_nodes": 1})  # fmt: skip
    assert a.solve["status"] == "node_limit" and a.solve["gap"] > 0
    assert plan.meta["solve"]["status"] == "node_limit"
