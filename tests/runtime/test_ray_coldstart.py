"""Cold starts served for real by the Ray engine: a DeepPlan plan's GPU workers load
models on demand by their load plans and evict them LRU (``serve --plan dp.json
--scheduler coldstart``). Ray here declares two V100s that are not there, so the actors
compute on the CPU (``gpu_device="cpu"``: the loader's thread backend; the CUDA backend's
ordering is checked in test_streams.py); the answers equal the warm model's, loads and
evictions happen in the actors, and a PT plan is refused in one line."""

import pytest

torch = pytest.importorskip("torch")
ray = pytest.importorskip("ray")
pytest.importorskip("fastapi")

from fastapi.testclient import TestClient  # noqa: E402

from hetserve.core.cluster import parse_cluster  # noqa: E402
from hetserve.core.errors import HetserveError  # noqa: E402
from hetserve.core.presets import preset  # noqa: E402
from hetserve.engine.setup import build_setup  # noqa: E402
from hetserve.planning.deepplan import plan_cold_starts  # noqa: E402
from hetserve.profiling.layers import host_alias, leaf_rows  # noqa: E402
from hetserve.runtime.http import create_app  # noqa: E402
from hetserve.runtime.server import Server, ServerConfig  # noqa: E402
from hetserve.zoo.registry import build  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.xdist_group("ray")]

CLUSTER = parse_cluster(
    {"name": "two-v100", "nodes": [{"name": "n", "gpus": {"V100": 2}, "nic_gbps": 10}]}, "t"
)


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=2, num_gpus=2, resources={"accelerator_type:V100": 2},
             include_dashboard=False, log_to_driver=False)  # fmt: skip
    yield
    ray.shutdown()


def _server(kind, names, cluster=CLUSTER, **cfg):
    plan, _ = plan_cold_starts(cluster, names, None, kind, dict.fromkeys(names, 30.0))
    setup = build_setup(cluster, names, plan=plan)
    return Server(setup, ServerConfig(
        scheduler="coldstart",
        params={"memory_reserve_gb": 16 - 0.05, "preload": False},  # one instance per GPU
        build=build, leaf_rows=leaf_rows, host_alias=host_alias, engine="ray",
        gpu_device="cpu", **cfg,
    ))  # fmt: skip


def test_ray_workers_cold_start_and_evict_with_the_warm_models_answers():
    names = [f"resnet18@{i}" for i in range(3)]  # three instances, two GPUs: evictions
    srv = _server("dha", names)
    ref = build("resnet18").eval()
    x = torch.stack([ref.input_spec.example(1, seed=i)[0] for i in range(2)])
    with torch.inference_mode():
        want = ref(x)
    body = {"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                        "data": x.flatten().tolist()}]}  # fmt: skip
    with TestClient(create_app(srv)) as c:
        for _ in range(2):
            for m in names:
                r = c.post(f"/v2/models/{m}/infer", json=body)
                assert r.status_code == 200, r.text
                got = torch.tensor(r.json()["outputs"][0]["data"]).reshape(2, 1000)
                assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)
        stats = dict(srv.engine.scheduler.inner.stats)
        states = {}
        for a in srv.engine.executor.actors.values():
            states.update(ray.get(a.cold_state.remote()))
    # three instances on two one-instance GPUs, asked in turn: LRU loads and evicts, and
    # it happened in the actors (each instance made where it was loaded, at most one
    # resident per GPU)
    assert stats["loads"] >= 4 and stats["evictions"] >= 2
    assert {k.rsplit("/", 1)[1] for k in states} == set(names)
    assert sum(states.values()) <= 2


def test_a_pt_plan_is_refused_on_ray_in_one_line():
    names = ["resnet18@0"]
    srv = _server("pt", names, cluster=preset("p3-8xlarge"))
    with pytest.raises(HetserveError, match=r"loads over 2 GPUs' host links.*--emulate"):
        srv.check()
