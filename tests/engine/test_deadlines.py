"""The kernel's deadline watch (``engine.deadlines``) against a brute force over the held
requests: whatever the order of arrivals, returns and departures, ``due`` gives exactly
the held requests whose deadline has come (each once, by deadline) and ``first_s`` the
earliest deadline of one still held; compiled (where built) and as the Python file."""

from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.core.requests import Request
from hetserve.engine import deadlines, deadlines_core

BUILDS = sorted({deadlines.Deadlines, deadlines_core.Deadlines}, key=lambda c: c.__module__)

# one step: ("arrive", stream, slo index) | ("leave", k-th held) | ("again", k-th left)
#         | ("due", dt) -- time moves on by dt and the due requests are taken
STEP = st.one_of(
    st.tuples(st.just("arrive"), st.sampled_from("ab"), st.integers(0, 2)),
    st.tuples(st.just("leave"), st.integers(0, 50)),
    st.tuples(st.just("again"), st.integers(0, 50)),
    st.tuples(st.just("due"), st.floats(0.0, 0.3)),
)
SLOS = {"a": (0.1, 0.1, 0.1), "b": (0.25, 0.05, 0.4)}  # stream b: per-request deadlines


@pytest.mark.parametrize("build", BUILDS, ids=lambda c: c.__module__.rsplit(".", 1)[1])
@pytest.mark.parametrize("mapping", [dict, MappingProxyType], ids=["dict", "mapping"])
@settings(max_examples=300, deadline=None)
@given(steps=st.lists(STEP, max_size=120))
def test_due_and_first_match_a_brute_force(build, mapping, steps):
    """``held`` the kernel's dict, or any other mapping (read through a copy)."""
    dl, held, left = build(), {}, []
    now, nid = 0.0, 0
    for step in steps:
        if step[0] == "arrive":
            _, stream, k = step
            now += 0.01
            r = Request(nid, "m", stream, now, now + SLOS[stream][k])
            nid += 1
            held[r.id] = r
            # a stream's deadlines out of order (b's own deadlines) take the heap
            dl.add(r)
        elif step[0] == "leave" and held:
            rid = sorted(held)[step[1] % len(held)]
            left.append(held.pop(rid))
        elif step[0] == "again" and left:
            r = left.pop(step[1] % len(left))
            held[r.id] = r
            dl.again(r)
        elif step[0] == "due":
            now += step[1]
            want = sorted((r for r in held.values() if r.deadline_s <= now),
                          key=lambda r: (r.deadline_s, r.id))  # fmt: skip
            got = dl.due(now, mapping(held))
            assert got == want
            for r in got:
                del held[r.id]
        first = min((r.deadline_s for r in held.values()), default=float("inf"))
        assert dl.first_s(mapping(held)) == first
