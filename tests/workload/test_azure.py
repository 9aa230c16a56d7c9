import numpy as np
import pytest

from hetserve.core.errors import ConfigError, HetserveError
from hetserve.workload.azure import (
    fold_onto_models,
    read_azure2019,
    read_azure2021,
    synthetic_azure2019_counts,
    write_azure2019,
)
from hetserve.workload.stats import plot_rate, trace_stats


def _write_2019(path, rows, minutes=5):
    header = "HashOwner,HashApp,HashFunction,Trigger," + ",".join(
        str(i) for i in range(1, minutes + 1)
    )
    lines = [header] + [f"o{i},a{i},f{i},http," + ",".join(map(str, r)) for i, r in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n")


def test_read_2019_keeps_per_minute_counts(tmp_path):
    rows = [[3, 0, 5, 1, 0], [10, 20, 0, 0, 7], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]]
    p = tmp_path / "invocations_per_function_md.anon.d01.csv"
    _write_2019(p, rows)
    tr = read_azure2019(p, ["resnet50", "bert-base"], 0.1, seed=1)
    assert len(tr.streams) == 3  # the idle function is dropped
    assert tr.duration_s == 300.0
    for k, s in enumerate(tr.streams):
        f = int(s.name.split("/")[1][1:])
        t = tr.time_s[tr.stream_idx == k]
        got = np.bincount((t // 60).astype(int), minlength=5)
        assert got.tolist() == rows[f]
    # fold: busiest function (f1: 37) -> first model, next (f0: 9) -> second
    models = {s.name.split("/")[1]: s.model for s in tr.streams}
    assert models == {"f1": "resnet50", "f0": "bert-base", "f3": "resnet50"}
    again = read_azure2019(p, ["resnet50", "bert-base"], 0.1, seed=1)
    assert np.array_equal(again.time_s, tr.time_s)


def test_read_2019_options(tmp_path):
    p = tmp_path / "d.csv"
    _write_2019(p, [[3, 0, 5, 1, 0], [10, 20, 0, 0, 7], [1, 1, 1, 1, 1]])
    tr = read_azure2019(p, ["m"], 0.1, 0, minutes=(1, 3), top_functions=1)
    assert len(tr.streams) == 1 and len(tr) == 20 and tr.duration_s == 120
    sc = read_azure2019(p, ["m"], 0.1, 0, target_rate_rps=5.0)
    assert sc.rate_rps == pytest.approx(5.0)
    with pytest.raises(HetserveError, match="minute range"):
        read_azure2019(p, ["m"], 0.1, 0, minutes=(3, 9))


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("a,b,c\n", r":1: expected an Azure Functions 2019 header"),
        ("HashOwner,HashApp,HashFunction,Trigger,1,3\n", r":1: minute columns must be 1,2"),
        ("HashOwner,HashApp,HashFunction,Trigger,1,2\no,a,f,http,1\n", r":2: expected 6 fields"),
        (
            "HashOwner,HashApp,HashFunction,Trigger,1,2\no,a,f,http,1,x\n",
            r":2: minute counts must be integers, got 'x'",
        ),
        ("HashOwner,HashApp,HashFunction,Trigger,1,2\no,a,f,http,1,-2\n", r":2: .* >= 0"),
        ("HashOwner,HashApp,HashFunction,Trigger,1,2\n", "no function rows"),
    ],
)
def test_bad_2019_files(tmp_path, text, match):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(ConfigError, match=match) as e:
        read_azure2019(p, ["m"], 0.1, 0)
    assert str(p) in str(e.value)


def test_read_2021(tmp_path):
    p = tmp_path / "AzureFunctionsInvocationTraceForTwoWeeksJan2021.txt"
    p.write_text(
        "app,func,end_timestamp,duration\n"
        "a1,f1,100.5,0.5\na1,f1,103.0,2.0\na2,f9,101.25,0.25\na1,f1,110,0\n"
    )
    tr = read_azure2021(p, ["resnet50"], 0.2)
    # starts: 100, 101, 101, 110 -> shifted to 0, 1, 1, 10
    assert tr.time_s.tolist() == [0.0, 1.0, 1.0, 10.0]
    assert len(tr.streams) == 2 and tr.duration_s == 10.0
    assert tr.per_stream_counts().tolist() == [3, 1]
    assert read_azure2021(p, ["m"], 0.2, target_rate_rps=4.0).rate_rps == pytest.approx(4.0)
    p.write_text("app,func,end_timestamp,duration\na,f,1,-1\n")
    with pytest.raises(ConfigError, match=r":2: duration must be >= 0"):
        read_azure2021(p, ["m"], 0.2)
    p.write_text("app,func,end\n")
    with pytest.raises(ConfigError, match=r":1: header must have columns"):
        read_azure2021(p, ["m"], 0.2)


def test_fold_round_robin():
    assert fold_onto_models(np.array([1, 50, 7, 30]), ["a", "b"]) == ["b", "a", "a", "b"]
    with pytest.raises(HetserveError):
        fold_onto_models(np.array([1]), [])


def test_synthetic_has_azure_like_statistics(tmp_path):
    counts = synthetic_azure2019_counts(300, 120, 200.0, seed=4)
    assert counts.shape == (300, 120)
    assert counts.sum() / (120 * 60) == pytest.approx(200.0, rel=0.05)
    totals = np.sort(counts.sum(1))[::-1]
    assert totals[:30].sum() / totals.sum() > 0.5  # heavy tail: top 10% > half the load
    assert totals[0] / max(1, np.median(totals)) > 30  # orders of magnitude apart
    # minute-to-minute variation well beyond Poisson noise for busy functions
    busy = counts[counts.sum(1) > 60 * 120]
    disp = busy.var(1) / busy.mean(1)
    assert np.median(disp) > 5
    assert np.array_equal(counts, synthetic_azure2019_counts(300, 120, 200.0, seed=4))
    p = tmp_path / "syn.csv"
    write_azure2019(p, counts, seed=4)
    tr = read_azure2019(p, ["resnet50", "vit-b16", "bert-base"], 0.1, seed=0)
    assert len(tr) == counts.sum()
    s = trace_stats(tr)
    assert s["requests"] == counts.sum() and s["per_bin_cv"] > 0.02
    assert s["top10pct_stream_share"] > 0.5
    assert set(s["per_model_requests"]) == {"resnet50", "vit-b16", "bert-base"}
    png = plot_rate(tr, tmp_path / "r.png")
    assert png.stat().st_size > 1000
