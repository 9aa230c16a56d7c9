"""One point of every study re-run here and compared with the figure shipped in
docs/results/<study>/results.json: a change that moves a published number fails, and the
shipped results stay reproducible from the repository.

Points that go through a HiGHS MILP (PPipe's plan, MagicBatch's ``shared``) are compared
only under the HiGHS version that constraints.txt pins (the one the results were made
with): another version may pick another of several optimal plans, or stop its node-limited
search at another incumbent (docs/reproduce.md)."""

import json
import re
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"


def shipped(study: str) -> dict:
    return json.loads((RESULTS / study / "results.json").read_text())


def pinned(dist: str) -> str:
    text = (ROOT / "constraints.txt").read_text()
    m = re.search(rf"^{re.escape(dist)}==([^\s]+)$", text, re.M)
    assert m, f"constraints.txt pins no {dist}"
    return m.group(1)


needs_pinned_highs = pytest.mark.skipif(
    version("highspy") != pinned("highspy"),
    reason=f"the shipped figures were made with HiGHS {pinned('highspy')} (constraints.txt)",
)


@needs_pinned_highs
def test_ppipe_one_sweep_point():
    """hc1-l, G1, PPipe's plan, Poisson at load factor 0.95 for 30 s: pooled and per-model
    attainment."""
    from hetserve.experiments.ppipe import study as S

    cfg = S.StudyConfig()
    models = cfg.groups["G1"]
    plan = S.plan_group("hc1-l", models, "ppipe", cfg)
    cell = S.Cell("hc1-l", "G1", "ppipe", "poisson")
    S.run_cell(cell, models, plan, plan, S.StudyConfig(lf_step=0.95, lf_max=0.95))
    want = [p for p in shipped("ppipe")["curves"]["hc1-l"]["G1"]["ppipe"]["poisson"]
            if p[0] == 0.95]  # fmt: skip
    assert [list(cell.curve[0])] == want


def test_shepherd_two_stream_and_one_load_point():
    """The preemption scenario (90 ms: FLEX, FLEX without preemption, Clockwork) and FLEX
    on the stable MAF workload at 2,000 req/s for 120 s."""
    from hetserve.experiments.shepherd import study as S

    cfg = S.ShepherdConfig()
    want = shipped("shepherd")
    for name in ("flex", "flex-np", "clockwork"):
        _, got = S.run_point(("two-stream", 0.09, name), cfg)
        assert got == want["ablation"]["two_stream"]["90ms"][name], name
    _, got = S.run_point(("load", "maf-stable", "flex", 2000), cfg)
    point = want["workloads"]["maf-stable"]["goodput_vs_load"]["flex"][0]
    assert [got["offered_rps"], got["goodput_rps"]] == point


def test_deepplan_cold_starts_and_one_fig13_point():
    """Fig. 11's cold starts of ResNet-50 (every load plan) and Fig. 13's PT+DHA point at
    180 BERT-Base instances, SLO 100 ms."""
    from hetserve.core.presets import load_cluster
    from hetserve.experiments.deepplan import study as S

    want = shipped("deepplan")
    cfg = S.DeepPlanConfig(
        fig11_models=("resnet50",),
        fig13_instances=(180,),
        fig13_slos_ms=(100.0,),
        kinds=("pt+dha",),
    )
    cluster = load_cluster(cfg.cluster)
    assert S.run_fig11(cfg, cluster)["fig11"]["resnet50"] == want["fig11"]["resnet50"]
    got = S.run_fig13(cfg, cluster)["100"]["pt+dha"]
    assert got == [p for p in want["fig13_by_slo"]["100"]["pt+dha"] if p[0] == 180]


@pytest.mark.parametrize(
    "method",
    ["exact", "pso-ga", "greedy", "fcfs", pytest.param("shared", marks=needs_pinned_highs)],
)
def test_magicbatch_planned_energy_at_ten_streams(method):
    """Every method's planned energy of the batches and total energy at 10 streams on
    10 GPUs of each type."""
    from hetserve.core.latency import RooflineModel
    from hetserve.experiments.magicbatch import study as S
    from hetserve.planning.magicbatch import random_streams

    cfg = S.MagicBatchConfig()
    cluster = S.edge_cluster(cfg.gpus_per_type)
    lat = RooflineModel(catalog=cluster.catalog)
    seed = cfg.seed * 1000 + 10
    plan, _ = S.plan_method(method, random_streams(10, cfg.models, seed), cluster, lat, seed)
    (point,) = [p for p in shipped("magicbatch")["points"] if p["streams"] == 10]
    want = point["methods"][method]
    obj = plan.meta["objective"]
    assert obj["busy_power_w"] * cfg.duration_s == pytest.approx(
        want["planned_energy_j"], rel=1e-12
    )
    assert obj["total_power_w"] * cfg.duration_s == pytest.approx(
        want["planned_total_j"], rel=1e-12
    )
    assert (obj["placed"], obj["rejected"]) == (want["placed"], want["rejected"])


@pytest.mark.parametrize("which", ["best", "worst"])
def test_rampa_pe_on_its_best_and_worst_stage_counts(which):
    """PE on rampa-base, case 1 (same demand), at the stage counts of its best and worst
    sampled combination: as many services placed as shipped."""
    from hetserve.core.presets import load_cluster
    from hetserve.planning.rampa.aco import AcoParams
    from hetserve.planning.rampa.network import RampaNet
    from hetserve.planning.rampa.place import place_sequence, request_sequence, table_v_services
    from hetserve.planning.rampa.state import ClusterState

    want = shipped("rampa")["fig7"]["rampa-base"]["1"]["pe"]
    stages = dict(zip(sorted(table_v_services()), want[f"{which}_stages"], strict=True))
    state = ClusterState.of(RampaNet.of(load_cluster("rampa-base")))
    placed, _ = place_sequence(state, request_sequence(1, 2000, 0), "pe", stages, AcoParams())
    assert len(placed) == want[which]
