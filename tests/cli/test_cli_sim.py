import json

import pytest

from hetserve.cli import main


def run(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


BASE = ("--cluster", "hc1-s", "--models", "resnet50,efficientnet-b0")


def test_simulate_writes_contract_files(capsys, tmp_path):
    out = tmp_path / "run"
    code, text, _ = run(
        capsys,
        "simulate",
        *BASE,
        "--scheduler",
        "edf-adaptive",
        "--load-factor",
        "0.8",
        "--duration",
        "2",
        "--out",
        str(out),
    )
    assert code == 0 and "attainment" in text
    s = json.loads((out / "summary.json").read_text())
    for key in (
        "attainment",
        "goodput_rps",
        "offered_rps",
        "latency_ms",
        "utilization",
        "energy_j",
        "dropped",
        "late",
        "per_model",
    ):
        assert key in s
    assert set(s["latency_ms"]) >= {"p50", "p90", "p99"}
    assert set(s["utilization"]) == {"L4", "P4"}
    assert set(s["per_model"]) == {"resnet50", "efficientnet-b0"}
    header = (out / "requests.csv").read_text().splitlines()[0]
    assert header.startswith("id,stream,model,arrival_s,deadline_s,dispatch_s,start_s,finish_s")
    assert (out / "batches.csv").read_text().startswith("batch,model,stage,worker")
    workers = (out / "workers.csv").read_text().splitlines()
    assert workers[0] == "worker,gpu,share,busy_s,utilization,energy_j" and len(workers) == 17
    assert sum(s["energy_by_gpu_type_j"].values()) == pytest.approx(s["energy_j"])
    # each type between idle and board power for the whole run: 4 L4 (16 W idle, 72 W
    # board) and 12 P4 (7 W, 75 W) for the simulated seconds
    t = s["simulated_s"]
    assert t >= 2.0
    for gpu, n, idle_w, tdp_w in (("L4", 4, 16.0, 72.0), ("P4", 12, 7.0, 75.0)):
        assert n * idle_w * t <= s["energy_by_gpu_type_j"][gpu] <= n * tdp_w * t, gpu
    code, text, _ = run(capsys, "report", str(out))
    assert code == 0 and (out / "report.html").stat().st_size > 10_000


def test_simulate_same_seed_identical_requests(capsys, tmp_path):
    for k in range(2):
        run(
            capsys,
            "simulate",
            *BASE,
            "--rate",
            "3000",
            "--duration",
            "1",
            "--workload",
            "mmpp",
            "--jitter-cv",
            "0.2",
            "--seed",
            "4",
            "--out",
            str(tmp_path / f"r{k}"),
        )
    a = (tmp_path / "r0" / "requests.csv").read_bytes()
    assert a == (tmp_path / "r1" / "requests.csv").read_bytes()


@pytest.mark.parametrize("workload", ["gamma:cv=2", "synthetic", "azure2019"])
def test_simulate_workloads(capsys, tmp_path, workload):
    if workload == "azure2019":
        f = tmp_path / "az.csv"
        assert (
            run(
                capsys,
                "trace",
                "gen",
                "--kind",
                "azure2019",
                "--functions",
                "30",
                "--minutes",
                "2",
                "--rate",
                "50",
                "--out",
                str(f),
            )[0]
            == 0
        )
        workload = f"azure2019:{f}"
    code, _, err = run(
        capsys,
        "simulate",
        *BASE,
        "--workload",
        workload,
        "--rate",
        "2000",
        "--duration",
        "60" if "azure" in workload or workload == "synthetic" else "2",
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 0, err
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert s["offered_rps"] == pytest.approx(2000, rel=0.15)


def test_sweep_and_report(capsys, tmp_path):
    code, _text, _ = run(
        capsys,
        "sweep",
        "--cluster",
        "hc1-s",
        "--models",
        "resnet50",
        "--schedulers",
        "fixed-batch,edf-adaptive",
        "--duration",
        "1",
        "--resolution",
        "0.1",
        "--out",
        str(tmp_path),
    )
    assert code == 0
    sw = json.loads((tmp_path / "sweep.json").read_text())
    for name in ("fixed-batch", "edf-adaptive"):
        assert sw[name]["max_load_factor"] >= 0
        assert all(len(p) == 2 for p in sw[name]["curve"])
    # fixed-batch never drops and fills batches it cannot finish in time: worse
    assert sw["edf-adaptive"]["max_load_factor"] > sw["fixed-batch"]["max_load_factor"]
    assert run(capsys, "report", str(tmp_path))[0] == 0
    assert "Load-factor search" in (tmp_path / "report.html").read_text()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("simulate", *BASE, "--scheduler", "fifo", "--out", "x"), "unknown scheduler 'fifo'"),
        (("simulate", *BASE, "--workload", "weibull", "--out", "x"), "unknown kind 'weibull'"),
        (
            ("simulate", *BASE, "--rate", "10", "--load-factor", "1", "--out", "x"),
            "exactly one of --rate and --load-factor",
        ),
        (("simulate", *BASE, "--slo", "resnet50=abc", "--out", "x"), "--slo: expected"),
        (("simulate", *BASE, "--slo", "vit-b16=50", "--out", "x"), "not among --models"),
        (("simulate", *BASE, "--plan", "/nonexistent.json", "--out", "x"), "cannot read plan"),
        (("simulate", *BASE, "--param", "max_batch", "--out", "x"), "expected key=value"),
        (("simulate", *BASE, "--workload", "azure2019:/nope.csv", "--out", "x"), "cannot read"),
        (("simulate", *BASE, "--workload", "gamma:2", "--out", "x"), "e.g. gamma:cv=2"),
        (
            ("simulate", *BASE, "--workload", "poisson:rate=5", "--rate", "9", "--out", "x"),
            "leave rate= out",
        ),
        (("sweep", *BASE, "--seeds", "a", "--out", "x"), "--seeds: expected integers"),
        (("report", "/nonexistent-dir"), "not a folder"),
    ],
)
def test_simulate_errors(capsys, args, needle):
    code, _, err = run(capsys, *args)
    assert code == 2 and needle in err and err.count("\n") == 1


def test_trace_gen_and_simulate_take_one_grammar(capsys, tmp_path):
    """A process trace gen writes (rate in the spec) is one simulate takes (rate given by
    --rate): the same process, so the same arrivals for one stream at the same seed."""
    spec = "onoff:on_s=0.5,off_s=1.5"
    a = tmp_path / "a.csv"
    args = ("trace", "gen", "--process", f"{spec},rate=40", "--duration", "3", "--out", str(a))
    assert run(capsys, *args)[0] == 0
    code, _, err = run(
        capsys, "simulate", "--cluster", "hc1-s", "--models", "resnet50", "--workload", spec,
        "--rate", "40", "--duration", "3", "--seed", "0", "--out", str(tmp_path / "r"),
    )  # fmt: skip
    assert code == 0, err
    gen = [line.split(",")[0] for line in a.read_text().splitlines()[1:]]
    sim = [
        line.split(",")[3]
        for line in (tmp_path / "r" / "requests.csv").read_text().splitlines()[1:]
    ]
    assert len(gen) == len(sim) > 0
    assert [float(x) for x in gen] == pytest.approx([float(x) for x in sim], abs=1e-9)


def test_attainment_is_rounded_down_so_a_miss_never_reads_100_percent():
    from hetserve.cli.views import attainment_text

    assert attainment_text(1.0) == "100.00%"
    assert attainment_text(39_999 / 40_000) == "99.99%"
    assert attainment_text(0.9999) == "99.99%"  # (9998.99999... in floating point)
    assert attainment_text(0.5) == "50.00%" and attainment_text(0.0) == "0.00%"
