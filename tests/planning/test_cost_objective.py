"""``plan --objective cost``: the cheapest GPUs that serve the rates, against an
independent brute force over GPU counts; caps, preference and pricing errors."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.core.cluster import parse_cluster
from hetserve.core.errors import HetserveError
from hetserve.core.placement import gpus_needed
from hetserve.core.plan import slos_from_scale
from hetserve.engine.setup import latency_source
from hetserve.planning.candidates import enumerate_candidates, net_info
from hetserve.planning.ppipe import PlanOptions, plan_models

MODELS = ["resnet50", "bert-base"]


def cluster(prices, caps, preference=()):  # type: ignore[no-untyped-def]
    spec = {
        "name": "two-types",
        "nodes": [{"count": 1, "gpus": {"L4": 4, "T4": 4}, "nic_gbps": 100}],
        "pricing": {
            t: {"price_per_hour": prices[t], **({"cap": caps[t]} if caps[t] is not None else {})}
            for t in ("L4", "T4")
        },
        "preference": list(preference),
    }
    return parse_cluster(spec, "test")


def brute_force(c, lat, slos, demand):  # type: ignore[no-untyped-def]
    """The least price per hour over every count of GPUs per (model, type), each model
    on each type at the best per-GPU rate of its single-stage, share-1 configurations
    within 0.6 x SLO (what np plans); None if no count serves the demand."""
    usable = c.usable()
    rate = {}
    for m in MODELS:
        cs, _ = enumerate_candidates(m, lat, usable, net_info(c), 0.6 * slos[m], max_stages=1,
                                     shares=(1,), prune=False)  # fmt: skip
        for t in usable:
            rate[m, t] = max((x.stages[0].per_gpu_rps for x in cs if x.stages[0].gpu == t),
                             default=0.0)  # fmt: skip
    keys = [(m, t) for m in MODELS for t in usable]
    best = None
    for counts in itertools.product(*(range(usable[t] + 1) for _, t in keys)):
        g = dict(zip(keys, counts, strict=True))
        if any(sum(g[m, t] for m in MODELS) > usable[t] for t in usable):
            continue
        if any(sum(g[m, t] * rate[m, t] for t in usable) < demand[m] - 1e-6 for m in MODELS):
            continue
        cost = sum(c.price_per_hour(t) * g[m, t] for m, t in keys)
        best = cost if best is None else min(best, cost)
    return best


@settings(max_examples=30, deadline=None)
@given(
    st.floats(50, 6000), st.floats(50, 4000),
    st.sampled_from([0.35, 0.7, 1.0, 2.0]), st.sampled_from([0.35, 0.7, 1.0, 2.0]),
    st.none() | st.integers(0, 4), st.none() | st.integers(0, 4),
)  # fmt: skip
def test_cost_plans_are_the_cheapest(r1, r2, p_l4, p_t4, cap_l4, cap_t4):  # type: ignore[no-untyped-def]
    c = cluster({"L4": p_l4, "T4": p_t4}, {"L4": cap_l4, "T4": cap_t4})
    lat, names = latency_source(c, MODELS, None)
    slos = slos_from_scale(c, lat, names, 5.0)
    rates = {"resnet50": r1, "bert-base": r2}
    opt = PlanOptions(planner="np", objective="cost", rates_rps=tuple(rates.items()), headroom=0.0)
    best = brute_force(c, lat, slos, rates)
    if best is None:
        with pytest.raises(HetserveError, match="cannot serve the rates|capped at 0"):
            plan_models(c, lat, slos, None, opt)
        return
    p = plan_models(c, lat, slos, None, opt)
    cost = p.meta["objective"]["cost_per_hour"]
    assert cost == pytest.approx(best, rel=1e-6)
    took = gpus_needed(p, c.catalog)
    assert sum(c.price_per_hour(t) * n for t, n in took.items()) == pytest.approx(cost)
    for t, n in took.items():
        assert n <= c.usable()[t]
    for m in MODELS:  # the plan carries every model's rate
        assert p.models[m].throughput_rps >= rates[m] * (1 - 1e-9)


def test_headroom_plans_for_more():
    c = cluster({"L4": 1.0, "T4": 1.0}, {"L4": None, "T4": None})
    lat, names = latency_source(c, MODELS, None)
    slos = slos_from_scale(c, lat, names, 5.0)
    rates = (("resnet50", 1000.0), ("bert-base", 500.0))
    p = plan_models(c, lat, slos, None, PlanOptions(objective="cost", rates_rps=rates,
                                                    headroom=0.5))  # fmt: skip
    for m, r in rates:
        assert p.models[m].throughput_rps >= 1.5 * r * (1 - 1e-9)
    assert p.meta["objective"]["demand_rps"] == {"resnet50": 1500.0, "bert-base": 750.0}


def test_unaffordable_rates_say_how_much_is_servable():
    c = cluster({"L4": 1.0, "T4": 1.0}, {"L4": 1, "T4": 0})
    lat, names = latency_source(c, MODELS, None)
    slos = slos_from_scale(c, lat, names, 5.0)
    opt = PlanOptions(objective="cost", rates_rps=(("resnet50", 1e6), ("bert-base", 1e6)))
    with pytest.raises(HetserveError, match=r"the most any plan serves is \d+% of them"):
        plan_models(c, lat, slos, None, opt)


def test_equal_prices_follow_the_preference():
    """Two types at one price, each enough alone: the preferred one is taken (the tie
    broken by the preference, not by the solver)."""
    for pref, want in ((["T4", "L4"], "T4"), (["L4", "T4"], "L4")):
        c = cluster({"L4": 1.0, "T4": 1.0}, {"L4": None, "T4": None}, pref)
        lat, names = latency_source(c, ["resnet50"], None)
        slos = slos_from_scale(c, lat, names, 5.0)
        opt = PlanOptions(planner="np", objective="cost", rates_rps=(("resnet50", 50.0),))
        p = plan_models(c, lat, slos, None, opt)
        assert set(gpus_needed(p, c.catalog)) == {want}
        assert math.isclose(p.meta["objective"]["cost_per_hour"], 1.0, rel_tol=1e-3)


@pytest.mark.parametrize(
    ("pricing", "message"),
    [
        ({"A100": {"price_per_hour": 1.0}}, "pricing.A100: the cluster has no A100"),
        ({"Z9": {"price_per_hour": 1.0}}, "pricing.Z9"),
        ({"L4": {"price_per_hour": 0}}, "price_per_hour"),
        ({"L4": {"cap": -1}}, "cap"),
    ],
)
def test_bad_pricing_is_a_one_line_error(pricing, message):  # type: ignore[no-untyped-def]
    spec = {"name": "x", "nodes": [{"gpus": {"L4": 1}, "nic_gbps": 10}], "pricing": pricing}
    with pytest.raises(HetserveError, match=message) as e:
        parse_cluster(spec, "c.yaml")
    assert "\n" not in str(e.value) and str(e.value).startswith("c.yaml")


def test_a_warm_start_from_the_served_plan_reaches_the_cold_optimum(monkeypatch):  # type: ignore[no-untyped-def]
    """``PlanOptions.start``: every pipeline of the served plan is found among the
    candidates and handed to the solver; the re-plan reaches the cold solve's objective
    (within the MILP's gap), also from a start the new caps make infeasible (left out)."""
    from hetserve.planning.candidates import enumerate_candidates, net_info
    from hetserve.planning.ppipe import start_gpus

    c = cluster({"L4": 1.0, "T4": 1.0}, {"L4": None, "T4": None})
    lat, names = latency_source(c, MODELS, None)
    slos = slos_from_scale(c, lat, names, 5.0)
    served = plan_models(c, lat, slos, None, PlanOptions())
    cands = []
    for m in MODELS:
        cs, _ = enumerate_candidates(m, lat, c.usable(), net_info(c), 0.6 * slos[m])
        cands += cs
    start = start_gpus(cands, served)
    assert len(start) == sum(len(mp.pipelines) for mp in served.models.values())
    w = {"resnet50": 0.8, "bert-base": 0.2}
    cold = plan_models(c, lat, slos, w, PlanOptions())
    import hetserve.planning.milp as milp

    starts, solve_highs = [], milp.solve_highs

    def spy(*args):  # type: ignore[no-untyped-def]
        starts.append(args[9])
        return solve_highs(*args)

    monkeypatch.setattr(milp, "solve_highs", spy)
    warm = plan_models(c, lat, slos, w, PlanOptions(start=served))
    assert starts[-1] is not None  # (handed to HiGHS)
    want = cold.meta["objective"]["normalized_rps"]
    assert warm.meta["objective"]["normalized_rps"] == pytest.approx(want, rel=2e-4)
    capped = cluster({"L4": 1.0, "T4": 1.0}, {"L4": 1, "T4": 1})  # the start holds more
    lat2, _ = latency_source(capped, MODELS, None)
    a = plan_models(capped, lat2, slos, w, PlanOptions())
    b = plan_models(capped, lat2, slos, w, PlanOptions(start=served))
    assert starts[-1] is None  # (infeasible under the caps: left out)
    got = b.meta["objective"]["normalized_rps"]
    assert got == pytest.approx(a.meta["objective"]["normalized_rps"], rel=2e-4)


def _two(gpus, pricing=None):  # type: ignore[no-untyped-def]
    spec = {"name": "two", "nodes": [{"gpus": gpus, "nic_gbps": 10}]}
    if pricing is not None:
        spec["pricing"] = pricing
    return parse_cluster(spec, "c.yaml")


def test_the_catalog_prices_are_the_defaults_and_the_file_overrides_them():
    """No pricing: the catalog's dollars per GPU-hour (Google Cloud us-central1); a cluster
    file's price replaces the catalog's for its type only; a cap alone keeps the price."""
    from hetserve.core.gpus import CATALOG_PRICE_PER_HOUR

    c = _two({"L4": 2, "T4": 2})
    assert c.prices() == {"L4": CATALOG_PRICE_PER_HOUR["L4"], "T4": CATALOG_PRICE_PER_HOUR["T4"]}
    assert c.priced and c.price_per_hour("nvidia l4") == CATALOG_PRICE_PER_HOUR["L4"]
    c = _two({"L4": 2, "T4": 2}, {"T4": {"price_per_hour": 0.2}, "L4": {"cap": 1}})
    assert c.prices() == {"L4": CATALOG_PRICE_PER_HOUR["L4"], "T4": 0.2}
    assert c.usable() == {"L4": 1, "T4": 2}


def test_types_the_catalog_does_not_price_count_gpu_hours():
    """No type with a price anywhere: every price is 1.0 and the objective is GPU-hours."""
    c = _two({"A30": 2, "V100-32GB": 1})
    assert c.prices() == {"A30": 1.0, "V100-32GB": 1.0} and not c.priced


def test_a_price_for_some_types_and_none_for_others_is_a_one_line_error():
    """L4 has a catalog price and A30 none: adding dollars to GPU-hours is refused, naming
    the type and the field that fixes it; a price for A30 in the file fixes it."""
    c = _two({"L4": 2, "A30": 2})
    with pytest.raises(
        HetserveError, match=r"no price for A30 .*pricing\.A30\.price_per_hour"
    ) as e:
        c.price_per_hour("L4")
    assert "\n" not in str(e.value) and str(e.value).startswith("c.yaml")
    assert _two({"L4": 2, "A30": 2}, {"A30": {"price_per_hour": 1.1}}).prices()["A30"] == 1.1


def test_the_cost_objective_takes_the_cheaper_type_by_the_catalog():
    """With the catalog's prices (T4 0.35 < L4 0.56 per GPU-hour) and a rate a few T4
    serve, the cheapest plan is all T4, and its cost is the catalog's price times its GPUs;
    priced the other way round in the file, it is all L4."""
    c = _two({"L4": 4, "T4": 4})
    lat, names = latency_source(c, ["resnet50"], None)
    slos = slos_from_scale(c, lat, names, 5.0)
    opts = PlanOptions(
        planner="np", objective="cost", rates_rps=(("resnet50", 100.0),), headroom=0.0
    )
    p = plan_models(c, lat, slos, None, opts)
    took = gpus_needed(p, c.catalog)
    assert set(took) == {"T4"}
    assert p.meta["objective"]["cost_unit"] == "USD"
    assert math.isclose(p.meta["objective"]["cost_per_hour"], 0.35 * took["T4"], rel_tol=1e-3)
    c = _two({"L4": 4, "T4": 4}, {"L4": {"price_per_hour": 0.1}})
    p = plan_models(c, lat, slos, None, opts)
    assert set(gpus_needed(p, c.catalog)) == {"L4"}


def test_re_planning_for_cost_without_every_price_is_refused_before_it_starts():
    """``--replan ... --objective cost`` on a cluster with a type the catalog does not
    price (rampa-base: A30, V100-32GB): the one-line error comes when the control loop is
    set up, not from a background re-plan while serving."""
    from hetserve.engine.setup import build_setup
    from hetserve.experiments.setup import replanner

    base = build_setup("rampa-base", ["resnet50"])
    slos = slos_from_scale(base.cluster, base.latency, ["resnet50"], 5.0)
    plan = plan_models(base.cluster, base.latency, slos, options=PlanOptions(planner="np"))
    setup = build_setup("rampa-base", ["resnet50"], plan=plan)
    replanner(setup, objective="throughput")  # (no price needed)
    with pytest.raises(HetserveError, match=r"no price for A30, V100-32GB") as e:
        replanner(setup, objective="cost")
    assert "\n" not in str(e.value)
