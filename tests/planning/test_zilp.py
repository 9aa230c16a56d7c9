"""Shepherd's offline optimum (Eq. 3) against brute force, and FLEX against it."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.core.errors import HetserveError
from hetserve.experiments.shepherd.scenarios import COMPETITIVE_RATIO, flex_vs_offline
from hetserve.planning.zilp import OfflineRequest, offline_optimum


def brute_force(reqs, lat, n_gpus, max_batch):
    """Every schedule in start order, each batch as early as it can go: on the GPU that
    frees first (all GPUs free by then are alike for batches that start later)."""
    best = 0

    def rec(remaining, free, t_min, served):
        nonlocal best
        best = max(best, served)
        for model in {r.model for r in remaining}:
            mine = [r for r in remaining if r.model == model]
            for k in range(1, min(max_batch, len(mine)) + 1):
                for batch in itertools.combinations(mine, k):
                    s = max(max(r.arrival_ms for r in batch), free[0], t_min)
                    if s + lat(model, k) <= min(r.deadline_ms for r in batch):
                        rest = remaining - set(batch)
                        rec(rest, tuple(sorted((*free[1:], s + lat(model, k)))), s, served + k)

    rec(frozenset(reqs), (0,) * n_gpus, 0, 0)
    return best


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from("ab"), st.integers(0, 12), st.integers(3, 14)),
        min_size=1,
        max_size=6,
    ),
    st.integers(1, 2),
    st.integers(1, 2),
    st.integers(1, 4),
    st.integers(1, 4),
)
def test_offline_optimum_matches_brute_force(rows, n_gpus, alpha, beta, max_batch):
    reqs = [OfflineRequest(i, m, a, a + s) for i, (m, a, s) in enumerate(rows)]

    def lat(m, b):
        return alpha * b + beta + (1 if m == "b" else 0)

    opt = offline_optimum(reqs, lat, n_gpus, max_batch)
    assert opt.status == "optimal"
    assert opt.served == brute_force(reqs, lat, n_gpus, max_batch)
    # the schedule it returns is feasible
    ids = [i for _, b in opt.batches for i in b]
    assert len(ids) == len(set(ids)) == opt.served
    by_id = {r.id: r for r in reqs}
    ends = []
    for t, b in opt.batches:
        rs = [by_id[i] for i in b]
        assert len({r.model for r in rs}) == 1 and len(rs) <= max_batch
        end = t + lat(rs[0].model, len(rs))
        assert t >= max(r.arrival_ms for r in rs) and end <= min(r.deadline_ms for r in rs)
        ends.append((t, end))
    for t in range(max((e for _, e in ends), default=0)):
        assert sum(s <= t < e for s, e in ends) <= n_gpus


def test_offline_optimum_limits():
    with pytest.raises(HetserveError, match="at most 16"):
        offline_optimum([OfflineRequest(i, "a", 0, 9) for i in range(17)], lambda m, b: 1)
    assert offline_optimum([OfflineRequest(0, "a", 0, 2)], lambda m, b: 3).served == 0


@pytest.mark.parametrize("scheduler", ["flex", "flex-np", "clockwork"])
def test_online_schedulers_against_the_offline_optimum(scheduler):
    """Completed batches of any online schedule form a feasible offline schedule, so none
    beats the optimum; FLEX stays within Shepherd's competitive ratio (Theorem 5.2, K = 1:
    one alpha/beta), and on these small instances far closer to it."""
    rows = flex_vs_offline(25, seed=3, scheduler=scheduler, max_requests=10)
    for r in rows:
        assert r["served"] <= r["optimum"]
        if scheduler == "flex":
            assert r["optimum"] <= COMPETITIVE_RATIO * r["served"]
    total = sum(r["served"] for r in rows) / sum(r["optimum"] for r in rows)
    assert total >= 0.85
