"""hetserve reproduce deepplan: a small end-to-end run, the report, the CLI."""

import dataclasses
import json

import pytest

from hetserve.cli import main
from hetserve.experiments.deepplan import study as S
from hetserve.experiments.deepplan.report import write_deepplan_report
from hetserve.experiments.report import write_results

TINY = dataclasses.replace(
    S.quick_config(),
    fig11_models=("resnet50", "bert-base"),
    fig12_models=("resnet50",),
    fig12_batches=(1, 4),
    fig13_instances=(60, 180),
    fig13_slos_ms=(100.0,),
    fig13_duration_s=5.0,
    fig15_minutes=2,
    fig15_functions=270,
)


@pytest.fixture(scope="module")
def results():
    steps = []
    r = S.run_study(TINY, lambda msg, k, n: steps.append((k, n)))
    assert steps[-1] == (S.study_steps(TINY), S.study_steps(TINY))
    return r


def test_fig11_orders_the_kinds_and_matches_the_paper_s_shape(results):
    f11 = results["fig11"]
    for m, c in f11.items():
        assert c["optimal"] <= c["dha"] <= c["pipeswitch"] <= c["baseline"], m
        assert c["pt+dha"] <= c["pt"] <= c["pipeswitch"], m
    assert results["summary"]["bert_base_speedup"] > 1.5
    gap = results["algorithm1_gap"]
    assert set(gap) >= {"resnet50", "bert-base", "gpt2-medium"}
    assert all(g["gap_pct"] >= -1e-9 for g in gap.values())  # the optimum is optimal


def test_table4_two_cold_starts_at_once_are_slower_but_beat_pipeswitch(results):
    for m, (ps, one, two) in results["table4"].items():
        assert one < two, m  # sharing the host links costs
        assert two < ps, m  # yet two PT+DHA cold starts at once beat PipeSwitch alone
        assert one == pytest.approx(results["fig11"][m]["pt+dha"], rel=1e-9)
        assert ps == pytest.approx(results["fig11"][m]["pipeswitch"], rel=1e-9)


def test_fig13_deepplan_keeps_more_instances_and_more_goodput(results):
    f13 = results["fig13"]
    ps, dp = f13["pipeswitch"][-1], f13["pt+dha"][-1]
    assert ps[0] == dp[0] == 180
    assert dp[2] > ps[2] and dp[3] < ps[3]  # goodput up, cold starts down
    assert f13["dha"][-1][4] > ps[4]  # instances resident
    assert all(p[2] == 1.0 for p in (f13["pipeswitch"][0], f13["dha"][0]))  # 60 fit


def test_fig15_deepplan_beats_pipeswitch(results):
    g = results["summary"]["fig15_goodput"]
    assert g["pt+dha"] > g["pipeswitch"] and g["dha"] > g["pipeswitch"]
    assert len(results["fig15"]["offered_per_minute"]) == 2


def test_results_and_report_are_written(results, tmp_path):
    path = write_results(results, tmp_path)
    again = json.loads(path.read_text())
    assert set(again["fig11"]["bert-base"]) >= {"pipeswitch", "dha", "pt+dha", "optimal"}
    assert again["fig13"]["dha"][0][:1] == [60]
    html = write_deepplan_report(again, tmp_path).read_text()
    assert html.count("<img") == 4 and "Table 4" in html


def test_the_command_writes_and_prints(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(S, "quick_config", lambda: TINY)
    rc = main(["reproduce", "deepplan", "--quick", "--minutes", "1", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0 and "BERT-Base: PT+DHA speed-up" in out
    assert (tmp_path / "results.json").exists() and (tmp_path / "report.html").exists()
    f11 = json.loads((tmp_path / "results.json").read_text())["fig11"]["bert-base"]
    speedup = f11["pipeswitch"] / f11["pt+dha"]
    assert speedup > 1.5 and f"{speedup:.2f}x" in out  # the printed figure is the computed one
    bad = tmp_path / "bad.csv"
    bad.write_text("model,layer,kind,param_bytes,load_us,exec_gpu_us,exec_host_us\nm,0,L,1,x,1,1\n")
    rc = main(["reproduce", "deepplan", "--quick", "--layers", str(bad), "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "bad.csv:2: field 'load_us'" in err
