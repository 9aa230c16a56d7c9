"""The threads engine serves a plan with GPU workers on this machine's GPUs (issue 43: the
in-process path beside the Ray one): each GPU worker on ``cuda:<its index>``, after a
check that the plan's GPUs are here. Without CUDA the same path runs with the GPU workers
on the CPU (``ServerConfig.gpu_device="cpu"``); the CUDA test runs where a GPU is."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("fastapi")

from fastapi.testclient import TestClient  # noqa: E402

from hetserve.core.cluster import parse_cluster  # noqa: E402
from hetserve.core.errors import HetserveError  # noqa: E402
from hetserve.engine.setup import build_setup  # noqa: E402
from hetserve.runtime.http import create_app  # noqa: E402
from hetserve.runtime.server import Server, ServerConfig  # noqa: E402
from hetserve.zoo.registry import build  # noqa: E402

pytestmark = pytest.mark.torch
CUDA = torch.cuda.is_available()


def _cluster(nodes: dict[str, dict[str, int]]):
    spec = {
        "name": "t",
        "nodes": [{"name": n, "gpus": g, "nic_gbps": 10.0} for n, g in nodes.items()],
    }
    return parse_cluster(spec, "test")


def _server(cluster, **cfg):
    s = build_setup(cluster, ["resnet18"], slo_ms={"resnet18": 20000.0}, max_batch=4)
    return Server(s, ServerConfig(scheduler="flex", build=build, engine="threads", **cfg))


def _body(x):
    return {"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                        "data": x.flatten().tolist()}]}  # fmt: skip


def _answer(client, x):
    r = client.post("/v2/models/resnet18/infer", json=_body(x))
    assert r.status_code == 200, r.text
    out = r.json()["outputs"][0]
    return torch.tensor(out["data"]).reshape(out["shape"])


def test_gpu_workers_run_in_process_and_answer_as_the_model():
    """A plan on two GPU types of one node, served by the threads engine with the GPU
    workers on the CPU: every worker gets its device, and the answers are the model's."""
    srv = _server(_cluster({"box": {"L4": 1, "T4": 1}}), gpu_device="cpu")
    model = build("resnet18").eval()
    x = torch.stack([model.input_spec.example(1, seed=i)[0] for i in range(3)])
    with TestClient(create_app(srv)) as c:
        got = _answer(c, x)
        ex = srv.engine.executor
        workers = {w.id for w in srv.setup.placement.workers}
        assert workers and set(ex.devices) == workers  # every one a GPU worker
        assert {ex.device_of(w) for w in workers} == {"cpu"}
    with torch.inference_mode():
        ref = model(x)
    assert got.shape == ref.shape
    assert float((got - ref).norm() / ref.norm()) < 1e-3  # FP16 at cuts, if any


def test_a_stopped_last_stage_has_no_output_to_bring_back():
    """FLEX stops a running last stage at a block boundary: no output, and bringing it to
    the host must not fail the batch (on the H200 every preempted batch failed with
    "TypeError: 'NoneType' object is not iterable" until this held)."""
    from hetserve.core.latency import RooflineModel
    from hetserve.runtime.stage import StageRunner
    from hetserve.runtime.torch_executor import to_host

    net = build("resnet18").eval()
    runner = StageRunner(net, RooflineModel(n_blocks=10).blocks("resnet18"), (0, 10))
    res = runner.run(net.input_spec.example(1), should_stop=lambda: True)
    assert runner.last and not res.completed and res.blocks_done == 1
    assert to_host(res.output) is None
    done = runner.run(net.input_spec.example(1))
    assert to_host(done.output).device.type == "cpu"


def test_gpu_workers_on_several_nodes_need_ray():
    srv = _server(_cluster({"a": {"L4": 1}, "b": {"L4": 1}}))
    with pytest.raises(HetserveError, match="GPU workers on nodes a, b; use --engine ray"):
        srv.check()


@pytest.mark.skipif(CUDA, reason="checks the error on a machine without CUDA")
def test_a_gpu_plan_without_cuda_here_is_one_line(monkeypatch):
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # (the check sets it if unset)
    srv = _server(_cluster({"box": {"L4": 1}}))
    with pytest.raises(HetserveError, match=r"this machine has 0 CUDA GPU\(s\)") as e:
        srv.check()
    assert "\n" not in str(e.value)


def test_a_gpu_of_another_type_is_refused(monkeypatch):
    """The plan's GPU must be the one at that index here (by name or the catalog's
    alias): a T4 plan on an L4 is refused, an L4 plan on it is accepted."""
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: "NVIDIA L4")
    with pytest.raises(HetserveError, match=r"on an T4 \(box/gpu0\), but cuda:0 here is"):
        _server(_cluster({"box": {"T4": 1}})).check()
    _server(_cluster({"box": {"L4": 1}})).check()


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_the_threads_engine_serves_on_this_gpu():
    """The real thing: the cluster as discovered here, the plan's GPU worker on
    ``cuda:0``, answers within TF32's rounding of the CPU model's."""
    from hetserve.runtime.discovery import discover

    found = discover(None)
    cluster = parse_cluster(found.spec(), "discovered")
    srv = _server(cluster)
    model = build("resnet18").eval()
    x = torch.stack([model.input_spec.example(1, seed=i)[0] for i in range(2)])
    with TestClient(create_app(srv)) as c:
        got = _answer(c, x)
        ex = srv.engine.executor
        assert {ex.device_of(w.id) for w in srv.setup.placement.workers} == {"cuda:0"}
    with torch.inference_mode():
        ref = model(x)
    assert float((got - ref).norm() / ref.norm()) < 1e-2
