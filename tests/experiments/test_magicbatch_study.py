"""``hetserve reproduce magicbatch``: the energy model's Fig. 2 shape, the study's
must-holds on a small instance, the CLI and its report."""

import itertools
import json

import pytest

from hetserve.cli import main
from hetserve.core.latency import RooflineModel
from hetserve.experiments.magicbatch import study as S

TINY = S.MagicBatchConfig(
    gpus_per_type=2,
    stream_counts=(2, 4, 6),
    duration_s=5.0,
    capacity_counts=(4,),
    capacity_duration_s=1.0,
    capacity_resolution=0.25,
)


@pytest.fixture(scope="module")
def fig2():
    cluster = S.edge_cluster(1)
    return S.run_fig2(S.MagicBatchConfig(), cluster, RooflineModel(catalog=cluster.catalog))


def test_fig2_energy_falls_and_flattens_throughput_saturates_latency_grows(fig2):
    for model, per in fig2["fig2"].items():
        for gpu, pts in per.items():
            assert [p[0] for p in pts] == list(S.FIG2_BATCHES), (model, gpu)  # all fit
            thr, lat, epr = ([p[k] for p in pts] for k in (1, 2, 3))
            assert all(a < b for a, b in itertools.pairwise(lat)), (model, gpu)
            assert all(a <= b * 1.0001 for a, b in itertools.pairwise(thr)), (model, gpu)
            assert all(a >= b * 0.9999 for a, b in itertools.pairwise(epr)), (model, gpu)
            assert epr[0] > 1.1 * epr[-1]  # batching saves energy per request...
            assert epr[-2] / epr[-1] < 1.02  # ...and the curve flattens (128 -> 256)
            assert thr[-1] / thr[-2] < 1.05  # throughput saturates


def test_fig2_the_newer_gpu_is_not_always_the_most_efficient(fig2):
    """The paper's key finding: the RTX 2080 Ti and RTX 3090 curves cross."""
    pairs = {(c["model"], tuple(c["gpus"])) for c in fig2["fig2_crossings"]}
    assert any(g == ("RTX-2080-Ti", "RTX-3090") for _, g in pairs)
    f2 = fig2["fig2"]["densenet121"]
    e = {g: {int(p[0]): p[3] for p in pts} for g, pts in f2.items()}
    assert e["RTX-2080-Ti"][1] < e["RTX-3090"][1]  # the older GPU wins at batch 1
    assert e["RTX-3090"][256] < e["RTX-2080-Ti"][256]  # the newer one at batch 256


def test_memory_bounds_the_batch():
    cluster = S.edge_cluster(1)
    lat = RooflineModel(catalog=cluster.catalog)
    g = cluster.catalog.get("GTX-1080-Ti")
    assert S.fits_memory(lat, "vgg16", g, 256)
    assert not S.fits_memory(lat, "vgg16", g, 4096)


@pytest.fixture(scope="module")
def tiny():
    return S.run_study(TINY)


def test_study_must_holds(tiny):
    s = tiny["summary"]
    for m, c in s["exact_vs"].items():  # exact <= every heuristic on every instance
        assert c["exact_not_better_at"] == [], m
    assert s["psoga_gap_worst"] is not None and s["psoga_gap_worst"] >= 0
    assert s["shared_over_exact_at"] == []  # shared never above exact
    assert s["shared_min_attainment"] == 1.0  # and every deadline met in the simulator
    assert s["energy_saved_min"] > 0  # MagicBatch spends less than TF-Serving


def test_study_results_shapes(tiny):
    for m in S.METHODS:
        pts = tiny["fig5"][m]
        assert [p[0] for p in pts] == [2, 4, 6]
        assert all(len(p) == 3 and p[1] > 0 and p[2] > 0 for p in pts)
    assert set(tiny["fig6"]) == {"magicbatch", "tf-serving"}
    assert [p[0] for p in tiny["fig6_capacity"]["magicbatch"]] == [4]
    rows = {r[0]: r[1] for r in S.summary_rows(tiny)}
    gaps = [p["methods"]["pso-ga"]["planned_energy_j"] / p["methods"]["exact"]["planned_energy_j"]
            - 1 for p in tiny["points"]]  # fmt: skip
    assert rows["PSO-GA's energy over exact's (mean / worst)"] == (
        f"{100 * sum(gaps) / len(gaps):.2f}% / {100 * max(gaps):.2f}%"
    )


def test_cli_writes_results_report_and_the_summary(capsys, tmp_path):
    code = main(["reproduce", "magicbatch", "--gpus-per-type", "1", "--streams", "2,3",
                 "--duration", "3", "--out", str(tmp_path)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    r = json.loads((tmp_path / "results.json").read_text())
    # the measured saving, worked out here from Fig. 6's energies, is what is printed
    mb, tf = r["fig6"]["magicbatch"], r["fig6"]["tf-serving"]
    saved = [1 - a[1] / b[1] for a, b in zip(mb, tf, strict=True)]
    assert all(a[1] < b[1] for a, b in zip(mb, tf, strict=True))  # MagicBatch spends less
    assert r["summary"]["energy_saved_min"] == pytest.approx(min(saved))
    assert f"{100 * min(saved):.1f}% / {100 * sum(saved) / len(saved):.1f}%" in out
    assert "31.3%" in out  # beside the paper's figure
    assert set(r["fig5"]) == set(S.METHODS)
    assert [p[0] for p in r["fig6"]["tf-serving"]] == [2, 3]
    html = (tmp_path / "report.html").read_text()
    assert html.count("<img") == 3 and "Fig. 6" in html


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--streams", "x"], "--streams: expected integers"),
        (["--streams", "0"], "expected counts in 1..10000"),
        (["--duration", "0"], "--duration"),
    ],
)
def test_cli_bad_input_is_one_line(capsys, tmp_path, args, needle):
    code = main(["reproduce", "magicbatch", *args, "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1
