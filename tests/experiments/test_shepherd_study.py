"""hetserve reproduce shepherd: a small end-to-end run, the report, the CLI."""

import dataclasses
import json

import pytest

from hetserve.cli import main
from hetserve.experiments.shepherd import study as S
from hetserve.experiments.shepherd.report import write_shepherd_report

TINY = dataclasses.replace(
    S.quick_config(),
    models=("resnet18", "resnet50", "densenet121", "rs50"),
    n_streams=60,
    loads_rps=(500.0, 6000.0),
    duration_s=3.0,
    slos_s=(0.1, 0.25),
    slo_load_rps=1500.0,
    epoch_s=1.0,
    workers=(12,),
    scale_rps_per_gpu=300.0,
    scale_duration_s=1.0,
    offline_instances=3,
)


@pytest.fixture(scope="module")
def results():
    return S.run_study(TINY, jobs=1)


def test_results_shape(results):
    g = results["goodput_vs_load"]  # the key: MAF-stable, {scheduler: [[x, y]]}
    assert set(g) == set(S.SCHEDULERS)
    for pts in g.values():
        assert len(pts) == 2 and all(0 <= y <= x * 1.05 for x, y in pts)
    for wl in S.WORKLOADS:
        w = results["workloads"][wl]
        assert [p[0] for p in w["goodput_vs_slo"]["flex"]] == [0.1, 0.25]
        assert all(0 <= u <= 1 for pts in w["utilization_vs_load"].values() for _, u in pts)
        assert set(w["ablation_at_highest_load"]) == {"flex", "flex-np", "flex-deadline"}
    two = results["ablation"]["two_stream"]
    assert set(two) == {"90ms", "250ms"}
    # the scenario: preemption pays on the first burst at 90 ms
    assert two["90ms"]["flex"]["first_burst"] >= 3 * two["90ms"]["flex-np"]["first_burst"]
    for name, o in results["offline_optimum"].items():
        assert o["instances"] == 3 and o["served_over_optimum"] <= 1.0, name
    assert set(results["scaling"]) == {"herd", "one-group", "one-gpu"}
    for rows in results["scaling"].values():
        assert rows[0]["workers"] == 12 and rows[0]["us_per_event"] > 0
    s = results["summary"]
    assert set(s) == {*S.WORKLOADS, "two_stream"}
    # FLEX's headline, as far as this small run shows it: never below Clockwork or Nexus
    # at the highest load (here all three still serve everything)
    for wl in S.WORKLOADS:
        top = {x: results["workloads"][wl]["goodput_vs_load"][x][-1][1] for x in S.SCHEDULERS}
        assert top["flex"] >= max(top["clockwork"], top["nexus"]), (wl, top)
    # at low load everyone serves (almost) everything
    for wl in S.WORKLOADS:
        low = {x: results["workloads"][wl]["goodput_vs_load"][x][0] for x in S.SCHEDULERS}
        assert all(y >= 0.9 * x for x, y in low.values())


def test_report_and_json(results, tmp_path):
    path = S.write_results(results, tmp_path)
    again = json.loads(path.read_text())
    assert again["config"]["models"] == list(TINY.models)
    html = write_shepherd_report(again, tmp_path).read_text()
    assert html.count("<img") == 4 and "Ours vs the paper" in html


@pytest.mark.parametrize(
    "args, msg",
    [
        (["--loads", "a,b"], "--loads: expected comma-separated numbers"),
        (["--workers", "0"], "--workers: expected positive numbers"),
        (["--duration", "-1"], "'--duration': -1.0 is not in the range 0.0<x"),
        (["--streams", "0"], "'--streams': 0 is not in the range 1<=x"),
    ],
)
def test_cli_rejects_bad_options(tmp_path, capsys, args, msg):
    rc = main(["reproduce", "shepherd", "--out", str(tmp_path / "o"), "--jobs", "1", *args])
    err = capsys.readouterr().err
    assert rc == 2 and msg in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
