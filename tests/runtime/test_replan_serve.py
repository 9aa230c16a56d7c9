"""Re-planning on a live server (``serve --replan``): an operator's plan, Triton's load and
unload, and the controller's own re-plans switch the plan while requests keep flowing,
and every request still gets exactly one answer. Emulated workers (the modelled executor
on the wall clock) on ``hc1-s``, with the ppipe plans of the control tests' scenario."""

from __future__ import annotations

import asyncio
import random

import pytest

from hetserve.control.controller import RateController
from hetserve.core.errors import HetserveError
from hetserve.engine.control import ControlConfig, ControlSpec, SwitchRecord
from hetserve.experiments.setup import control_spec, replanner
from hetserve.runtime.operator import Busy
from hetserve.runtime.server import Result, Server
from hetserve.runtime.serverconfig import ServerConfig, wall_clock_params
from tests.control.scenario import MODELS, plan_for, setup_for

pytest.importorskip("fastapi")


def _server(
    replan: str = "manual", switch: str = "mbb", spec: ControlSpec | None = None, w: float = 0.8
) -> Server:
    setup = setup_for(w)
    if spec is None:
        spec = control_spec(
            setup, replan, switch, 4, setup.plan.rates_at(1.0), solve_s=None, serving=True
        )
    cfg = ServerConfig(
        scheduler="reservation", params=wall_clock_params("reservation", {}), emulate=True,
        replan=replan,
    )  # fmt: skip
    return Server(setup, cfg, spec)


async def _traffic(server: Server, rate_rps: float, duration_s: float, seed: int = 0):
    """Poisson arrivals of both models (80% resnet50) for ``duration_s``: the results,
    one per request sent, in order."""
    rng = random.Random(seed)
    tasks: list[asyncio.Task[Result]] = []
    loop = asyncio.get_running_loop()
    t_end = loop.time() + duration_s
    while loop.time() < t_end:
        model = "resnet50" if rng.random() < 0.8 else "bert-base"
        if model in server.models:  # (a lenient deadline: a busy machine's loop stalls)
            tasks.append(asyncio.ensure_future(server.infer(model, deadline_s=0.5)))
        await asyncio.sleep(rng.expovariate(rate_rps))
    return await asyncio.gather(*tasks)


def _sample(server: Server, name: str, labels: dict[str, str] | None = None) -> float:
    return server.metrics.registry.get_sample_value(name, labels or {}) or 0.0


@pytest.mark.parametrize("mode", ["mbb", "flush"])
def test_an_operators_plan_switches_under_load(mode: str) -> None:
    async def main() -> tuple[list[Result], Server]:
        server = _server(switch=mode)
        server.start()
        traffic = asyncio.ensure_future(_traffic(server, 150.0, 3.0))
        await asyncio.sleep(1.0)
        switch = asyncio.ensure_future(server.operator.apply_plan(plan_for(0.2)))
        await asyncio.sleep(0)  # (the switch has begun: its loads take ~20 ms)
        assert server.control.switching.switch is not None  # type: ignore[union-attr]
        burst = [asyncio.ensure_future(server.infer("resnet50", deadline_s=0.5))
                 for _ in range(5)]  # fmt: skip
        await asyncio.sleep(0)  # (they arrived while it runs)
        rec = await switch
        assert rec.switched and rec.mode == mode and rec.version == 1
        results = await traffic + list(await asyncio.gather(*burst))
        await server.stop()
        return results, server

    results, server = asyncio.run(main())
    outcomes = [r.outcome for r in results]
    assert len(results) > 200
    assert "failed" not in outcomes, {r.reason for r in results if r.outcome == "failed"}
    assert outcomes.count("ok") / len(outcomes) > 0.95
    # the server follows the new plan
    assert server.setup.plan is server.control.plan  # type: ignore[union-attr]
    assert server.control.version == 1  # type: ignore[union-attr]
    assert _sample(server, "hetserve_plan_version") == 1
    assert _sample(server, "hetserve_switches_total", {"mode": mode}) == 1
    assert _sample(server, "hetserve_switch_seconds_count") == 1
    state = server.operator.state()
    assert state["version"] == 1 and not state["busy"]
    assert state["records"][-1]["switched"] and state["records"][-1]["reason"].startswith(
        "operator"
    )
    in_switch = _sample(server, "hetserve_switch_requests_total", {"result": "ok"}) + _sample(
        server, "hetserve_switch_requests_total", {"result": "missed"}
    )
    # the burst (and whatever traffic came meanwhile) arrived while it ran, each counted
    # once, when it ended
    assert 5 <= in_switch <= len(results)


def test_unload_and_load_follow_tritons_semantics() -> None:
    async def main() -> None:
        server = _server()
        server.start()
        traffic = asyncio.ensure_future(_traffic(server, 100.0, 4.0, seed=1))
        await asyncio.sleep(0.5)
        rec = await server.operator.unload_model("bert-base")
        assert rec is not None and rec.switched
        assert server.models == ["resnet50"]
        assert list(server.setup.plan.models) == ["resnet50"]
        with pytest.raises(HetserveError, match="UNAVAILABLE"):
            await server.infer("bert-base")
        assert await server.operator.unload_model("bert-base") is None  # already unloaded
        with pytest.raises(HetserveError, match="last model"):
            await server.operator.unload_model("resnet50")
        with pytest.raises(HetserveError, match="started with"):
            await server.operator.load_model("vgg19")
        await asyncio.sleep(0.5)
        rec = await server.operator.load_model("bert-base")
        assert rec.switched and sorted(server.models) == sorted(MODELS)
        # (served again; a lenient deadline, as ``_traffic``'s: on the wall clock a busy
        # machine's loop stalls, and in one newcomer run the model's own 500 ms made it late)
        assert (await server.infer("bert-base", deadline_s=5.0)).outcome == "ok"
        results = await traffic
        await server.stop()
        assert "failed" not in [r.outcome for r in results]
        assert server.control.version == 2  # type: ignore[union-attr]

    asyncio.run(main())


def test_a_second_change_while_one_runs_is_refused() -> None:
    async def main() -> None:
        server = _server()
        server.start()
        first = asyncio.ensure_future(server.operator.apply_plan(plan_for(0.2)))
        await asyncio.sleep(0)  # (it has begun)
        with pytest.raises(Busy, match="under way"):
            await server.operator.apply_plan(plan_for(0.5))
        with pytest.raises(Busy):
            await server.operator.unload_model("bert-base")
        assert (await first).switched
        await server.stop()

    asyncio.run(main())


def test_an_operators_plan_of_other_models_is_refused() -> None:
    async def main() -> None:
        server = _server()
        server.start()
        other = setup_for(0.8).plan
        other = type(other)({"resnet50": other.models["resnet50"]}, meta=dict(other.meta))
        with pytest.raises(HetserveError, match="this server serves"):
            await server.operator.apply_plan(other)
        await server.stop()

    asyncio.run(main())


def test_without_replan_the_plan_does_not_move() -> None:
    async def main() -> None:
        setup = setup_for(0.8)
        server = Server(setup, ServerConfig(scheduler="reservation", emulate=True))
        server.start()
        with pytest.raises(HetserveError, match="start it with --replan"):
            await server.operator.apply_plan(plan_for(0.2))
        assert server.operator.state() == {
            "replan": "off",
            "version": 0,
            "busy": False,
            "records": [],
        }
        await server.stop()

    asyncio.run(main())


def test_the_controller_replans_from_live_traffic_off_the_loop() -> None:
    """A periodic controller on a short tick: the planner runs on its thread (its measured
    time is the record's solve time) and the mix the server saw (80/20) is re-planned
    for, while requests keep being answered."""
    setup = setup_for(0.2)  # planned for the opposite mix
    spec = ControlSpec(
        RateController("every", period_s=1.0),
        replanner(setup),
        {"resnet50": 100.0, "bert-base": 400.0},
        ControlConfig(tick_s=0.5, window_s=1.0, long_window_s=2.0, solve_s=None),
    )

    async def main() -> tuple[list[Result], Server]:
        server = _server(spec=spec, w=0.2)
        server.start()
        results = await _traffic(server, 120.0, 3.0, seed=2)
        await server.stop()
        return results, server

    results, server = asyncio.run(main())
    recs = server.control.records  # type: ignore[union-attr]
    assert recs and all(r.reason == "periodic" for r in recs)
    assert all(r.measured_solve_s > 0 and r.solve_s == r.measured_solve_s for r in recs)
    switched = [r for r in recs if r.switched]
    assert switched, [r.decision for r in recs]
    assert "failed" not in [r.outcome for r in results]
    # the rates it planned for follow the traffic's mix (80% resnet50)
    planned = server.control.planned_rps  # type: ignore[union-attr]
    assert planned["resnet50"] > 2 * planned["bert-base"]


@pytest.mark.torch
def test_real_workers_answer_rightly_across_a_switch() -> None:
    """Real PyTorch workers (threads) on three CPU devices: resnet18 cut in two stages
    (two first-stage workers), then switched to whole-model workers while requests flow:
    the new blocks load beside the old ones, and every answer equals the model's own
    output (within the FP16 cut's tolerance), before, during and after the switch."""
    torch = pytest.importorskip("torch")
    from hetserve.core.cluster import parse_cluster
    from hetserve.core.plan import ModelPlan, Pipeline, Plan, Stage, bind
    from hetserve.core.presets import preset_spec
    from hetserve.engine.setup import Setup, build_setup
    from hetserve.zoo.registry import build

    model = build("resnet18")
    n = 24
    x = torch.stack([model.input_spec.example(1, seed=i)[0] for i in range(n)])
    spec3 = preset_spec("local-cpu")  # this machine's CPU as three devices
    spec3["name"] = "local-cpu-x3"
    spec3["nodes"][0]["gpus"]["CPU"] = 3
    cluster = parse_cluster(spec3, "test")
    base = build_setup(cluster, ["resnet18"], slo_ms={"resnet18": 60000.0}, max_batch=4)
    cut = (Stage((0, 5), "CPU", 1, 2), Stage((5, 10), "CPU", 1, 1))
    whole = (Stage((0, 10), "CPU", 1, 3),)

    def plan(stages: tuple) -> Plan:
        return Plan({"resnet18": ModelPlan(60.0, 1.0, (Pipeline(stages, 4, 0.0, 100.0),))},
                    meta={"planner": "test"})  # fmt: skip

    a = plan(cut)
    s = Setup(base.cluster, base.latency, ["resnet18"], {"resnet18": 60.0}, a,
              bind(a, base.cluster))  # fmt: skip
    spec = control_spec(s, "manual", "mbb", 4, {"resnet18": 10.0}, solve_s=None, serving=True)
    srv = Server(s, ServerConfig(scheduler="reactive", build=build, replan="manual"), spec)

    async def scenario() -> tuple[list[Result], SwitchRecord]:
        srv.start()
        try:
            first = [asyncio.ensure_future(srv.infer("resnet18", x[i])) for i in range(n // 2)]
            rec = await srv.operator.apply_plan(plan(whole))
            rest = [asyncio.ensure_future(srv.infer("resnet18", x[i])) for i in range(n // 2, n)]
            return await asyncio.gather(*first, *rest), rec
        finally:
            await srv.stop()

    results, rec = asyncio.run(scenario())
    assert rec.switched and "load" in rec.steps
    assert [r.outcome for r in results] == ["ok"] * n
    assert srv.setup.plan.models["resnet18"].pipelines[0].stages == whole
    with torch.inference_mode():
        ref = model(x)
    for i, r in enumerate(results):
        assert ((r.output - ref[i]).norm() / ref[i].norm()).item() < 1e-3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--emulate", "--replan", "sometimes"], "expected auto, every=SECONDS (> 0), manual"),
        (["--emulate", "--replan", "auto"], "does not plan for rates"),
        (["--emulate", "--replan", "manual", "--objective", "speed"], "--objective"),
        (["--emulate", "--replan", "manual", "--max-moving", "0"], "--max-moving"),
    ],
)
def test_serve_replan_refuses_bad_input(capsys, args, message) -> None:  # type: ignore[no-untyped-def]
    from hetserve.cli import main

    code = main(["serve", "--cluster", "hc1-s", "--models", "resnet50", *args, "--check"])
    err = capsys.readouterr().err
    assert code != 0 and message in err, err
    assert "Traceback" not in err


def test_serve_replan_manual_checks_and_says_so(capsys) -> None:  # type: ignore[no-untyped-def]
    from hetserve.cli import main

    code = main(["serve", "--cluster", "hc1-s", "--models", "resnet50", "--emulate",
                 "--replan", "manual", "--check"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "re-planning: manual" in out


def test_a_plan_for_gpus_the_cluster_lacks_is_refused() -> None:
    """An operator's plan made for another cluster (V100s; this one has L4s and P4s): it
    cannot be placed, the plan stays, and the reason says why (HTTP 400)."""
    from hetserve.engine.setup import build_setup
    from hetserve.planning.registry import PlanRequest, make_plan

    base = build_setup("shepherd-12xv100", MODELS)
    req = PlanRequest(
        base.cluster, list(MODELS), {m: s * 1e3 for m, s in base.slos_s.items()}, None,
        latency_source=lambda: (base.latency, list(base.models)),
    )  # fmt: skip
    v100 = make_plan("ppipe", req, {}).plan

    async def main() -> None:
        server = _server()
        server.start()
        with pytest.raises(HetserveError, match="cannot be placed"):
            await server.operator.apply_plan(v100)
        assert server.control.version == 0 and not server.control.busy  # type: ignore[union-attr]
        assert (await server.infer("resnet50", deadline_s=0.5)).outcome == "ok"
        await server.stop()

    asyncio.run(main())
