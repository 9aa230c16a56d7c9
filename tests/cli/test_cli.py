import json

import pytest

from hetserve.cli import main


def run(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_gpus(capsys):
    code, out, _ = run(capsys, "gpus", "--json")
    assert code == 0
    gpus = {g["name"]: g for g in json.loads(out)}
    assert "V100-16GB" in gpus and "H200" in gpus
    assert gpus["L4"]["price_per_hour"] == 0.56004 and gpus["A30"]["price_per_hour"] is None
    code, out, _ = run(capsys, "gpus")
    assert code == 0 and "RTX-A5000" in out and "0.56004" in out


def test_cluster_commands(capsys, tmp_path):
    code, out, _ = run(capsys, "cluster", "show", "hc1-l", "--json")
    assert code == 0 and json.loads(out)["gpu_counts"] == {"L4": 25, "P4": 75}
    code, out, _ = run(capsys, "cluster", "show", "rampa-base")
    assert code == 0 and "16 switches" in out
    code, out, _ = run(capsys, "cluster", "list")
    assert code == 0 and "p3-8xlarge" in out
    f = tmp_path / "c.yaml"
    f.write_text("name: x\nnodes:\n  - {count: 2, gpus: {T4: 2}, nic_gbps: 10}\n")
    code, out, _ = run(capsys, "cluster", "show", str(f))
    assert code == 0 and "4 GPUs" in out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("cluster", "show", "hc9-l"), "unknown cluster preset 'hc9-l'; did you mean"),
        (("cluster", "show", "/nonexistent/c.yaml"), "cannot read cluster file"),
        (("model", "show", "resnet5"), "unknown model 'resnet5'; did you mean"),
        (("model", "ratios", "resnet50", "--gpus", "P4"), "--gpus: give at least two"),
        (("model", "ratios", "resnet50", "--gpus", "P4,L5"), "unknown GPU type 'L5'"),
        (
            (
                "profile",
                "estimate",
                "--cluster",
                "hc1-l",
                "--models",
                "resnet50",
                "--out",
                "x",
                "--batches",
                "0-2",
            ),
            "--batches: expected integers 1..4096",
        ),
        (
            ("trace", "gen", "--process", "poison:rate=3", "--out", "x.csv"),
            "unknown arrival process",
        ),
        (("trace", "stats", "/nonexistent.csv"), "cannot read"),
        (
            (
                "profile",
                "estimate",
                "--cluster",
                "hc1-s",
                "--models",
                "resnet18",
                "--out",
                "/proc/hetserve-no",
            ),
            "/proc/hetserve-no",
        ),
    ],
)
def test_errors_are_one_line_exit_2(capsys, args, needle):
    code, _, err = run(capsys, *args)
    assert code == 2
    assert needle in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_bad_cluster_file_error(capsys, tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("name: x\nnodes:\n  - {count: 2, gpus: {T5: 2}, nic_gbps: 10}\n")
    code, _, err = run(capsys, "cluster", "show", str(f))
    assert code == 2
    assert err.startswith(
        f"hetserve: error: {f}: nodes[0].gpus: unknown GPU type 'T5'; did you mean 'T4'"
    )


def test_usage_error_exit_2(capsys):
    code, _, err = run(capsys, "model", "show")
    assert code == 2 and "Missing argument" in err


def test_model_commands(capsys, tmp_path):
    code, out, _ = run(capsys, "model", "list")
    assert code == 0 and "fcn-resnet101" in out
    code, out, _ = run(capsys, "model", "show", "resnet50", "--blocks", "4", "--json")
    data = json.loads(out)
    assert code == 0 and len(data["blocks"]["bounds"]) == 5
    code, out, _ = run(capsys, "model", "show", "bert-base", "--layers")
    assert code == 0 and "encoder11" in out
    png = tmp_path / "r.png"
    code, out, _ = run(
        capsys, "model", "ratios", "efficientnet-b4", "--gpus", "P4,L4,V100", "--out", str(png)
    )
    assert code == 0 and png.stat().st_size > 5000 and "P4/L4" in out


def test_profile_estimate(capsys, tmp_path):
    out_dir = tmp_path / "ps"
    code, _out, _ = run(
        capsys,
        "profile",
        "estimate",
        "--cluster",
        "hc2-s",
        "--models",
        "resnet50,vit-b16",
        "--out",
        str(out_dir),
        "--batches",
        "1,2,4",
        "--shares",
        "1-2",
        "--blocks",
        "6",
    )
    assert code == 0
    from hetserve.core.profiles import ProfileSet

    ps = ProfileSet.read(out_dir)
    assert set(ps.models()) == {"resnet50", "vit-b16"}
    assert ps.gpus() == ["L4", "T4"]
    assert len(ps.out_bytes["resnet50"]) == 6
    assert {k[3] for k in ps.latency_us} == {1, 2, 4}


def test_trace_gen_and_stats(capsys, tmp_path):
    a = tmp_path / "a.csv"
    gen = (
        "trace",
        "gen",
        "--process",
        "gamma:rate=200,cv=3",
        "--models",
        "resnet50,bert-base",
        "--streams",
        "4",
        "--duration",
        "30",
        "--seed",
        "2",
    )
    code, _, _ = run(capsys, *gen, "--out", str(a))
    assert code == 0
    first = a.read_text()
    run(capsys, *gen, "--out", str(a))
    assert a.read_text() == first  # seeded
    code, out, _ = run(capsys, "trace", "stats", str(a), "--json", "--bin", "1")
    s = json.loads(out)
    assert code == 0 and s["format"] == "arrivals" and s["streams"] == 4
    assert s["mean_rate_rps"] == pytest.approx(200, rel=0.1)
    z = tmp_path / "z.csv"
    code, _, _ = run(
        capsys,
        "trace",
        "gen",
        "--kind",
        "azure2019",
        "--functions",
        "50",
        "--minutes",
        "10",
        "--rate",
        "20",
        "--out",
        str(z),
    )
    assert code == 0
    png = tmp_path / "z.png"
    code, out, _ = run(
        capsys,
        "trace",
        "stats",
        str(z),
        "--models",
        "resnet50,gpt2",
        "--rate",
        "40",
        "--plot",
        str(png),
        "--json",
    )
    s = json.loads(out)
    assert code == 0 and s["format"] == "azure2019"
    assert s["mean_rate_rps"] == pytest.approx(40)
    assert png.exists()


@pytest.mark.xdist_group("ray")  # step 10 serves with a Ray actor: one Ray at a time
def test_demo(capsys, tmp_path):
    code, out, _ = run(capsys, "demo", "--out", str(tmp_path))
    assert code == 0
    assert (tmp_path / "efficientnet-b8-ratios.png").stat().st_size > 5000
    assert (tmp_path / "profiles-hc1" / "latency.csv").exists()
    assert "P4/L4" in out
    # step 8 serves the three plans with the reservation data plane at 0.8 x PPipe's
    # capacity: PPipe's plan holds 99%, NP's cannot
    step8 = out[out.index("8. Serve the plans") :]
    rows = {line.split("│")[1].strip(): line for line in step8.splitlines() if "│" in line}
    att = {p: float(rows[p].split("│")[3].strip().rstrip("%")) for p in ("np", "ppipe")}
    assert att["ppipe"] >= 99.0 > att["np"]
    # step 9: FLEX serves more than Clockwork and Nexus under overload
    step9 = out[out.index("9. Shepherd") :]
    rows = {line.split("│")[1].strip(): line for line in step9.splitlines() if "│" in line}
    good = {
        s: float(rows[s].split("│")[2].replace(",", "")) for s in ("flex", "clockwork", "nexus")
    }
    assert good["flex"] > 1.3 * max(good["clockwork"], good["nexus"])


def test_planning_models_that_do_not_fit_together_is_a_one_line_error(capsys):
    """local-cpu has one device: each model fits alone, not both. Every plan leaves one of
    them without throughput; which one is the solver's choice among equal optima, so the
    error names neither."""
    rc = main(["serve", "--models", "resnet18,bert-base", "--planner", "np", "--emulate"])
    out, err = capsys.readouterr()
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "local-cpu cannot serve resnet18, bert-base at once: each fits alone" in err
    assert "HiGHS" not in out + err  # the solver's banner stays quiet


def test_a_plan_leaving_a_model_unserved_is_a_one_line_error(capsys, tmp_path):
    """A plan file whose entry for a requested model has no pipeline."""
    assert main(["plan", "--planner", "np", "--cluster", "local-cpu", "--models", "resnet18",
                 "--output", str(tmp_path / "p.json")]) == 0  # fmt: skip
    doc = json.loads((tmp_path / "p.json").read_text())
    doc["models"]["bert-base"] = {**doc["models"]["resnet18"], "pipelines": []}
    (tmp_path / "p.json").write_text(json.dumps(doc))
    capsys.readouterr()
    rc = main(["serve", "--plan", str(tmp_path / "p.json"), "--models", "resnet18,bert-base",
               "--emulate", "--check"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "leaves 'bert-base' without workers" in err


def test_custom_scheduler_paths_must_name_a_scheduler_class(capsys, tmp_path):
    rc = main(["simulate", "--cluster", "hc1-s", "--models", "resnet50", "--scheduler",
               "os:system", "--duration", "1", "--rate", "10", "--out", str(tmp_path)])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and "not a scheduler class" in err


def test_a_command_imports_its_own_module_not_the_others():
    """The group imports a command's module when the command is run (``cli.main.Commands``):
    ``hetserve simulate`` in a fresh process loads neither the server nor the benchmark
    client nor the studies; ``--help`` lists every command, each with its summary."""
    import subprocess
    import sys

    others = ["serve", "bench", "reproduce", "verdicts", "place", "demo", "data", "catalog"]
    code = (
        "import sys; from hetserve.cli.main import main\n"
        "try:\n    main(['simulate', '--help'])\nexcept SystemExit:\n    pass\n"
        f"print([m for m in {others!r} if 'hetserve.cli.' + m in sys.modules])\n"
        "print('hetserve.cli.sim' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[-2:] == ["[]", "True"], out.stdout[-2000:]
    listing = subprocess.run(
        [sys.executable, "-m", "hetserve", "--help"], capture_output=True, text=True, timeout=120
    )
    assert listing.returncode == 0, listing.stderr[-2000:]
    from hetserve.cli.main import COMMANDS

    lines = listing.stdout.split("Commands:")[1].splitlines()
    shown = [ln.split()[0] for ln in lines if ln.strip()]
    assert shown == sorted(COMMANDS) and all(len(ln.split()) > 1 for ln in lines if ln.strip())
