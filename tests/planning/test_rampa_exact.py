"""RAMPA's requirement check and exact placement against brute forces written here from
the paper's formulas (TCC 2025, section IV-A), sharing none of the code they check:
every cut of small operation chains, and every (GPUs, paths, cuts) of tiny clusters.

The references read only data: the cluster's links (bandwidth, delay, lanes), the GPUs'
specifications, and the allocation costs of Eqs. 4-5 (``state.costs()``, which
``test_rampa_model`` checks by hand); they compute stage times, cut delays, memory,
traffic, cycle, latency and Eq. 6 themselves."""

import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.planning.rampa.exact import exact_placement
from hetserve.planning.rampa.network import RampaNet
from hetserve.planning.rampa.perf import Op
from hetserve.planning.rampa.state import ClusterState, Service, best_cuts
from tests.planning.test_rampa_model import cluster

TOL = 1e-9
TYPES = ["T4", "L4", "A30", "V100-32GB"]


# ---- the reference: the paper's model, written out --------------------------------------


def ref_cut(net, svc, bounds, gpus, paths, room=None):
    """(cycle, latency) of stages ``ops[bounds[k]:bounds[k+1]]`` on ``gpus[k]`` with cut
    ``k`` over ``paths[k]``, or None when memory or bandwidth does not hold."""
    links = net.cluster.links
    ops = svc.ops
    times, delays = [], []
    for k, g in enumerate(gpus):
        spec = net.gpus[g]
        part = ops[bounds[k] : bounds[k + 1]]
        t = sum(o.flops / (spec.tflops * 1e12) + o.memory_bytes / (spec.mem_bw_gbps * 1e9)
                for o in part)  # fmt: skip
        received = ops[bounds[k] - 1].out_bytes if k else 0.0
        if sum(o.memory_bytes for o in part) + received > spec.memory_gb * 1e9:
            return None
        times.append(t)
    use: dict[str, float] = {}
    for k, path in enumerate(paths):
        sent = ops[bounds[k + 1] - 1].out_bytes
        bps = svc.throughput_tps * sent * 8
        for x in path:
            lk = links[x]
            left = lk.bw_gbps * 1e9 * lk.lanes - (room or {}).get(x, 0.0)
            use[x] = use.get(x, 0.0) + bps
            if bps > lk.bw_gbps * 1e9 * (1 + TOL) or use[x] > left * (1 + TOL):
                return None
        bottleneck = min(links[x].bw_gbps for x in path) * 1e9
        delays.append(sum(links[x].delay_s for x in path) + sent * 8 / bottleneck)
    cycle = max(times + delays)
    return cycle, len(gpus) * cycle + sum(delays)


def ref_meets(svc, cyc_lat):
    return (
        cyc_lat is not None
        and cyc_lat[0] <= (1 / svc.throughput_tps) * (1 + TOL)
        and cyc_lat[1] <= svc.latency_s * (1 + TOL)
    )


def every_bounds(n_ops, stages):
    for inner in itertools.combinations(range(1, n_ops), stages - 1):
        yield (0, *inner, n_ops)


def ref_paths(net, a, b):
    """Every loop-free path from GPU ``a`` to GPU ``b``: its attachment link up, switch
    links, the other's attachment link down."""
    src, dst = net.gpus[a], net.gpus[b]
    links = net.cluster.links
    nbrs: dict[str, list[str]] = {}
    for name in links:
        u, _, v = name.partition("->")
        if u in net.adj and v in net.adj:  # a switch link
            nbrs.setdefault(u, []).append(v)
    out = []
    stack = [(src.switch, (src.switch,))]
    while stack:
        here, seen = stack.pop()
        if here == dst.switch:
            hops = tuple(f"{u}->{v}" for u, v in itertools.pairwise(seen))
            out.append((src.up, *hops, dst.down))
            continue
        for nxt in nbrs.get(here, ()):
            if nxt not in seen:
                stack.append((nxt, (*seen, nxt)))
    return out


# ---- strategies ---------------------------------------------------------------------------

op_st = st.builds(
    lambda f, m, o: (f, m, o),
    st.floats(1e8, 3e10),
    st.floats(1e6, 6e9),
    st.floats(1e5, 6e7),
)


def make_service(raw, tps, latency_ms):
    ops = tuple(Op(f"o{i}", *t) for i, t in enumerate(raw))
    return Service("svc", "m", ops, tps, latency_ms / 1e3)


def two_switches(t0, t1, per=1):
    return RampaNet.of(cluster([("s0", "s1")], {"s0": (t0, per), "s1": (t1, per)}))


# ---- the requirement check ----------------------------------------------------------------


def test_the_issue_example_a_longer_cycle_with_smaller_cut_delays_meets_the_deadline():
    """The shortest cycle's cut misses 69.449 ms; bounds (0, 2, 5) meet it."""
    net = two_switches("T4", "T4")
    raw = [(1e9, 9e9, 3e7), (2e10, 1e6, 1e7), (1e9, 1e6, 1e6), (5e9, 1e6, 3e7), (1e9, 1e6, 1e7)]
    svc = make_service(raw, 32.52, 69.449)
    state = ClusterState.of(net)
    gpus = sorted(state.free)
    (path,) = ref_paths(net, *gpus)
    assert ref_meets(svc, ref_cut(net, svc, (0, 2, 5), gpus, [path]))
    hit = best_cuts(state, svc, gpus, [path])
    assert hit is not None and hit[0] == (0, 2, 5)
    p = exact_placement(state, svc)
    assert p is not None and p.est.latency_s <= svc.latency_s


def ref_min_latency(net, svc, gpus, paths, bounds_of=every_bounds, room=None):
    """The smallest latency over the cuts meeting every requirement but the deadline (inf
    if none)."""
    lat = math.inf
    for b in bounds_of(len(svc.ops), len(gpus)):
        cl = ref_cut(net, svc, b, gpus, paths, room)
        if cl is not None and cl[0] <= (1 / svc.throughput_tps) * (1 + TOL):
            lat = min(lat, cl[1])
    return lat


@settings(max_examples=300, deadline=None)
@given(
    st.lists(op_st, min_size=1, max_size=6),
    st.lists(st.sampled_from(TYPES), min_size=1, max_size=4),
    st.floats(2.0, 80.0),
    st.floats(0.9, 1.1),
)
def test_the_check_finds_a_cut_exactly_when_one_exists(raw, types, tps, slack):
    """Against every cut: ``best_cuts`` finds one iff some cut meets the throughput,
    latency, memory and bandwidth requirements, and the one it finds meets them with the
    shortest cycle of any that does. The deadline is drawn around the smallest latency any
    cut reaches, where the shortest cycle and the smallest latency part."""
    types = types[: len(raw)]
    at = {f"s{i}": (t, 1) for i, t in enumerate(types)}
    sw = sorted(at)
    net = RampaNet.of(cluster(list(itertools.pairwise(sw)) or [], at))
    gpus = [f"n-{s}/gpu0" for s in sw]
    paths = [ref_paths(net, a, b)[0] for a, b in itertools.pairwise(gpus)]
    floor = ref_min_latency(net, make_service(raw, tps, math.inf), gpus, paths)
    svc = make_service(raw, tps, slack * floor * 1e3 if math.isfinite(floor) else 100.0)
    feasible = [
        (cl[0], b)
        for b in every_bounds(len(raw), len(gpus))
        if ref_meets(svc, cl := ref_cut(net, svc, b, gpus, paths))
    ]
    hit = best_cuts(ClusterState.of(net), svc, gpus, paths)
    assert (hit is not None) == bool(feasible), (feasible, hit)
    if hit is not None:
        mine = ref_cut(net, svc, hit[0], gpus, paths)
        assert ref_meets(svc, mine)
        assert mine[0] <= min(c for c, _ in feasible) * (1 + 1e-12)


# ---- the exact placement ------------------------------------------------------------------


def ref_options(state, svc, max_stages):
    """Every stage count, ordered choice of distinct free GPUs and loop-free path per cut:
    (Eq. 6 cost, the smallest latency of its cuts meeting every requirement but the
    deadline)."""
    net = state.net
    gpu_cost, link_cost = state.costs()
    free = sorted(state.free)
    out = []
    for s in range(1, min(max_stages, len(free), len(svc.ops)) + 1):
        for gpus in itertools.permutations(free, s):
            choices = [ref_paths(net, a, b) for a, b in itertools.pairwise(gpus)]
            for paths in itertools.product(*choices):
                cost = sum(gpu_cost[g] for g in gpus) + sum(link_cost[x] for p in paths for x in p)
                out.append((cost, ref_min_latency(net, svc, gpus, paths, room=state.used_bps)))
    return out


@settings(max_examples=400, deadline=None)
@given(
    st.lists(op_st, min_size=1, max_size=5),
    st.integers(2, 3),
    st.lists(st.sampled_from(TYPES), min_size=3, max_size=3),
    st.integers(1, 2),
    st.floats(2.0, 80.0),
    st.floats(0.9, 1.1),
    st.integers(0, 10_000),
)
def test_exact_placement_is_the_brute_force_optimum(raw, n_sw, types, per, tps, slack, pick):
    """The cheapest cost over every (GPUs, paths, cuts), the deadline drawn around the
    smallest latency of one of them."""
    ring = [(f"s{i}", f"s{(i + 1) % n_sw}") for i in range(n_sw)] if n_sw > 2 else [("s0", "s1")]
    at = {f"s{i}": (types[i], per) for i in range(n_sw)}
    net = RampaNet.of(cluster(ring, at))
    options = ref_options(ClusterState.of(net), make_service(raw, tps, math.inf), 3)
    reachable = sorted(lat for _, lat in options if math.isfinite(lat))
    deadline_s = slack * reachable[pick % len(reachable)] if reachable else 0.1
    svc = make_service(raw, tps, deadline_s * 1e3)
    want = min((c for c, lat in options if lat <= deadline_s * (1 + TOL)), default=math.inf)
    got = exact_placement(ClusterState.of(net), svc, max_stages=3)
    if math.isinf(want):
        assert got is None
        return
    assert got is not None
    assert abs(got.cost - want) <= 1e-9 * want
    assert ref_meets(svc, ref_cut(net, svc, got.bounds, got.gpus, got.paths))
