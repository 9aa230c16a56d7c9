"""The reconciler against brute force on block masks, and on two real plans."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.control.reconcile import KINDS, block_mask, mask_ranges, needs, reconcile
from hetserve.core.placement import bind
from tests.control.scenario import setup_for


@given(st.integers(0, 2**16 - 1))
def test_mask_ranges_cover_the_mask_exactly(mask):  # type: ignore[no-untyped-def]
    ranges = mask_ranges(mask)
    bits = {k for a, b in ranges for k in range(a, b)}
    assert bits == {k for k in range(17) if mask >> k & 1}
    # contiguous and separated: no two ranges touch
    assert all(b < c for (_, b), (c, _) in itertools.pairwise(ranges))
    back = 0
    for r in ranges:
        back |= block_mask(r)
    assert back == mask


@settings(deadline=None)  # (the first example plans both mixes)
@given(st.integers(1, 6))
def test_two_plans_steps(max_parallel):  # type: ignore[no-untyped-def]
    a, b = setup_for(0.8), setup_for(0.2)
    pa, pb = (a.plan, a.placement), (b.plan, bind(b.plan, b.cluster))
    steps = reconcile(pa, pb, max_parallel)
    old, new = needs(*pa), needs(*pb)
    for c in steps.changes:
        assert c.kind in KINDS
        o, n = old.get(c.worker), new.get(c.worker)
        loaded = {m: 0 for m, _ in c.load}
        for m, r in c.load:
            loaded[m] |= block_mask(r)
        evicted = {m: 0 for m, _ in c.evict}
        for m, r in c.evict:
            evicted[m] |= block_mask(r)
        # what is loaded is what the target needs and the worker lacks; evicted the reverse
        for m in set(n or {}) | set(o or {}):
            need_new, need_old = (n or {}).get(m, 0), (o or {}).get(m, 0)
            assert loaded.get(m, 0) == need_new & ~need_old
            assert evicted.get(m, 0) == need_old & ~need_new
        assert (c.kind == "keep") == (o is not None and o == n)
    assert all(len(w) <= max_parallel for w in steps.waves)
    assert sorted(w for wave in steps.waves for w in wave) == sorted(
        c.worker for c in steps.changes if c.load
    )
    assert steps.moved == sum(c.kind != "keep" for c in steps.changes)


def test_a_plan_against_itself_keeps_every_worker():
    s = setup_for(0.8)
    steps = reconcile((s.plan, s.placement), (s.plan, s.placement))
    assert steps.moved == 0 and not steps.waves and steps.describe().endswith("0 waves")


def test_binding_near_the_current_placement_moves_fewer_workers():
    from hetserve.control.reconcile import placement_hint

    a, b = setup_for(0.8), setup_for(0.2)
    plain = reconcile((a.plan, a.placement), (b.plan, bind(b.plan, b.cluster)))
    near = bind(b.plan, b.cluster, prefer=placement_hint(a.plan, a.placement))
    hinted = reconcile((a.plan, a.placement), (b.plan, near))
    assert hinted.moved <= plain.moved
