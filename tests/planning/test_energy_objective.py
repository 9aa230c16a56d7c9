"""``plan --objective energy``: the least power that serves the rates, against an
independent brute force over GPU counts (single-stage, share-1 plans at one batch size,
so that each model has one configuration per GPU type); and the command line."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.core.cluster import parse_cluster
from hetserve.core.errors import HetserveError
from hetserve.core.placement import gpus_needed
from hetserve.core.plan import slos_from_scale
from hetserve.engine.setup import latency_source
from hetserve.planning.ppipe import PlanOptions, plan_models

MODELS = ["resnet50", "bert-base"]


def cluster(l4: int = 4, t4: int = 4):  # type: ignore[no-untyped-def]
    spec = {
        "name": "two-types",
        "nodes": [{"count": 1, "gpus": {"L4": l4, "T4": t4}, "nic_gbps": 100}],
    }
    return parse_cluster(spec, "test")


def brute_force(c, lat, slos, demand, batch):  # type: ignore[no-untyped-def]
    """The least watts over every count of GPUs per (model, type): each GPU taken draws
    its idle power; each model's demand is served by its types cheapest per request first
    (the exact answer of the flow problem a fixed count leaves: one demand row per model,
    capacities per type). A (model, type) is usable where the whole model at ``batch``
    fits 0.6 x SLO (planning's default margin of 0.4). None: no count serves it."""
    types = {g.type.name: g.type for n in c.nodes for g in n.gpus}
    count = {t: sum(1 for n in c.nodes for g in n.gpus if g.type.name == t) for t in types}
    rate, joules = {}, {}
    for m in MODELS:
        n = lat.num_blocks(m)
        for t, g in types.items():
            lat_s = sum(lat.latency(m, t, 1, batch, range(i, i + 1)) for i in range(n))
            if lat_s > 0.6 * slos[m] * (1 + 1e-12):
                continue
            rate[m, t] = batch / lat_s
            busy_j = lat.energy(m, t, 1, batch, range(0, n))
            joules[m, t] = max(0.0, busy_j - g.idle_w * lat_s) / batch
    keys = sorted(rate)
    best = None
    for counts in itertools.product(*(range(count[t] + 1) for _, t in keys)):
        g = dict(zip(keys, counts, strict=True))
        if any(sum(g[k] for k in keys if k[1] == t) > count[t] for t in types):
            continue
        watts = sum(types[t].idle_w * n for (_, t), n in g.items())
        ok = True
        for m in MODELS:
            need = demand[m]
            for k in sorted((k for k in keys if k[0] == m), key=lambda k: joules[k]):
                take = min(need, g[k] * rate[k])
                watts += take * joules[k]
                need -= take
            if need > 1e-6 * max(1.0, demand[m]):
                ok = False
                break
        if ok:
            best = watts if best is None else min(best, watts)
    return best


@settings(max_examples=25, deadline=None)
@given(st.floats(20, 5000), st.floats(20, 3000), st.sampled_from([1, 2, 3, 4, 8]))
def test_energy_plans_draw_the_least_power(r1, r2, batch):  # type: ignore[no-untyped-def]
    c = cluster()
    lat, names = latency_source(c, MODELS, None)
    slos = slos_from_scale(c, lat, names, 5.0)
    rates = {"resnet50": r1, "bert-base": r2}
    opt = PlanOptions(planner="np", objective="energy", rates_rps=tuple(rates.items()),
                      headroom=0.0, batches=(batch,))  # fmt: skip
    best = brute_force(c, lat, slos, rates, batch)
    if best is None:
        with pytest.raises(HetserveError, match="cannot serve the rates|no stage configuration"):
            plan_models(c, lat, slos, None, opt)
        return
    p = plan_models(c, lat, slos, None, opt)
    watts = p.meta["objective"]["watts"]
    assert watts == pytest.approx(best, rel=1e-5)
    for m in MODELS:  # the plan carries every model's rate
        assert p.models[m].throughput_rps >= rates[m] * (1 - 1e-9)
    took = gpus_needed(p, c.catalog)
    assert all(n <= 4 for n in took.values())


def test_energy_plans_for_the_rates_with_headroom_and_says_its_power():
    c = cluster()
    lat, names = latency_source(c, MODELS, None)
    slos = slos_from_scale(c, lat, names, 5.0)
    rates = (("resnet50", 2000.0), ("bert-base", 800.0))
    e = plan_models(c, lat, slos, None, PlanOptions(objective="energy", rates_rps=rates))
    assert e.meta["objective"]["joules_per_request"] > 0
    assert e.meta["objective"]["demand_rps"] == {"resnet50": 2500.0, "bert-base": 1000.0}


def test_plan_objective_energy_on_the_command_line(capsys, tmp_path):  # type: ignore[no-untyped-def]
    from hetserve.cli import main

    out = tmp_path / "p.json"
    code = main(["plan", "--cluster", "hc1-s", "--models", "resnet50,bert-base",
                 "--objective", "energy", "--rate", "3000", "--output", str(out)])  # fmt: skip
    text = capsys.readouterr().out
    assert code == 0 and "J per request" in text and "W (" in text
    code = main(["plan", "--cluster", "hc1-s", "--models", "resnet50", "--objective",
                 "energy", "--output", str(out)])  # fmt: skip
    err = capsys.readouterr().err
    assert code != 0 and "--objective energy: give the rate" in err
