"""``hetserve serve`` as an operator configures it (checked with --check, nothing served),
the request-count guard, profile sets covering some batches, and the profile cache."""

import json
import logging

import pytest

from hetserve.cli import main

BASE = ["serve", "--cluster", "hc1-s", "--models", "resnet50", "--emulate", "--check",
        "--port", "0"]  # fmt: skip


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_config_file_sets_options_and_the_command_line_wins(capsys, tmp_path):
    cfg = tmp_path / "serve.yaml"
    cfg.write_text(
        "max-request-batch: 16\nmax_pending: 7\nparam: [max_batch=4]\nadmission: false\n"
    )
    code, out, err = run(capsys, *BASE, "--config", str(cfg))
    assert code == 0, err
    assert "up to 16 rows per request" in out and "max pending 7" in out
    assert "admission off" in out and "configuration checked" in out
    code, out, _ = run(capsys, *BASE, "--config", str(cfg), "--max-request-batch", "3")
    assert code == 0 and "up to 3 rows per request" in out


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("port: 70000\n", "port: 70000 is not in the range"),
        ("nosuch: 1\n", "unknown setting 'nosuch'"),
        ("- a\n- b\n", "expected a mapping"),
        ("models: [a, b]\n", "models: expected a single value"),
    ],
)
def test_bad_config_files_name_the_file_and_key(capsys, tmp_path, text, needle):
    cfg = tmp_path / "serve.yaml"
    cfg.write_text(text)
    code, _, err = run(capsys, *BASE, "--config", str(cfg))
    assert code == 2 and needle in err and str(cfg) in err and len(err.splitlines()) == 1


def test_token_from_the_environment_or_a_file(capsys, tmp_path, monkeypatch):
    code, out, _ = run(capsys, *BASE)
    assert code == 0 and "auth: none" in out
    monkeypatch.setenv("HETSERVE_TOKEN", "s3cret")
    code, out, _ = run(capsys, *BASE)
    assert code == 0 and "auth: bearer token (health public)" in out
    monkeypatch.delenv("HETSERVE_TOKEN")
    tok = tmp_path / "token"
    tok.write_text("s3cret\n")
    code, out, _ = run(capsys, *BASE, "--token-file", str(tok), "--public-metrics")
    assert code == 0 and "auth: bearer token (health and metrics public)" in out
    code, _, err = run(capsys, *BASE, "--token-file", str(tok), "--token", "x")
    assert code == 2 and "not both" in err


def test_a_taken_port_and_a_bad_host_are_one_line_errors(capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code, _, err = run(capsys, *BASE, "--port", str(port))
    assert code == 2 and f"--port {port}: cannot listen" in err and len(err.splitlines()) == 1
    code, _, err = run(capsys, *BASE, "--host", "256.1.1.1")
    assert code == 2 and "--host '256.1.1.1'" in err


def test_every_serve_option_has_help_text():
    import click

    from hetserve.cli.serve import serve

    missing = [p.name for p in serve.params if isinstance(p, click.Option) and not p.help]
    assert missing == []


def test_unbounded_work_is_refused_before_it_starts(capsys, tmp_path, monkeypatch):
    args = ["simulate", "--cluster", "hc1-s", "--models", "resnet50", "--rate", "1000",
            "--duration", "1e6", "--out", str(tmp_path / "s")]  # fmt: skip
    code, _, err = run(capsys, *args)
    assert code == 2 and "about 1e+09 requests" in err and "HETSERVE_MAX_REQUESTS" in err
    monkeypatch.setenv("HETSERVE_MAX_REQUESTS", "100")
    args[args.index("1e6")] = "1"
    code, _, err = run(capsys, *args)
    assert code == 2 and "limit of 100" in err


def test_a_profile_set_with_some_batches_plans_and_simulates_within_them(capsys, tmp_path):
    prof = tmp_path / "prof"
    code, _, err = run(capsys, "profile", "estimate", "--cluster", "hc1-s", "--models",
                       "resnet50", "--batches", "1,2", "--out", str(prof))  # fmt: skip
    assert code == 0, err
    for sched in ("fixed-batch", "flex", "nexus", "clockwork"):
        code, _, err = run(capsys, "simulate", "--cluster", "hc1-s", "--models", "resnet50",
                           "--profiles", str(prof), "--rate", "50", "--duration", "2",
                           "--scheduler", sched, "--out", str(tmp_path / sched))  # fmt: skip
        assert code == 0, (sched, err)
        summary = json.loads((tmp_path / sched / "summary.json").read_text())
        assert summary["mean_batch_size"] <= 2


def test_sweep_says_when_a_scheduler_never_reached_the_target(capsys, tmp_path):
    code, out, err = run(capsys, "sweep", "--cluster", "hc1-s", "--models", "resnet50",
                         "--slo", "resnet50=2.5", "--duration", "1", "--schedulers",
                         "fixed-batch", "--resolution", "0.5", "--out", str(tmp_path))  # fmt: skip
    assert code == 0, err
    assert "never reached" in out and "not at 99% attainment at any load factor" in out
    data = json.loads((tmp_path / "sweep.json").read_text())
    assert data["fixed-batch"]["reached_target"] is False


def test_profile_cache_records_when_and_threads_and_remeasures(tmp_path, monkeypatch):
    from hetserve.core.gpus import get_gpu
    from hetserve.core.latency import RooflineModel
    from hetserve.core.profiles import estimate_profiles
    from hetserve.profiling import cache, measure

    monkeypatch.setenv("HETSERVE_CACHE", str(tmp_path))
    calls = []

    def fake_measure(
        models, device, batches, shares, n_blocks, warmup, repeats, threads, model_catalog
    ):
        calls.append(threads)
        ps = estimate_profiles(RooflineModel(), models, [get_gpu("L4")], (1,), tuple(batches))
        return ps, []

    monkeypatch.setattr(measure, "measure_profiles", fake_measure)
    said = []
    folder = cache.measured_profiles(["resnet50"], "cpu", [1, 2], 10, 3, say=said.append)
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["threads"] == 3 and meta["measured_at"].endswith("+00:00") and calls == [3]
    again = cache.measured_profiles(["resnet50"], "cpu", [1, 2], 10, 3, say=said.append)
    assert again == folder and calls == [3]
    assert f"measured {meta['measured_at']} with 3 torch threads" in said[-1]
    cache.measured_profiles(["resnet50"], "cpu", [1, 2], 10, 3, True, say=said.append)
    assert calls == [3, 3]
    other = cache.measured_profiles(["resnet50"], "cpu", [1, 2], 10, 1, say=said.append)
    assert other != folder  # another thread count is another entry


def test_profile_watch_warns_when_real_batches_run_slower_than_the_profile(caplog):
    from hetserve.engine.setup import build_setup
    from hetserve.runtime.metrics import ProfileWatch
    from hetserve.scheduling import ClusterView
    from hetserve.scheduling.protocol import StageReport

    s = build_setup("local-cpu", ["resnet18"])
    view = ClusterView.build(s.cluster, s.latency, s.placement)
    w = s.placement.workers[0].id
    blocks = s.plan.models["resnet18"].pipelines[0].stages[0].blocks
    want = view.stage_latency_s("resnet18", w, 1, blocks)
    watch = ProfileWatch(view, first_n=5)

    def rep(factor):
        return StageReport("stage", 1, "resnet18", 0, w, 0.0, factor * want, ("r",),
                           blocks=blocks)  # fmt: skip

    with caplog.at_level(logging.WARNING, logger="hetserve.server"):
        for _ in range(5):
            watch.observe(rep(1.1))
    assert not caplog.records and watch.verdicts[("resnet18", w)] == pytest.approx(1.1)
    watch = ProfileWatch(view, first_n=5)
    with caplog.at_level(logging.WARNING, logger="hetserve.server"):
        for _ in range(5):
            watch.observe(rep(2.0))
    assert "ran 2.0x slower than the profile says" in caplog.text and "--remeasure" in caplog.text


def test_access_log_lines(caplog):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from hetserve.experiments.shepherd.scenarios import group_setup
    from hetserve.runtime.http import HttpConfig, create_app
    from hetserve.runtime.server import Server, ServerConfig

    srv = Server(group_setup(1, {"resnet50": 1.0}), ServerConfig(scheduler="flex", emulate=True))
    with (
        caplog.at_level(logging.INFO, logger="hetserve.access"),
        TestClient(create_app(srv, config=HttpConfig(access_log=True))) as c,
    ):
        c.get("/v2/models/nope")
        c.get("/v2/models/x%0A127.0.0.1%20%22GET%20%2Fadmin%22%20200%0D")
    assert '"GET /v2/models/nope" 404' in caplog.text
    # a %0A in the URL cannot forge a line: each request is one line, escaped
    lines = [r.getMessage() for r in caplog.records if r.name == "hetserve.access"]
    assert len(lines) == 2 and all("\n" not in m and "\r" not in m for m in lines)
    assert '/v2/models/x\\x0a127.0.0.1 \\x22GET /admin\\x22 200\\x0d" 404' in lines[1]
