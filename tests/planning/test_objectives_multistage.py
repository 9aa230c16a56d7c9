"""``plan --objective cost|energy`` with pipelines of several stages, shares and batches,
against the independent brute force (``planning.bruteforce``: it imports none of the
planner) on random tiny instances: two GPU types, prices and caps, up to 4 blocks."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetserve.core.cluster import parse_cluster
from hetserve.core.errors import HetserveError
from hetserve.core.placement import gpus_needed
from hetserve.core.profiles import ProfileSet, TableModel
from hetserve.planning.bruteforce import brute_force_min_cost, brute_force_min_watts
from hetserve.planning.ppipe import PlanOptions, plan_models
from hetserve.planning.validate import validate_plan

GRID = {"max_stages": 2, "shares": (1, 2), "batches": (1, 2)}


def _instance(data, energy: bool):  # type: ignore[no-untyped-def]
    """Two GPU types (1-3 each, 1-2 per node), prices and caps (cost), 1-2 models of 1-4
    blocks with per-block latencies (and energies) per type, share and batch, an SLO each
    and a demand each (a fraction of what the whole cluster could serve of it)."""
    nodes = []
    for t in ("L4", "P4"):
        n = data.draw(st.integers(1, 3), f"{t} GPUs")
        per = data.draw(st.sampled_from([1, 2]), f"{t} per node")
        full, rest = divmod(n, per)
        nic = data.draw(st.sampled_from([1.0, 10.0]), "nic")
        if full:
            nodes.append({"count": full, "name": f"{t}-", "gpus": {t: per}, "nic_gbps": nic})
        if rest:
            nodes.append({"count": 1, "name": f"{t}r", "gpus": {t: rest}, "nic_gbps": 10.0})
    spec: dict = {"name": "tiny", "nodes": nodes}
    if not energy:
        spec["pricing"] = {
            t: {"price_per_hour": data.draw(st.sampled_from([0.3, 0.7, 1.0, 2.5]), f"{t} $"),
                **({} if (cap := data.draw(st.none() | st.integers(1, 3), f"{t} cap")) is None
                   else {"cap": cap})}
            for t in ("L4", "P4")
        }  # fmt: skip
    cluster = parse_cluster(spec, "tiny")
    ps = ProfileSet(energy_mj={} if energy else None)
    slos, demand = {}, {}
    for mi in range(data.draw(st.integers(1, 2), "models")):
        m = f"m{mi}"
        nb = data.draw(st.integers(1, 4), f"{m} blocks")
        ps.out_bytes[m] = [data.draw(st.sampled_from([1e4, 1e5, 1e6]), "bytes") for _ in range(nb)]
        for t, speed in (("L4", 1.0), ("P4", data.draw(st.sampled_from([1.5, 3.0]), "slow"))):
            for k in (1, 2):
                base = [data.draw(st.floats(0.5, 3.0), "ms") * speed for _ in range(nb)]
                for b in (1, 2):
                    grow = data.draw(st.floats(1.0, 2.0), "batch growth")
                    lat = [x * k**0.7 * (grow if b == 2 else 1) * 1e3 for x in base]
                    ps.latency_us[(m, t, k, b)] = lat
                    if energy:  # mJ: a draw between 30 and 300 W over each block's time
                        w = data.draw(st.floats(30.0, 300.0), "watts")
                        ps.energy_mj[(m, t, k, b)] = [x * w / 1e3 for x in lat]  # type: ignore[index]
        slos[m] = data.draw(st.floats(0.004, 0.04), f"{m} slo")
        demand[m] = data.draw(st.floats(10.0, 1500.0), f"{m} demand")
    return cluster, TableModel(ps), slos, demand


def _check(data, objective: str) -> None:  # type: ignore[no-untyped-def]
    cluster, lat, slos, demand = _instance(data, objective == "energy")
    brute = brute_force_min_watts if objective == "energy" else brute_force_min_cost
    want = brute(cluster, lat, slos, demand, **GRID)  # type: ignore[arg-type]
    opt = PlanOptions(objective=objective, rates_rps=tuple(demand.items()), headroom=0.0,
                      mip_rel_gap=1e-9, **GRID)  # type: ignore[arg-type]  # fmt: skip
    try:
        plan = plan_models(cluster, lat, slos, None, opt)
    except HetserveError as e:
        assert want is None, f"the planner found none ({e}); the brute force {want}"
        return
    assert want is not None, "the planner found a plan the brute force says cannot be"
    key = "watts" if objective == "energy" else "cost_per_hour"
    assert plan.meta["objective"][key] == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert validate_plan(plan, cluster, lat, 0.4) == []
    for m, d in demand.items():
        assert plan.models[m].throughput_rps >= d * (1 - 1e-6)
    taken = gpus_needed(plan, cluster.catalog)
    for t, n in taken.items():
        assert n <= cluster.usable()[t]
    if objective == "cost":
        cost = sum(cluster.price_per_hour(t) * n for t, n in taken.items())
        assert cost == pytest.approx(want, rel=1e-5)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_cost_plans_of_several_stages_are_the_cheapest(data):  # type: ignore[no-untyped-def]
    _check(data, "cost")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_energy_plans_of_several_stages_draw_the_least(data):  # type: ignore[no-untyped-def]
    _check(data, "energy")


def test_a_second_gpu_that_serves_for_fewer_joules_is_worth_its_idle_draw():
    """Found by the test above (2026-11-26): one P4 alone serves the demand, but adding an
    L4 that serves most of it for fewer joules a request draws less in all. The brute force
    stopped adding pipelines once the demand was met, and so missed it; the planner did
    not."""
    nodes = [{"name": f"{t}-", "gpus": {t: 1}, "nic_gbps": 1.0} for t in ("L4", "P4")]
    cluster = parse_cluster({"name": "tiny", "nodes": nodes}, "tiny")
    ps = ProfileSet(energy_mj={})
    ps.out_bytes["m0"] = [1e4]
    for t, speed in (("L4", 1.0), ("P4", 1.5)):
        for k in (1, 2):
            for b in (1, 2):
                grow = 2.0 if (t, b) == ("L4", 2) else 1.0
                watts = 48.0 if (t, k, b) == ("P4", 1, 2) else 30.0
                lat = [speed * k**0.7 * grow * 1e3]
                ps.latency_us[("m0", t, k, b)] = lat
                ps.energy_mj[("m0", t, k, b)] = [x * watts / 1e3 for x in lat]  # type: ignore[index]
    lat_model = TableModel(ps)
    slos, demand = {"m0": 0.03125}, {"m0": 1001.0}
    want = brute_force_min_watts(cluster, lat_model, slos, demand, **GRID)  # type: ignore[arg-type]
    opt = PlanOptions(objective="energy", rates_rps=tuple(demand.items()), headroom=0.0,
                      mip_rel_gap=1e-9, **GRID)  # type: ignore[arg-type]  # fmt: skip
    plan = plan_models(cluster, lat_model, slos, None, opt)
    assert want == pytest.approx(plan.meta["objective"]["watts"], rel=1e-9)
    assert sorted(p.stages[0].gpu for p in plan.models["m0"].pipelines) == ["L4", "P4"]
