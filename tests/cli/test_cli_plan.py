import json

import pytest

from hetserve.cli import main


def run(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_plan_writes_contract_and_simulates(capsys, tmp_path):
    f = tmp_path / "plan.json"
    code, out, _ = run(
        capsys,
        "plan",
        "--cluster",
        "hc2-s",
        "--models",
        "resnet50,vit-b16",
        "--weights",
        "resnet50=0.6,vit-b16=0.4",
        "--slo-scale",
        "5",
        "--slo-ref-gpu",
        "L4",
        "--output",
        str(f),
    )
    assert code == 0 and "normalised throughput" in out
    d = json.loads(f.read_text())
    assert d["planner"] == "ppipe" and d["solve"]["status"] == "optimal"
    assert d["objective"]["normalized_rps"] > 0
    for m in ("resnet50", "vit-b16"):
        mp = d["models"][m]
        assert {"slo_ms", "weight", "planned_rps", "pipelines"} <= set(mp)
        for p in mp["pipelines"]:
            assert {"batch", "planned_rps", "stages"} <= set(p)
            for st in p["stages"]:
                assert {"blocks", "gpu", "share", "instances", "latency_ms", "transfer_ms"} <= set(
                    st
                )
    out_dir = tmp_path / "sim"
    code, _, err = run(
        capsys,
        "simulate",
        "--cluster",
        "hc2-s",
        "--models",
        "resnet50,vit-b16",
        "--plan",
        str(f),
        "--scheduler",
        "fixed-batch",
        "--load-factor",
        "0.3",
        "--duration",
        "1",
        "--out",
        str(out_dir),
    )
    assert code == 0, err
    s = json.loads((out_dir / "summary.json").read_text())
    assert s["config"]["capacity_rps"] == pytest.approx(d["objective"]["normalized_rps"])


def test_np_plan_runs_with_edf_adaptive(capsys, tmp_path):
    f = tmp_path / "np.json"
    assert (
        run(
            capsys,
            "plan",
            "--cluster",
            "hc1-s",
            "--models",
            "resnet50",
            "--planner",
            "np",
            "--output",
            str(f),
        )[0]
        == 0
    )
    code, _, err = run(
        capsys,
        "simulate",
        "--cluster",
        "hc1-s",
        "--models",
        "resnet50",
        "--plan",
        str(f),
        "--scheduler",
        "edf-adaptive",
        "--load-factor",
        "0.5",
        "--duration",
        "1",
        "--out",
        str(tmp_path / "s"),
    )
    assert code == 0, err
    s = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert s["attainment"] > 0.99


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--models", "resnet50", "--slo", "resnet50=0.01"), "no stage configuration meets"),
        (("--models", "resnet50", "--weights", "vit-b16=1"), "not among --models"),
        (
            ("--models", "resnet50", "--planner", "dart-r", "--cluster", "shepherd-12xv100"),
            "dart-r pairs",
        ),
        (("--models", "resnet50", "--slo-margin", "1.5"), "1.5 is not in the range 0.0<=x<=0.99"),
        (("--models", "resnet50", "--slo-ref-gpu", "L5"), "unknown GPU type 'L5'"),
        (("--models", "resnt50"), "did you mean 'resnet50'"),
    ],
)
def test_plan_errors(capsys, tmp_path, args, needle):
    base = ["plan", "--output", str(tmp_path / "p.json")]
    if "--cluster" not in args:
        base += ["--cluster", "hc1-s"]
    code, _, err = run(capsys, *base, *args)
    assert code == 2 and needle in err and err.count("\n") == 1


def test_multistage_plan_with_edf_adaptive_is_a_clear_error(capsys, tmp_path):
    f = tmp_path / "p.json"
    run(capsys, "plan", "--cluster", "hc1-l", "--models", "densenet121", "--output", str(f))
    d = json.loads(f.read_text())
    if all(len(p["stages"]) == 1 for p in d["models"]["densenet121"]["pipelines"]):
        pytest.skip("the optimal plan happens to have no pipelined stage")
    code, _, err = run(
        capsys,
        "simulate",
        "--cluster",
        "hc1-l",
        "--models",
        "densenet121",
        "--plan",
        str(f),
        "--scheduler",
        "edf-adaptive",
        "--duration",
        "1",
        "--out",
        str(tmp_path / "s"),
    )
    assert code == 2 and "runs whole models" in err


def test_profile_set_end_to_end(capsys, tmp_path):
    """profile estimate -> plan --profiles -> simulate --profiles --plan."""
    prof = tmp_path / "prof"
    assert (
        run(
            capsys,
            "profile",
            "estimate",
            "--cluster",
            "hc1-s",
            "--models",
            "resnet50,efficientnet-b0",
            "--shares",
            "1,2",
            "--batches",
            "1-4",
            "--out",
            str(prof),
        )[0]
        == 0
    )
    f = tmp_path / "plan.json"
    code, _, err = run(
        capsys,
        "plan",
        "--cluster",
        "hc1-s",
        "--models",
        "resnet50,efficientnet-b0",
        "--profiles",
        str(prof),
        "--shares",
        "1,2",
        "--batches",
        "1-4",
        "--output",
        str(f),
    )
    assert code == 0, err
    d = json.loads(f.read_text())
    for m in d["models"].values():
        for p in m["pipelines"]:
            assert p["batch"] <= 4 and all(st["share"] in (1, 2) for st in p["stages"])
    code, _, err = run(
        capsys,
        "simulate",
        "--cluster",
        "hc1-s",
        "--models",
        "resnet50,efficientnet-b0",
        "--profiles",
        str(prof),
        "--plan",
        str(f),
        "--scheduler",
        "fixed-batch",
        "--param",
        "max_batch=4",
        "--load-factor",
        "0.3",
        "--duration",
        "1",
        "--out",
        str(tmp_path / "s"),
    )
    assert code == 0, err
    s = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert s["config"]["latency_source"] == "profiles" and s["arrived"] > 0


def test_deepplan_plan_prints_every_kind_and_writes_load_plans(capsys, tmp_path):
    from hetserve.core.plan import Plan

    f = tmp_path / "dp.json"
    args = ["--cluster", "p3-8xlarge", "--models", "resnet50,bert-base", "--kind", "dha"]
    code, out, _ = run(capsys, "plan", "--planner", "deepplan", *args, "--output", str(f))
    assert code == 0
    for kind in ("baseline", "pipeswitch", "dha*", "pt", "pt+dha", "optimal"):
        assert kind in out
    data = json.loads(f.read_text())
    lp = data["load_plans"]["bert-base"]
    # the printed cold starts: the kinds' order holds, and the written kind's is the file's
    row = next(line for line in out.splitlines() if "bert-base" in line)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    cold = dict(zip(("baseline", "pipeswitch", "dha", "pt", "pt+dha", "optimal"),
                    map(float, cells[5:11]), strict=True))  # fmt: skip
    assert cold["optimal"] <= cold["dha"] <= cold["pipeswitch"] <= cold["baseline"]
    assert cold["pt+dha"] <= cold["pt"] <= cold["pipeswitch"]
    assert cold["dha"] == pytest.approx(lp["predicted"]["cold_ms"], abs=0.005)
    assert lp["kind"] == "dha" and lp["gpu"] == "V100-16GB" and lp["layers"] == len(lp["parts"])
    assert 0 in lp["dha"] and lp["predicted"]["cold_ms"] > lp["predicted"]["warm_ms"]
    back = Plan.load(f)
    assert back.load_plans["bert-base"].plan.dha_layers == tuple(lp["dha"])
    assert back.to_json() == data  # the plan file round-trips


def test_deepplan_plan_from_a_layers_csv_and_its_errors(capsys, tmp_path):
    code, out, _ = run(capsys, "profile", "estimate", "--cluster", "p3-8xlarge", "--models",
                       "resnet18", "--batches", "1,2", "--shares", "1", "--layers",
                       "--out", str(tmp_path / "est"))  # fmt: skip
    assert code == 0 and "layers.csv" in out
    csv_path = tmp_path / "est" / "layers.csv"
    f = tmp_path / "dp.json"
    code, _, _ = run(capsys, "plan", "--planner", "deepplan", "--cluster", "p3-8xlarge",
                     "--models", "resnet18", "--layers", str(csv_path), "--batch", "2",
                     "--output", str(f))  # fmt: skip
    assert code == 0
    assert json.loads(f.read_text())["load_plans"]["resnet18"]["layers_source"] == str(csv_path)
    cases = [
        (["--models", "resnet50", "--layers", str(csv_path)], "no layers of model resnet50"),
        (["--models", "resnet18", "--layers", str(csv_path), "--batch", "3"], "at batch 3"),
        (["--models", "resnet18", "--pt-max", "1"], "--kind pt+dha: cluster p3-8xlarge has no"),
        (["--models", "resnet18", "--cluster", "hc1-s"], "has GPU types"),
    ]
    for extra, msg in cases:
        args = ["plan", "--planner", "deepplan", "--cluster", "p3-8xlarge", *extra,
                "--output", str(f)]  # fmt: skip
        code, _, err = run(capsys, *args)
        assert code == 2 and msg in err and len(err.strip().splitlines()) == 1, (extra, err)
    # a load plan naming more layers than the model has is refused when read
    data = json.loads(f.read_text())
    data["load_plans"]["resnet18"]["layers"] = 3
    f.write_text(json.dumps(data))
    from hetserve.core.errors import ConfigError
    from hetserve.core.plan import Plan

    with pytest.raises(ConfigError, match=r"load_plans\.resnet18\.parts: \d+ entries for 3"):
        Plan.load(f)


def test_deepplan_refuses_missing_layers_in_a_csv_and_extra_ones_in_a_plan(capsys, tmp_path):
    from hetserve.core.gpus import DEFAULT_CATALOG
    from hetserve.core.layertable import estimate_layer_rows, get_layer_table, write_layers_csv

    rows = estimate_layer_rows(get_layer_table("resnet18"), DEFAULT_CATALOG.get("V100"))
    short = write_layers_csv(rows[:-2], tmp_path / "short.csv")
    f = tmp_path / "dp.json"
    args = ["plan", "--planner", "deepplan", "--cluster", "p3-8xlarge", "--models", "resnet18"]
    code, _, err = run(capsys, *args, "--layers", str(short), "--output", str(f))
    assert code == 2 and "short.csv: model resnet18 has 50 layers; its layer table has 52" in err
    code, _, _ = run(capsys, "plan", "--planner", "deepplan", "--cluster", "p3-8xlarge",
                     "--models", "resnet18", "--output", str(f))  # fmt: skip
    assert code == 0
    data = json.loads(f.read_text())
    lp = data["load_plans"]["resnet18"]
    lp["parts"] += [0, 0]
    lp["layers"] += 2
    f.write_text(json.dumps(data))
    code, _, err = run(capsys, "simulate", "--cluster", "p3-8xlarge", "--models", "resnet18",
                       "--plan", str(f), "--scheduler", "coldstart", "--rate", "5",
                       "--duration", "1", "--out", str(tmp_path / "sim"))  # fmt: skip
    assert code == 2 and "load_plans.resnet18 has 54 layers; the model's layer table has 52" in err


def test_magicbatch_plan_from_random_streams_and_a_stream_file(capsys, tmp_path):
    from hetserve.core.plan import Plan

    f = tmp_path / "mb.json"
    code, out, _ = run(capsys, "plan", "--planner", "magicbatch", "--cluster", "magicbatch-edge",
                       "--models", "resnet101,densenet121", "--random", "3", "--seed", "1",
                       "--output", str(f))  # fmt: skip
    assert code == 0 and "3 of 3 streams placed" in out
    data = json.loads(f.read_text())
    a = data["assignments"]["s0000"]
    assert a["gpu"].split("#")[0] in ("GTX-1080-Ti", "RTX-2080-Ti", "RTX-3090")
    assert set(a["options"]) == {"GTX-1080-Ti", "RTX-2080-Ti", "RTX-3090"}
    assert a["latency_ms"] <= a["deadline_ms"]
    assert Plan.load(f).to_json() == data  # round-trips
    streams = tmp_path / "s.csv"
    streams.write_text("name,model,rate_rps,deadline_ms\ncam1,resnet101,20,300\n"
                       "cam2,densenet121,40,150\n")  # fmt: skip
    mb = ["plan", "--planner", "magicbatch", "--cluster", "magicbatch-edge"]
    code, out, _ = run(capsys, *mb, "--streams", str(streams), "--method", "shared",
                       "--output", str(f))  # fmt: skip
    assert code == 0 and "2 of 2 streams placed" in out
    cases = [
        ("cam1,resnet101,0,300", "stream cam1: field 'rate_rps': expected a rate > 0"),
        ("cam1,resnet101,20,abc", "stream cam1: field 'deadline_ms': expected a deadline > 0"),
        ("cam1,nosuch,20,300", "unknown model 'nosuch'"),
        ("cam1,resnet101,20", "s.csv:2: expected 4 fields"),
        ("cam1,resnet101,20,0.5", "stream cam1 (resnet101, 20 req/s, deadline 0.5 ms): no GPU"),
    ]
    for line, msg in cases:
        streams.write_text("name,model,rate_rps,deadline_ms\n" + line + "\n")
        code, _, err = run(capsys, *mb, "--streams", str(streams), "--output", str(f))
        assert code == 2 and msg in err and len(err.strip().splitlines()) == 1, (line, err)
    code, _, err = run(capsys, "plan", "--cluster", "hc1-s", "--models", "resnet50", "--method",
                       "shared", "--output", str(f))  # fmt: skip
    assert code == 2 and "--method: options of --planner magicbatch only" in err


def test_magicbatch_plan_simulates_with_its_scheduler_and_tf_serving(capsys, tmp_path):
    streams = tmp_path / "s.csv"
    streams.write_text("name,model,rate_rps,deadline_ms\ncam1,vgg16,20,300\n"
                       "cam2,googlenet,40,150\ncam3,resnet101,10,400\n")  # fmt: skip
    f = tmp_path / "mb.json"
    code, _, _ = run(capsys, "plan", "--planner", "magicbatch", "--cluster", "magicbatch-edge",
                     "--streams", str(streams), "--output", str(f))  # fmt: skip
    assert code == 0
    sim = ["simulate", "--cluster", "magicbatch-edge", "--models", "vgg16,googlenet,resnet101",
           "--plan", str(f), "--duration", "10"]  # fmt: skip
    code, _, _ = run(capsys, *sim, "--scheduler", "magicbatch", "--out", str(tmp_path / "a"))
    assert code == 0
    s = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert s["attainment"] == 1.0 and s["energy_j"] > 0
    # the streams' own rates and deadlines: 70 req/s in all
    assert s["config"]["rates_rps"] == {"vgg16": 20.0, "googlenet": 40.0, "resnet101": 10.0}
    reqs = (tmp_path / "a" / "requests.csv").read_text().splitlines()
    assert {r.split(",")[1] for r in reqs[1:]} == {"cam1", "cam2", "cam3"}
    code, _, _ = run(capsys, *sim, "--scheduler", "fixed-batch", "--param", "max_batch=32",
                     "--param", "max_queue_delay_s=0.03", "--out", str(tmp_path / "b"))  # fmt: skip
    assert code == 0
    code, _, err = run(capsys, *sim, "--workload", "synthetic", "--out", str(tmp_path / "c"))
    assert code == 2 and "a plan with stream assignments" in err
    code, _, err = run(capsys, "simulate", "--cluster", "magicbatch-edge", "--models", "vgg16",
                       "--scheduler", "magicbatch", "--duration", "1", "--rate", "5",
                       "--out", str(tmp_path / "d"))  # fmt: skip
    assert code == 2 and "magicbatch: the plan has no stream assignments" in err


def test_magicbatch_plans_from_a_profile_set_s_energy(capsys, tmp_path):
    """Measured energy plugs in through energy.csv: double the RTX 2080 Ti's energy in a
    profile set and the stream moves to the RTX 3090."""
    prof = tmp_path / "prof"
    code, _, _ = run(capsys, "profile", "estimate", "--cluster", "magicbatch-edge",
                     "--models", "googlenet", "--batches", "1-64", "--shares", "1",
                     "--out", str(prof))  # fmt: skip
    assert code == 0
    streams = tmp_path / "s.csv"
    streams.write_text("name,model,rate_rps,deadline_ms\ncam1,googlenet,40,200\n")
    f = tmp_path / "p.json"
    mb = ["plan", "--planner", "magicbatch", "--cluster", "magicbatch-edge", "--profiles",
          str(prof), "--streams", str(streams), "--output", str(f)]  # fmt: skip
    assert run(capsys, *mb)[0] == 0
    assert json.loads(f.read_text())["assignments"]["cam1"]["gpu"] == "RTX-2080-Ti#0"
    lines = (prof / "energy.csv").read_text().splitlines()
    out = [lines[0]]
    for line in lines[1:]:
        cells = line.split(",")
        if cells[1] == "RTX-2080-Ti":
            cells[-1] = str(2 * float(cells[-1]))
        out.append(",".join(cells))
    (prof / "energy.csv").write_text("\n".join(out) + "\n")
    assert run(capsys, *mb)[0] == 0
    assert json.loads(f.read_text())["assignments"]["cam1"]["gpu"] == "RTX-3090#0"


def test_a_cluster_that_parks_idle_gpus(capsys, tmp_path):
    """``park_idle_gpus`` in a cluster file: the MagicBatch plan counts unused GPUs at zero
    (unless --no-park-idle), and the simulator charges them nothing."""
    yaml = tmp_path / "edge.yaml"
    yaml.write_text("name: edge2\npark_idle_gpus: true\nnodes:\n  - name: e\n    nic_gbps: 10\n"
                    "    gpus: {GTX-1080-Ti: 2, RTX-2080-Ti: 2, RTX-3090: 2}\n")  # fmt: skip
    f = tmp_path / "p.json"
    plan = ["plan", "--planner", "magicbatch", "--cluster", str(yaml), "--models", "googlenet",
            "--random", "2", "--output", str(f)]  # fmt: skip
    code, out, _ = run(capsys, *plan)
    assert code == 0 and "idle GPUs parked" in out
    parked = json.loads(f.read_text())["objective"]["total_power_w"]
    code, out, _ = run(capsys, *plan, "--no-park-idle")
    assert code == 0 and "idle GPUs idling" in out
    idling = json.loads(f.read_text())["objective"]["total_power_w"]
    assert idling > parked + 4 * 15  # four unused GPUs, 15 W or more each
    run(capsys, *plan)
    code, _, _ = run(capsys, "simulate", "--cluster", str(yaml), "--models", "googlenet",
                     "--plan", str(f), "--scheduler", "magicbatch", "--duration", "10",
                     "--out", str(tmp_path / "sim"))  # fmt: skip
    assert code == 0
    s = json.loads((tmp_path / "sim" / "summary.json").read_text())
    assert s["energy_j"] / 10 == pytest.approx(parked, rel=0.1)


def test_planner_registry_errors_are_one_line(capsys, tmp_path):
    """Every planner by name: a planner's option given to another, a missing required
    option, models given to RAMPA, an unknown planner; one line each, exit status 2."""
    f = str(tmp_path / "p.json")
    cases = [
        (["--planner", "herd", "--cluster", "shepherd-12xv100", "--models", "resnet50"],
         "--planner herd: give the offered load with --rate"),
        (["--planner", "ppipe", "--cluster", "hc1-s", "--models", "resnet50", "--g-max", "5"],
         "--g-max: options of --planner herd only"),
        (["--planner", "deepplan", "--cluster", "p3-8xlarge", "--models", "resnet18",
          "--stages", "2,3,2,4,8,5"], "--stages: options of --planner rampa, pe, ncar only"),
        (["--planner", "rampa", "--cluster", "rampa-base", "--models", "resnet50"],
         "places RAMPA's services (Table V), not --models"),
        (["--planner", "pe", "--cluster", "rampa-base"], "give the stage counts with --stages"),
        (["--planner", "herd", "--cluster", "hc1-s", "--models", "resnet50", "--rate", "9"],
         "groups GPUs of one type; hc1-s has"),
        (["--planner", "ppipee", "--cluster", "hc1-s", "--models", "resnet50"], "ppipe"),
    ]  # fmt: skip
    for args, msg in cases:
        code, _, err = run(capsys, "plan", *args, "--output", f)
        assert code == 2 and msg in err and len(err.strip().splitlines()) == 1, (args, err)


def test_a_plan_file_alone_configures_serve(capsys, tmp_path):
    """serve --plan without --models or --scheduler: the plan's models and its scheduler
    (HERD's plan is served by flex, RAMPA's by fixed-batch over its pinned GPUs)."""
    herd = tmp_path / "herd.json"
    assert (
        run(
            capsys,
            "plan",
            "--planner",
            "herd",
            "--cluster",
            "shepherd-12xv100",
            "--models",
            "resnet50,bert-base",
            "--rate",
            "100",
            "--output",
            str(herd),
        )[0]
        == 0
    )
    code, out, err = run(capsys, "serve", "--cluster", "shepherd-12xv100", "--plan", str(herd),
                         "--emulate", "--check", "--port", "0")  # fmt: skip
    assert code == 0, err
    assert "with flex" in out and "resnet50" in out and "bert-base" in out
    rampa = tmp_path / "rampa.json"
    assert run(capsys, "plan", "--planner", "rampa", "--cluster", "rampa-base",
               "--max-requests", "2", "--output", str(rampa))[0] == 0  # fmt: skip
    code, out, err = run(capsys, "serve", "--cluster", "rampa-base", "--plan", str(rampa),
                         "--emulate", "--check", "--port", "0")  # fmt: skip
    assert code == 0, err
    assert "with fixed-batch" in out and "p000-" in out
    # a binding on a GPU the cluster lacks is refused, naming the plan file
    data = json.loads(rampa.read_text())
    data["binding"]["workers"][0]["gpu_id"] = "nowhere/gpu0"
    rampa.write_text(json.dumps(data))
    code, _, err = run(capsys, "simulate", "--cluster", "rampa-base", "--plan", str(rampa),
                       "--rate", "5", "--duration", "1", "--out", str(tmp_path / "x"))  # fmt: skip
    assert code == 2 and f"{rampa}: binding: worker" in err, err
    assert "nowhere/gpu0" in err and len(err.strip().splitlines()) == 1, err
