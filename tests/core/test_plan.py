import json

import pytest

from hetserve.core.errors import ConfigError, HetserveError
from hetserve.core.latency import RooflineModel
from hetserve.core.plan import ModelPlan, Pipeline, Plan, Stage, bind, default_plan, slos_from_scale
from hetserve.core.presets import load_cluster

RM = RooflineModel()


def test_default_plan_and_capacity():
    c = load_cluster("hc1-s")
    slos = slos_from_scale(c, RM, ["resnet50", "bert-base"], 5.0)
    assert slos["resnet50"] == pytest.approx(5 * RM.latency("resnet50", "L4", 1, 1))
    p = default_plan(c, RM, slos)
    assert p.shared_pools
    for m, mp in p.models.items():
        for pipe in mp.pipelines:
            assert pipe.latency_s <= 0.6 * slos[m] + 1e-12
            assert pipe.throughput_rps == pytest.approx(
                pipe.stages[0].instances * pipe.batch / pipe.latency_s
            )
    cap = p.capacity_rps()
    t = {m: mp.throughput_rps for m, mp in p.models.items()}
    assert cap == pytest.approx(1 / (0.5 / t["resnet50"] + 0.5 / t["bert-base"]))
    assert sum(p.rates_at(1.0).values()) == pytest.approx(cap)
    placement = bind(p, c)
    assert len(placement.workers) == 16  # every GPU once, shared by both models


def test_infeasible_slo_names_model_and_fastest_latency():
    c = load_cluster("hc1-s")
    with pytest.raises(HetserveError, match=r"model resnet50: no GPU .*\(fastest: "):
        default_plan(c, RM, {"resnet50": 1e-4})


def test_plan_json_round_trip_and_disjoint_binding(tmp_path):
    c = load_cluster("hc2-s")  # 1 node x 4 L4, 6 nodes x 2 T4
    p = Plan(
        {
            "resnet50": ModelPlan(
                0.05,
                1.0,
                (
                    Pipeline(
                        (Stage((0, 6), "T4", 2, 10, 0.004), Stage((6, 10), "L4", 1, 3, 0.003)),
                        4,
                        0.008,
                        900.0,
                    ),
                ),
            )
        }
    )
    f = tmp_path / "plan.json"
    p.save(f)
    back = Plan.load(f)
    assert back.models == p.models and back.shared_pools == p.shared_pools
    data = json.loads(f.read_text())
    assert set(data) >= {"planner", "objective", "solve", "models"}
    st = data["models"]["resnet50"]["pipelines"][0]["stages"][0]
    assert st == {
        "blocks": [0, 6],
        "gpu": "T4",
        "share": 2,
        "instances": 10,
        "latency_ms": 4.0,
        "transfer_ms": 0.0,
    }
    pl = bind(p, c)
    t4 = pl.stages[("resnet50", 0, 0)]
    assert len(t4) == 10 and len({w.split(":")[0] for w in t4}) == 5  # 2 slices per GPU
    assert len({w.split("/")[0] for w in t4}) == 5  # spread over nodes
    assert len(pl.stages[("resnet50", 0, 1)]) == 3
    assert p.capacity_rps() == pytest.approx(900.0)
    p.check_against(RM)


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (
            lambda d: d["models"]["m"]["pipelines"][0]["stages"][0].update(blocks=[3, 2]),
            r"blocks: expected \[start, stop\)",
        ),
        (
            lambda d: d["models"]["m"]["pipelines"][0]["stages"][1].update(blocks=[6, 10]),
            "stages must be contiguous",
        ),
        (lambda d: d["models"]["m"].pop("slo_ms"), "missing field 'slo_ms'"),
        (
            lambda d: d["models"]["m"]["pipelines"][0]["stages"][0].update(share=0),
            "share and instances must be >= 1",
        ),
    ],
)
def test_bad_plans(tmp_path, mutate, match):
    d = {
        "models": {
            "m": {
                "slo_ms": 100,
                "pipelines": [
                    {
                        "batch": 2,
                        "stages": [
                            {"blocks": [0, 5], "gpu": "T4", "share": 1, "instances": 2},
                            {"blocks": [5, 10], "gpu": "L4", "share": 1, "instances": 1},
                        ],
                    }
                ],
            }
        }
    }
    mutate(d)
    f = tmp_path / "p.json"
    f.write_text(json.dumps(d))
    with pytest.raises(ConfigError, match=match):
        Plan.load(f)


def test_binding_errors():
    c = load_cluster("hc1-s")
    p = Plan(
        {
            "resnet50": ModelPlan(
                0.05, 1.0, (Pipeline((Stage((0, 10), "L4", 1, 9),), 1, 0.01, 100.0),)
            )
        }
    )
    with pytest.raises(HetserveError, match="needs 9 more L4 GPUs"):
        bind(p, c)
    p2 = Plan(
        {
            "resnet50": ModelPlan(
                0.05, 1.0, (Pipeline((Stage((0, 9), "L4", 1, 1),), 1, 0.01, 100.0),)
            )
        }
    )
    with pytest.raises(HetserveError, match="must end at block 10"):
        p2.check_against(RM)
