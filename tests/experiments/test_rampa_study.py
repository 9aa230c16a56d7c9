"""``hetserve reproduce rampa``: the study's results on a short run (every figure's data,
the must-hold comparison, the report) and the command's input checks."""

import json

import pytest

from hetserve.cli import main
from hetserve.experiments.rampa import study as S
from hetserve.planning.rampa.place import TABLE_IX, stage_combinations


def test_combinations_sample_is_seeded_and_keeps_the_extremes():
    every = stage_combinations()
    assert S.combinations(None, 0) == every and S.combinations(288, 5) == every
    a, b = S.combinations(12, 3), S.combinations(12, 3)
    assert a == b and len(a) == 12
    assert a[0] == {k: min(v) for k, v in TABLE_IX.items()}
    assert a[1] == {k: max(v) for k, v in TABLE_IX.items()}
    assert len({tuple(c.values()) for c in a}) == 12  # no combination twice
    assert S.combinations(12, 4) != a


@pytest.fixture(scope="module")
def tiny():
    cfg = S.RampaConfig(clusters=("rampa-base",), cases=(1,), combos=2, max_requests=6,
                        serve_s=2.0)  # fmt: skip
    return S.run_study(cfg, jobs=1)


def test_the_study_collects_every_figure(tiny):
    e = tiny["fig7"]["rampa-base"]["1"]
    assert e["rampa"] == 6  # the sequence is capped at 6 requests; all fit
    for m in ("pe", "ncar"):
        assert e[m]["combinations"] == 2
        assert e[m]["worst"] <= e[m]["mean"] <= e[m]["best"] <= 6
        assert len(e[m]["best_stages"]) == len(TABLE_IX)
    # Fig. 8: RAMPA's stage counts, one per placed service
    assert sum(sum(h.values()) for h in tiny["fig8"]["rampa-base"].values()) == 6
    # Figs. 9-10: estimated and served, beside the requirements
    perf = tiny["fig9_10"]
    placed = [s for s, v in perf["rampa"].items() if v["tps"]]
    assert placed
    for s in placed:
        v = perf["rampa"][s]
        assert v["tps"]["min"] >= perf["required"][s]["tps"] * (1 - 1e-9)
        assert v["latency_ms"]["max"] <= perf["required"][s]["latency_ms"] * (1 + 1e-9)
        assert v["measured_latency_ms"] is not None and v["deadlines_met"] == 1.0
    assert set(perf["pe"]["service5"]) == {str(k) for k in TABLE_IX["service5"]}
    # Fig. 11: a time per request tried, against the model's operations
    f11 = tiny["fig11"]["rampa-base"]
    assert sum(v["n"] for v in f11.values()) == 6
    assert all(v["mean_s"] > 0 and v["ops"] > 0 for v in f11.values())
    must = tiny["rampa_not_below_ncar_best"]
    best = e["ncar"]["best"]
    assert must == [{"cluster": "rampa-base", "case": 1, "rampa": 6, "ncar_best": best,
                     "holds": best <= 6}]  # fmt: skip
    rows = S.summary_rows(tiny)
    assert rows[0][1] == f"{int(best <= 6)} of 1 settings"


def test_collect_and_the_verdicts_on_hand_made_runs():
    """Two settings: RAMPA places 3 where NCAR's combinations place 5 and 2 (RAMPA below
    NCAR's best), and 4 where they place 1 and 4 (a tie): best, worst, mean and the
    verdict rows worked out by hand."""
    cfg = S.RampaConfig(clusters=("rampa-high-bw",), cases=(2, 3), combos=2)

    def run(placed):
        return {"placed": placed, "services": [], "times": [], "seconds": 0.0,
                "stages": {"service1": placed}}  # fmt: skip

    done = {("rampa", "rampa-high-bw", 2, -1): run(3), ("rampa", "rampa-high-bw", 3, -1): run(4)}
    for k, ncar, pe in ((2, (5, 2), (1, 1)), (3, (1, 4), (2, 0))):
        for i in range(2):
            done[("ncar", "rampa-high-bw", k, i)] = run(ncar[i])
            done[("pe", "rampa-high-bw", k, i)] = run(pe[i])
    r = S.collect(cfg, done)
    e2, e3 = r["fig7"]["rampa-high-bw"]["2"], r["fig7"]["rampa-high-bw"]["3"]
    assert (e2["ncar"]["best"], e2["ncar"]["worst"], e2["ncar"]["mean"]) == (5, 2, 3.5)
    assert (e3["pe"]["best"], e3["pe"]["worst"], e3["pe"]["mean"]) == (2, 0, 1.0)
    assert (e2["ncar"]["best_stages"], e2["ncar"]["worst_stages"]) == ([5], [2])
    assert [m["holds"] for m in r["rampa_not_below_ncar_best"]] == [False, True]
    rows = {row[0]: row[1] for row in S.summary_rows(r)}
    assert rows["Fig. 7: RAMPA >= NCAR's best of 2 combinations"] == "1 of 2 settings"
    assert rows["Fig. 7: RAMPA over NCAR's best (min / max)"] == "-40.0% / +0.0%"  # 3/5, 4/4
    assert rows["Fig. 7: NCAR's mean >= PE's mean"] == "2 of 2 settings"


def test_cli_writes_results_and_report(capsys, tmp_path):
    code = main(["reproduce", "rampa", "--clusters", "rampa-high-bw", "--cases", "3",
                 "--combos", "1", "--max-requests", "3", "--jobs", "1",
                 "--out", str(tmp_path)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "all 16 settings" in out and "low-delay" in out
    r = json.loads((tmp_path / "results.json").read_text())
    assert r["fig7"]["rampa-high-bw"]["3"]["rampa"] == 3
    assert r["fig8"] == {} and r["fig9_10"] == {} and r["fig11"] == {}  # case 1 only
    assert (tmp_path / "report.html").read_text().count("<img") == 1
    # what produced it
    prov = r["provenance"]
    assert prov["command"].startswith("hetserve reproduce rampa --clusters rampa-high-bw")
    from importlib.metadata import version

    import highspy  # noqa: F401  (installed: its version is recorded)

    assert prov["versions"]["highspy"] == version("highspy")
    assert set(prov["versions"]) >= {"hetserve", "python", "numpy", "scipy", "torch", "ray"}


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--cases", "5"], "--cases: expected cases among 1..4"),
        (["--cases", "x"], "--cases: expected integers"),
        (["--combos", "0"], "'--combos': 0 is not in the range 1<=x<=288"),
        (["--clusters", "hc1-s"], "needs a switched topology"),
        (["--clusters", "nosuch"], "nosuch"),
        (["--serve", "-1"], "--serve"),
        (["--jobs", "0"], "--jobs"),
    ],
)
def test_cli_bad_input_is_one_line(capsys, tmp_path, args, needle):
    code = main(["reproduce", "rampa", *args, "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1
