"""Cold starts in the runtime: the loader's ordering on the CPU (rows copied in plan
order, DHA rows never copied, every layer waiting for its weights, eviction), the torch
executor serving cold-started instances, and the emulated engine following the same
timeline as the simulator."""

import numpy as np
import pytest

from hetserve.core.layerlatency import LayerLatency
from hetserve.core.outcome import OK
from hetserve.core.plan import bind
from hetserve.core.presets import preset
from hetserve.core.requests import Stream
from hetserve.engine.modelled import ModelledExecutor
from hetserve.planning.deepplan import plan_cold_starts
from hetserve.runtime.engine import RuntimeEngine, VirtualClock
from hetserve.scheduling import ClusterView, make_scheduler
from hetserve.sim.engine import SimConfig, Simulator
from hetserve.workload.arrivals import Poisson
from hetserve.workload.trace import generate

P3 = preset("p3-8xlarge")


def _plans(names, kind):
    plan, _ = plan_cold_starts(P3, names, None, kind, dict.fromkeys(names, 0.2))
    return plan, LayerLatency(plan.load_plans), bind(plan, P3)


def _runtime(plan, lat, pl, sched, trace, executor):
    clock = VirtualClock()
    view = ClusterView.build(P3, lat, pl)
    done = {}

    def on_done(r, outcome, reason, out):
        assert r.id not in done
        done[r.id] = (outcome, clock.now(), out, reason)

    eng = RuntimeEngine(view, plan, sched, executor, clock, on_done)
    eng.start()
    for r in trace.requests():
        clock.at(r.arrival_s, lambda r=r: eng.submit(r))
    clock.run()
    return done


@pytest.mark.parametrize("kind", ["pipeswitch", "dha", "pt+dha"])
def test_emulated_runtime_follows_the_simulator_through_cold_starts(kind):
    names = [f"bert-base@{i}" for i in range(150)]
    plan, lat, pl = _plans(names, kind)
    tr = generate([Stream(m, m, 0.2, Poisson(80 / len(names))) for m in names], 4.0, 5)
    res = Simulator(P3, lat, plan, pl, make_scheduler("coldstart", {}), tr,
                    SimConfig(warm=False)).run()  # fmt: skip
    sched = make_scheduler("coldstart", {})
    done = _runtime(plan, lat, pl, sched, tr, ModelledExecutor(warm=False))
    assert len(done) == len(tr)
    for i in range(len(tr)):
        outcome, t, _, _ = done[i]
        assert outcome == res.outcome[i]
        if outcome == OK:
            assert t == pytest.approx(res.finish_s[i], abs=1e-9)


torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def resnet18_rows():
    from hetserve.core.gpus import DEFAULT_CATALOG
    from hetserve.core.layertable import estimate_layer_rows, get_layer_table

    return estimate_layer_rows(get_layer_table("resnet18"), DEFAULT_CATALOG.get("V100"))


def test_the_loader_copies_in_plan_order_and_layers_wait_for_their_weights(resnet18_rows):
    import threading

    from hetserve.planning.deepplan import make_load_plan
    from hetserve.runtime.coldload import ColdModel, ThreadBackend
    from hetserve.zoo.registry import build

    ref = build("resnet18")
    x = ref.input_spec.example(2, seed=3)
    with torch.inference_mode():
        want = ref(x)
    plan = make_load_plan("dha", resnet18_rows)
    dha = set(plan.dha_layers)
    assert dha  # some rows run from host memory
    # slow copies (10 ms per MB), and in the first load the last row's copy held until
    # the pass waits on that row: the pass runs while rows are still arriving on any
    # machine (by timing alone, a machine busy enough finished every copy before the pass
    # reached the first loaded row: seen on a 16-core GPU machine during a parallel build)
    from hetserve.profiling.layers import leaf_rows

    class _LastHeld(ThreadBackend):
        last_event = None

        def start(self, rows, part_of, on_row, on_done):
            if self.last_event is not None:  # (a later load: as ThreadBackend does)
                return super().start(rows, part_of, on_row, on_done)
            self.reached_last = threading.Event()
            last, pairs = rows[-1]
            held = [(_HeldCopy(dst, self.reached_last), src) for dst, src in pairs]
            events = super().start([*rows[:-1], (last, held)], part_of, on_row, on_done)
            self.last_event = events[last]
            return events

        def wait(self, event):
            if event is self.last_event:
                self.reached_last.set()
            super().wait(event)

    class _HeldCopy:
        def __init__(self, dst, gate):
            self.dst, self.gate = dst, gate

        def copy_(self, src):
            assert self.gate.wait(30), "the pass never waited on the last row"
            self.dst.copy_(src)

    net = build("resnet18")
    cm = ColdModel(net, _LastHeld(delay_s_per_byte=1e-8), leaf_rows(net))
    done = threading.Event()
    cm.load(plan, done.set)
    got = cm.run(x)  # runs during the load
    done.wait(30)
    assert torch.equal(got, want)
    loaded = [i for what, i in cm.log if what == "loaded"]
    waited = [i for what, i in cm.log if what == "waited"]
    weighted = [i for i, r in enumerate(resnet18_rows) if r.param_bytes > 0]
    assert loaded == [i for i in weighted if i not in dha]  # in order, DHA rows never copied
    assert waited == loaded  # each loaded row waited on, in execution order
    assert cm.log.index(("waited", loaded[0])) < cm.log.index(("loaded", loaded[-1]))
    # DHA rows read the host copies themselves, zero-copy
    name = cm.row_weights[min(dha)][0]
    assert cm.net.get_parameter(name).data_ptr() == cm.host[name].data_ptr()
    cm.evict()
    assert all(p.numel() == 0 for p in cm.net.parameters())
    again = threading.Event()
    cm.load(make_load_plan("pipeswitch", resnet18_rows), again.set)
    again.wait(30)
    assert torch.equal(cm.run(x), want)


def test_a_plan_for_another_model_is_refused(resnet18_rows):
    from hetserve.core.coldstart import LoadPlan
    from hetserve.core.errors import HetserveError
    from hetserve.profiling.layers import leaf_rows
    from hetserve.runtime.coldload import ColdModel, ThreadBackend
    from hetserve.zoo.registry import build

    net = build("resnet18")
    cm = ColdModel(net, ThreadBackend(), leaf_rows(net))
    with pytest.raises(HetserveError, match="the load plan has 3 layers"):
        cm.load(LoadPlan.all_loaded(3))


def test_the_torch_executor_serves_cold_instances_with_lru(resnet18_rows):
    from hetserve.runtime.torch_executor import TorchExecutor
    from hetserve.zoo.registry import build

    names = [f"resnet18@{i}" for i in range(6)]
    plan, lat, pl = _plans(names, "dha")
    # a generous SLO: on the virtual clock a load and a run take their real time, which an
    # oversubscribed machine stretches; what is checked is the LRU, not the speed. (With
    # 5 s the test failed once on a 16-core GPU machine running 8 test workers, its
    # message cut off; with 120 s every request was served there, and the count of loads
    # below failed instead: it is now what the trace implies.)
    streams = [Stream(m, m, 120.0, Poisson(1.0)) for m in names]
    tr = generate(streams, 3.0, 2)
    # room for one instance per GPU, six instances on four GPUs: LRU evictions
    sched = make_scheduler("coldstart", {"memory_reserve_gb": 16 - 0.05, "preload": False})
    from hetserve.profiling.layers import leaf_rows

    ex = TorchExecutor(build, n_blocks=1, leaf_rows=leaf_rows)
    done = _runtime(plan, lat, pl, sched, tr, ex)
    assert len(done) == len(tr)
    bad = {i: (v[0], v[3]) for i, v in done.items() if v[0] != OK}
    assert not bad, f"requests not served (id: outcome, reason): {bad}"
    ref = build("resnet18")
    for r in list(tr.requests())[:3]:
        with torch.inference_mode():
            want = ref(ref.input_spec.example(1))[0]
        assert torch.allclose(done[r.id][2], want)
    # five instances asked for on four GPUs: each loaded at least once, one evicted at
    # least; which are loaded again depends on the machine's speed (on a GPU machine at
    # 8 test workers one fewer than here: the test's earlier ">= 6" was this machine's)
    wanted = {r.stream for r in tr.requests()}
    assert len(wanted) == 5
    assert sched.stats["loads"] >= len(wanted) and sched.stats["evictions"] > 0
    live = [cm for cm in ex._cold.values() if cm.loaded]
    assert len(live) <= len(pl.workers)
    assert sched.stats["loads"] - sched.stats["evictions"] == len(live)
    gone = [cm for cm in ex._cold.values() if not cm.loaded]
    assert gone and all(p.numel() == 0 for cm in gone for p in cm.net.parameters())
    assert np.isfinite([v[1] for v in done.values()]).all()


def test_served_over_http_cold_instances_answer_and_the_cli_simulates_them(tmp_path, capsys):
    """A plan of three ResNet-18 instances on the CPU, served for real with the coldstart
    scheduler (each instance loads on first use), and the same plan simulated."""
    from fastapi.testclient import TestClient

    from hetserve.cli import main
    from hetserve.engine.setup import build_setup
    from hetserve.runtime.http import create_app
    from hetserve.runtime.server import Server, ServerConfig
    from hetserve.zoo.registry import build

    names = ",".join(f"resnet18@{i}" for i in range(3))
    f = tmp_path / "cold.json"
    assert main(["plan", "--planner", "deepplan", "--cluster", "local-cpu", "--models", names,
                 "--kind", "dha", "--slo", "resnet18@0=60000,resnet18@1=60000,resnet18@2=60000",
                 "--output", str(f)]) == 0  # fmt: skip
    setup = build_setup("local-cpu", names.split(","), plan=str(f))
    from hetserve.profiling.layers import leaf_rows

    cfg = ServerConfig(scheduler="coldstart", build=build, engine="threads", leaf_rows=leaf_rows,
                       params={"preload": False, "memory_reserve_gb": 0.0})  # fmt: skip
    body = {"inputs": [{"name": "input", "shape": [1, 3, 224, 224], "datatype": "FP32",
                        "data": [0.0] * 150528}]}  # fmt: skip
    with TestClient(create_app(Server(setup, cfg))) as c:
        for m in ("resnet18@1", "resnet18@1", "resnet18@2"):
            r = c.post(f"/v2/models/{m}/infer", json=body)
            assert r.status_code == 200, r.text[:300]
            out = r.json()["outputs"][0]
            assert out["shape"] == [1, 1000] and r.json()["model_name"] == m
        assert c.get("/v2/models/resnet18@0").json()["name"] == "resnet18@0"
    capsys.readouterr()
    rc = main(["simulate", "--cluster", "local-cpu", "--models", names, "--plan", str(f),
               "--scheduler", "coldstart", "--rate", "5", "--duration", "5",
               "--out", str(tmp_path / "sim")])  # fmt: skip
    assert rc == 0
    import json

    s = json.loads((tmp_path / "sim" / "summary.json").read_text())
    assert s["arrived"] > 0 and s["ok"] + s["late"] + s["dropped"] == s["arrived"]


def test_an_eviction_never_races_a_running_batch_on_the_wall_clock(tmp_path, caplog):
    """Two cold instances, room for one: a request for the second arrives while the
    first's batch runs, on the real (asyncio) clock with real loads and real PyTorch
    stages. The scheduler counts the running batch's model as busy, so the second waits
    for it to end and evicts it then (before, the eviction freed the weights under the
    running batch: ``running_mean should contain 64 elements not 0``). Every answer is the
    warm model's; nothing fails."""
    import asyncio

    from hetserve.cli import main
    from hetserve.engine.setup import build_setup
    from hetserve.profiling.layers import leaf_rows
    from hetserve.runtime.server import Server, ServerConfig
    from hetserve.zoo.registry import build

    names = [f"resnet18@{i}" for i in range(2)]
    f = tmp_path / "cold.json"
    assert main(["plan", "--planner", "deepplan", "--cluster", "local-cpu", "--models",
                 ",".join(names), "--kind", "pipeswitch", "--slo",
                 ",".join(f"{m}=60000" for m in names), "--output", str(f)]) == 0  # fmt: skip
    setup = build_setup("local-cpu", names, plan=str(f))
    gpu = setup.cluster.catalog.get(setup.placement.workers[0].gpu)
    # room for one ResNet-18 (45 MB of weights) and no more
    reserve_gb = gpu.memory_gb - 0.07
    cfg = ServerConfig(scheduler="coldstart", build=build, engine="threads", leaf_rows=leaf_rows,
                       params={"preload": False, "memory_reserve_gb": reserve_gb})  # fmt: skip
    srv = Server(setup, cfg)
    ref = build("resnet18").eval()
    xs = [ref.input_spec.example(1, seed=i)[0] for i in range(8)]

    async def scenario():
        srv.start()
        sched = srv.engine.scheduler
        tasks = []
        for i, x in enumerate(xs):  # alternate the instances, each while the other runs
            tasks.append(asyncio.create_task(srv.infer(names[i % 2], x)))
            await asyncio.sleep(0.005)
        results = await asyncio.gather(*tasks)
        stats = dict(sched.stats)
        await srv.stop()
        return results, stats

    results, stats = asyncio.run(scenario())
    # the scheduler never asked for it (the kernel would refuse it, loudly: rule 8)
    assert not [m for m in caplog.messages if "refused Evict" in m]
    assert [r.outcome for r in results] == ["ok"] * len(xs), [r.reason for r in results]
    assert stats["evictions"] >= 1 and stats["loads"] >= 2
    with torch.inference_mode():
        want = ref(torch.stack(xs))
    for i, r in enumerate(results):
        torch.testing.assert_close(r.output, want[i], rtol=1e-4, atol=1e-4)
    failures = srv.metrics.registry.get_sample_value(
        "hetserve_requests_total", {"model": names[0], "outcome": "failed"}
    )
    assert not failures
