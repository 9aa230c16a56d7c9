"""hetserve reproduce ppipe: the study's bookkeeping, a small end-to-end run, the CLI."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetserve.cli import main
from hetserve.core.graph import get_graph
from hetserve.experiments.ppipe import study as S
from hetserve.experiments.ppipe.report import write_study_report


def test_every_paper_model_maps_onto_a_zoo_graph_and_groups_have_three():
    assert len(S.PAPER_MODELS) == 18  # PPipe Table 2
    for zoo in S.PAPER_MODELS.values():
        assert get_graph(zoo).name == zoo
    used = [m for ms in S.PAPER_GROUPS.values() for m in ms]
    assert sorted(used) == sorted(S.PAPER_MODELS)  # each paper model in exactly one group
    assert S.GROUPS["G1"] == ("efficientnet-b8", "fcn-resnet101", "resnet50-fpn")


def test_grid_is_the_papers():
    g = S.StudyConfig().grid()
    assert g[0] == 0.05 and g[-1] == 1.0 and len(g) == 20


@given(st.lists(st.floats(0, 1), min_size=1, max_size=20), st.floats(0.5, 1))
def test_max_before_dip(atts, target):
    pts = [(0.05 * (i + 1), a) for i, a in enumerate(atts)]
    m = S.max_before_dip(pts, target)
    # everything up to m meets the target, and the point after m does not
    assert all(a >= target for lf, a in pts if lf <= m + 1e-12)
    nxt = [a for lf, a in pts if lf > m + 1e-12]
    assert not nxt or nxt[0] < target


@pytest.fixture(scope="module")
def small_results(tmp_path_factory):
    cfg = S.StudyConfig(
        clusters=("hc1-s",),
        groups={"T": ("resnet50", "efficientnet-b4")},
        workloads={"poisson": "poisson", "bursty": "gamma:cv=1.5"},
        duration_s=2.0,
        lf_step=0.25,
        lf_max=1.25,
        ablation_cluster="hc1-s",
    )
    out = tmp_path_factory.mktemp("study")
    res = S.run_study(cfg, jobs=1)
    S.write_results(res, out)
    write_study_report(res, out)
    return res, out


def test_study_results_have_the_documented_shape(small_results):
    _, out = small_results
    data = json.loads((out / "results.json").read_text())
    assert S.clusters_of(data) == ["hc1-s"]
    for p in ("ppipe", "np", "dart-r"):
        for wl in ("poisson", "bursty"):
            lf = data["hc1-s"]["T"][p][wl]
            per = data["per_model"]["hc1-s"]["T"][p][wl]
            assert lf == pytest.approx(sum(per.values()) / len(per))
            assert all(0 <= v <= 1.25 for v in per.values())
            curve = data["curves"]["hc1-s"]["T"][p][wl]
            assert [pt[0] for pt in curve] == sorted(pt[0] for pt in curve)
            # each model's max, written out: every point up to it meets 99%, the next
            # point of the curve (if any) misses it, and it is 0 or a grid point
            grid = [pt[0] for pt in curve]
            for m, v in per.items():
                assert v == 0 or v in grid, (m, v)
                assert all(pt[2][m] >= 0.99 for pt in curve if pt[0] <= v)
                after = [pt[2][m] for pt in curve if pt[0] > v]
                assert not after or after[0] < 0.99
    u = data["utilization"]["hc1-s"]["T"]["ppipe"]["poisson"]
    assert 0 <= u["low"] <= 1 and 0 <= u["high"] <= 1
    assert set(data["ablation"]["hc1-s"]["T"]) >= {"reservation", "reactive"}
    assert data["summary"]["poisson"]["ppipe_over_np"] is not None
    # load factor 1.0 is PPipe's capacity: the baselines plan no more than it
    cap = data["capacity_rps"]["hc1-s"]["T"]
    assert cap["ppipe"] >= cap["np"] - 1e-6 and cap["ppipe"] >= cap["dart-r"] - 1e-6
    assert "<img src='data:image/png;base64," in (out / "report.html").read_text()


def test_summary_rows_ratios(small_results):
    res, _ = small_results
    rows = S.summary_rows(res)
    assert [r[:2] for r in rows] == [["hc1-s", "poisson"], ["hc1-s", "bursty"]]
    for row, wl in zip(rows, ("poisson", "bursty"), strict=True):
        want = {p: res["hc1-s"]["T"][p][wl] for p in ("ppipe", "np", "dart-r")}
        assert row[2:5] == [f"{want[p]:.3f}" for p in ("ppipe", "np", "dart-r")]
        assert want["np"] > 0  # this fixture's NP serves: the ratio is defined
        # the ratio from the per-model maxima, averaged here
        per = res["per_model"]["hc1-s"]["T"]
        mean = {p: sum(per[p][wl].values()) / len(per[p][wl]) for p in ("ppipe", "np")}
        assert row[5] == f"{mean['ppipe'] / mean['np']:.2f}x"


@pytest.mark.parametrize(
    "args, msg",
    [
        (["--groups", "G9"], "unknown group 'G9'"),
        (["--group", "X"], "expected NAME=VALUE"),
        (["--clusters", "hc9-l"], "hc9-l"),
        (["--duration", "0"], "'--duration': 0.0 is not in the range 0.0<x"),
        (["--lf-step", "2"], "--lf-step"),
    ],
)
def test_cli_rejects_bad_options(tmp_path, capsys, args, msg):
    rc = main(["reproduce", "ppipe", "--out", str(tmp_path / "o"), "--jobs", "1", *args])
    err = capsys.readouterr().err
    assert rc == 2 and msg in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_cli_runs_a_custom_group(tmp_path, capsys):
    rc = main(
        [
            "reproduce", "ppipe", "--clusters", "hc1-s", "--group", "T=resnet18",
            "--workload", "poisson=poisson", "--duration", "1", "--lf-step", "0.5",
            "--jobs", "1", "--ablation-cluster", "none", "--out", str(tmp_path / "o"),
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0 and "PPipe/NP" in out
    data = json.loads((tmp_path / "o" / "results.json").read_text())
    assert data["config"]["groups"] == {"T": ["resnet18"]} and data["ablation"] == {}


def test_cli_runs_on_an_imported_profile_set(tmp_path, capsys):
    """--profiles: the study runs on a profile set (here one estimated for hc3-s, which has
    no L4: the SLO falls back to the fastest GPU the set has); without --group the set's
    models form the groups."""
    prof = tmp_path / "prof"
    est = [
        "profile", "estimate", "--cluster", "hc3-s", "--models", "resnet18",
        "--shares", "1,2", "--batches", "1-4", "--out", str(prof),
    ]  # fmt: skip
    assert main(est) == 0
    rc = main(
        [
            "reproduce", "ppipe", "--profiles", str(prof), "--clusters", "hc3-s",
            "--workload", "poisson=poisson", "--duration", "1", "--lf-step", "0.5",
            "--jobs", "1", "--ablation-cluster", "none", "--out", str(tmp_path / "o"),
        ]
    )  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    data = json.loads((tmp_path / "o" / "results.json").read_text())
    assert data["config"]["profiles"] == str(prof)
    assert data["config"]["groups"] == {"G1": ["resnet18"]}
    assert set(data["hc3-s"]["G1"]) == {"ppipe", "np", "dart-r"}
