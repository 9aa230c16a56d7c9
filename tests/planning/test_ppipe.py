import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetserve.core.cluster import parse_cluster
from hetserve.core.errors import HetserveError
from hetserve.core.latency import RooflineModel
from hetserve.core.plan import Plan, bind, slos_from_scale
from hetserve.core.presets import load_cluster
from hetserve.core.profiles import ProfileSet, TableModel
from hetserve.planning.bruteforce import brute_force_optimum
from hetserve.planning.ppipe import PlanOptions, plan_models
from hetserve.planning.validate import validate_plan


def _tiny(data) -> tuple:
    """A random tiny instance: 2 GPU types (<= 3 each), <= 4 blocks, shares 1-2, batches
    1-2, 1-2 models with random weights, a per-block latency table."""
    n_a = data.draw(st.integers(1, 3), "L4 GPUs")
    n_b = data.draw(st.integers(1, 3), "P4 GPUs")
    per_node = data.draw(st.sampled_from([1, 2]), "GPUs per node")
    nodes = []
    for t, n in (("L4", n_a), ("P4", n_b)):
        full, rest = divmod(n, per_node)
        if full:
            nodes.append(
                {
                    "count": full,
                    "name": f"{t}-",
                    "gpus": {t: per_node},
                    "nic_gbps": data.draw(st.sampled_from([1.0, 10.0]), "nic"),
                }
            )
        if rest:
            nodes.append({"count": 1, "name": f"{t}r", "gpus": {t: rest}, "nic_gbps": 10.0})
    cluster = parse_cluster({"name": "tiny", "nodes": nodes}, "tiny")
    n_models = data.draw(st.integers(1, 2), "models")
    ps = ProfileSet()
    slos, weights = {}, {}
    for mi in range(n_models):
        m = f"m{mi}"
        nb = data.draw(st.integers(1, 4), f"{m} blocks")
        ps.out_bytes[m] = [data.draw(st.sampled_from([1e4, 1e5, 1e6]), "bytes") for _ in range(nb)]
        for t, speed in (("L4", 1.0), ("P4", data.draw(st.sampled_from([1.5, 3.0]), "slow"))):
            for k in (1, 2):
                base = [data.draw(st.floats(0.5, 3.0), "ms") * speed for _ in range(nb)]
                for b in (1, 2):
                    grow = data.draw(st.floats(1.0, 2.0), "batch growth")
                    ps.latency_us[(m, t, k, b)] = [
                        x * k**0.7 * (grow if b == 2 else 1) * 1e3 for x in base
                    ]
        slos[m] = data.draw(st.floats(0.004, 0.04), f"{m} slo")
        weights[m] = data.draw(st.floats(0.2, 1.0), f"{m} weight")
    return cluster, TableModel(ps), slos, weights


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_milp_matches_brute_force(data):
    cluster, lat, slos, weights = _tiny(data)
    opts = PlanOptions(shares=(1, 2), batches=(1, 2), max_stages=2, mip_rel_gap=1e-9)
    expected = brute_force_optimum(
        cluster, lat, slos, weights, shares=(1, 2), batches=(1, 2), max_stages=2
    )
    try:
        plan = plan_models(cluster, lat, slos, weights, opts)
    except HetserveError:
        assert expected == 0.0
        return
    got = plan.meta["objective"]["normalized_rps"]
    assert got == pytest.approx(expected, rel=1e-6)
    assert validate_plan(plan, cluster, lat, 0.4) == []


def test_the_references_import_none_of_the_planner():
    """The brute force and the plan validator check the planner, so they recompute from
    the latency model and the cluster and import nothing from ``hetserve.planning``."""
    import ast
    import importlib

    for name in ("hetserve.planning.bruteforce", "hetserve.planning.validate"):
        mod = importlib.import_module(name)
        tree = ast.parse(open(mod.__file__).read())
        imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)] + [
            a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
        ]
        assert not [m for m in imported if m.startswith("hetserve.planning")], (name, imported)


RM = RooflineModel()
MODELS = ["resnet50", "efficientnet-b0", "densenet121"]


@pytest.mark.parametrize("planner", ["ppipe", "np", "dart-r"])
def test_real_plans_validate_and_rank(planner):
    c = load_cluster("hc1-l")
    slos = slos_from_scale(c, RM, MODELS, 5.0)
    plan = plan_models(c, RM, slos, None, PlanOptions(planner=planner))
    assert validate_plan(plan, c, RM, 0.4) == []
    assert plan.meta["solve"]["status"] == "optimal"
    assert plan.capacity_rps() == pytest.approx(plan.meta["objective"]["normalized_rps"])
    for m in plan.models.values():
        for p in m.pipelines:
            if planner == "np":
                assert len(p.stages) == 1 and p.stages[0].share == 1
            if planner == "dart-r" and len(p.stages) == 2:
                a, b = p.stages
                assert a.gpu != b.gpu and a.instances == b.instances and a.share == b.share == 1
    bind(plan, c)  # fits the cluster


def test_ppipe_beats_baselines_on_hc1():
    c = load_cluster("hc1-l")
    slos = slos_from_scale(c, RM, MODELS, 5.0)
    obj = {
        p: plan_models(c, RM, slos, None, PlanOptions(planner=p)).capacity_rps()
        for p in ("ppipe", "np", "dart-r")
    }
    assert obj["ppipe"] >= obj["dart-r"] >= obj["np"] * 0.999
    assert obj["ppipe"] > obj["np"]  # pipelines put the low-class P4s to work


def test_infeasible_names_model_and_smallest_latency():
    c = load_cluster("hc1-s")
    with pytest.raises(
        HetserveError,
        match=r"model resnet50: no stage configuration .* "
        r"smallest latency achievable is \d+\.\d+ ms",
    ):
        plan_models(c, RM, {"resnet50": 1e-4})


def test_weights_shift_capacity():
    c = load_cluster("hc2-s")
    slos = slos_from_scale(c, RM, ["resnet50", "vit-b16"], 5.0)
    p = plan_models(c, RM, slos, {"resnet50": 3.0, "vit-b16": 1.0})
    rates = p.rates_at(1.0)
    assert rates["resnet50"] == pytest.approx(3 * rates["vit-b16"])
    for m, r in rates.items():
        assert p.models[m].throughput_rps >= r * (1 - 1e-6)


def test_plan_round_trips_through_json(tmp_path):
    c = load_cluster("hc2-s")
    slos = slos_from_scale(c, RM, ["resnet50"], 5.0)
    p = plan_models(c, RM, slos)
    f = tmp_path / "plan.json"
    p.save(f)
    d = json.loads(f.read_text())
    assert d["planner"] == "ppipe" and d["solve"]["status"] == "optimal"
    assert math.isclose(d["objective"]["normalized_rps"], p.capacity_rps(), rel_tol=1e-9)
    back = Plan.load(f)
    assert validate_plan(back, c, RM, 0.4) == []


def test_dart_r_needs_two_gpu_types():
    c = load_cluster("shepherd-12xv100")
    with pytest.raises(HetserveError, match="dart-r pairs"):
        plan_models(c, RM, {"resnet50": 0.05}, None, PlanOptions(planner="dart-r"))


def test_same_input_same_plan(tmp_path):
    c = load_cluster("hc2-s")
    slos = slos_from_scale(c, RM, ["resnet50", "densenet121"], 5.0)
    a, b = (plan_models(c, RM, slos) for _ in range(2))
    a.save(tmp_path / "a.json")
    b.save(tmp_path / "b.json")
    da, db = (json.loads((tmp_path / f).read_text()) for f in ("a.json", "b.json"))
    da["solve"].pop("seconds")
    db["solve"].pop("seconds")
    assert da == db
