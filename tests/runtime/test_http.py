"""The Open Inference Protocol front end, in process and with a standard client."""

import socket
import threading
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("fastapi")

from fastapi.testclient import TestClient  # noqa: E402

from hetserve.engine.setup import build_setup  # noqa: E402
from hetserve.experiments.shepherd.scenarios import group_setup  # noqa: E402
from hetserve.runtime.http import create_app  # noqa: E402
from hetserve.runtime.server import Server, ServerConfig  # noqa: E402
from hetserve.zoo.registry import build  # noqa: E402

pytestmark = pytest.mark.torch


def _cpu_server(**cfg):
    s = build_setup("local-cpu", ["resnet18"], slo_ms={"resnet18": 20000.0}, max_batch=4)
    return Server(s, ServerConfig(scheduler="flex", build=build, **cfg))


def _zeros(n, shape=(3, 224, 224)):
    """An infer body of ``n`` all-zero ResNet inputs (as the emulated server expects)."""
    count = n * int(torch.tensor(shape).prod())
    return {"inputs": [{"name": "input", "shape": [n, *shape], "datatype": "FP32",
                        "data": [0] * count}]}  # fmt: skip


def _body(x, **params):
    return {
        "id": "r1",
        "inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                    "data": x.flatten().tolist()}],
        "parameters": params,
    }  # fmt: skip


def test_infer_health_metadata_and_metrics():
    model = build("resnet18")
    x = torch.stack([model.input_spec.example(1, seed=i)[0] for i in range(2)])
    with TestClient(create_app(_cpu_server())) as c:
        assert c.get("/v2/health/live").json() == {"live": True}
        assert c.get("/v2/health/ready").status_code == 200
        meta = c.get("/v2/models/resnet18").json()
        assert meta["inputs"][0]["shape"] == [-1, 3, 224, 224]
        assert c.get("/v2/models/bert").status_code == 404
        assert c.get("/v2/models/resnet18/ready").json()["ready"] is True
        r = c.post("/v2/models/resnet18/infer", json=_body(x))
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["id"] == "r1" and out["outputs"][0]["shape"] == [2, 1000]
        got = torch.tensor(out["outputs"][0]["data"]).reshape(2, 1000)
        with torch.inference_mode():
            ref = model(x)
        assert torch.allclose(got, ref, rtol=1e-4, atol=1e-4)
        text = c.get("/metrics").text
        # one request of two rows (it went to the worker as one batch of two)
        assert 'hetserve_requests_total{model="resnet18",outcome="ok"} 1.0' in text
        assert 'hetserve_rows_total{model="resnet18",outcome="ok"} 2.0' in text
        assert 'hetserve_batch_size_bucket{le="2.0",model="resnet18"} 1.0' in text
        assert 'hetserve_batch_size_bucket{le="1.0",model="resnet18"} 0.0' in text


@pytest.mark.parametrize(
    "mutate, status, msg",
    [
        (lambda b: b["inputs"][0].pop("shape"), 400, "shape must be a list of integers"),
        (lambda b: b["inputs"][0].update(datatype="FP8"), 400, "datatype 'FP8', expected 'FP32'"),
        (
            lambda b: b["inputs"][0].update(shape=[1, 3, 224, 223]),
            400,
            "shape [1, 3, 224, 223], expected [-1, 3, 224, 224]",
        ),
        (lambda b: b.update(inputs=[]), 400, "'inputs' must be a list of tensors"),
        (lambda b: b.update(parameters={"deadline_ms": -1}), 400, "deadline_ms must be"),
        (
            lambda b: b.update(parameters={"deadline_ms": 0.001}),
            503,
            "request refused: admission: deadline unreachable at arrival",
        ),
    ],
)
def test_bad_requests_get_a_status_and_a_message(mutate, status, msg):
    x = build("resnet18").input_spec.example(1)
    body = _body(x)
    mutate(body)
    with TestClient(create_app(_cpu_server())) as c:
        r = c.post("/v2/models/resnet18/infer", json=body)
        assert r.status_code == status and msg in r.json()["error"]
        assert c.post("/v2/models/resnet18/infer", content=b"{").status_code == 400


def test_token_and_overload_in_emulation():
    s = group_setup(1, {"resnet50": 0.2})
    srv = Server(s, ServerConfig(scheduler="flex", emulate=True, max_pending=0))
    with TestClient(create_app(srv, token="t0p")) as c:
        assert c.get("/v2/models/resnet50").status_code == 401
        assert c.get("/v2/health/live").status_code == 200  # probes are public by default
        h = {"Authorization": "Bearer t0p"}
        r = c.post("/v2/models/resnet50/infer", json=_zeros(1), headers=h)
        assert r.status_code == 429


def test_the_in_process_engine_refuses_gpu_workers_it_cannot_reach():
    from hetserve.core.errors import HetserveError

    s = group_setup(2, {"resnet50": 1.0})  # two V100 nodes
    srv = Server(s, ServerConfig(scheduler="flex", build=build, engine="threads"))
    with pytest.raises(HetserveError, match="GPU workers on nodes p3-0, p3-1; use --engine ray"):
        srv.check()


def test_unknown_model_token_and_body_limit_on_the_infer_route():
    """The infer route is a plain ASGI handler: it must give the same statuses as the
    framework routes (404, 401, 413 by header and while the body streams in)."""
    s = group_setup(1, {"resnet50": 1.0})
    srv = Server(s, ServerConfig(scheduler="flex", emulate=True))
    body = _zeros(1)
    h = {"Authorization": "Bearer k"}
    with TestClient(create_app(srv, token="k", max_body_bytes=2_000_000)) as c:
        r = c.post("/v2/models/bert/infer", json=body, headers=h)
        assert r.status_code == 404 and "unknown model 'bert'" in r.json()["error"]
        assert c.post("/v2/models/resnet50/infer", json=body).status_code == 401
        assert c.post("/v2/models/resnet50/infer", json=body, headers=h).status_code == 200
        r = c.post("/v2/models/resnet50/infer", content=b"x" * 2_000_001, headers=h)
        assert r.status_code == 413 and "exceeds 2000000" in r.json()["error"]

        def chunks():  # no content-length: the limit applies as the body arrives
            for _ in range(5):
                yield b"y" * 400_001

        r = c.post("/v2/models/resnet50/infer", content=chunks(), headers=h)
        assert r.status_code == 413
        assert c.get("/v2/models/resnet50/other", headers=h).status_code == 404


def test_metrics_count_queueing_batches_and_energy_in_emulation():
    """Emulated V100s: every request is counted once in the queue histogram (first dispatch),
    batches in rows, each worker's busy time and its energy from the latency model's power
    figures; a request of more rows than a batch holds is refused at once."""
    s = group_setup(2, {"resnet50": 1.0})
    srv = Server(s, ServerConfig(scheduler="flex", emulate=True, params={"max_batch": 4}))
    body = _zeros(3)
    with TestClient(create_app(srv)) as c:
        for _ in range(3):
            assert c.post("/v2/models/resnet50/infer", json=body).status_code == 200
        text = c.get("/metrics").text
        r = c.post("/v2/models/resnet50/infer", json=_zeros(6))
        assert r.status_code == 400 and "expected 1 to 4 (the model's max_batch_size" in r.text
        assert c.get("/v2/models/resnet50/config").json()["max_batch_size"] == 4
    get = srv.metrics.registry.get_sample_value
    assert get("hetserve_queue_seconds_count", {"model": "resnet50"}) == 3
    # (a preempted batch's requests are dispatched again: batches may sum to more)
    assert get("hetserve_batch_size_sum", {"model": "resnet50"}) >= 9
    busy = {w.id: get("hetserve_worker_busy_seconds_total", {"worker": w.id})
            for w in s.placement.workers}  # fmt: skip
    joules = {w: get("hetserve_energy_joules_total", {"worker": w, "source": "model"})
              for w in busy}  # fmt: skip
    for w, t in busy.items():
        if t:  # V100 power lies between idle and TDP: 25-300 W
            assert 25 * t <= joules[w] <= 300 * t
    assert any(busy.values()) and "hetserve_queue_seconds_bucket" in text


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_standard_client_works_unchanged():
    """tritonclient's HTTP client against a real uvicorn server on loopback."""
    httpclient = pytest.importorskip("tritonclient.http")
    import numpy as np
    import uvicorn

    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(_cpu_server()), host="127.0.0.1", port=port, log_level="error")
    )
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    try:
        for _ in range(100):
            if server.started:
                break
            time.sleep(0.05)
        client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
        assert client.is_server_live() and client.is_model_ready("resnet18")
        x = build("resnet18").input_spec.example(1).numpy().astype(np.float32)
        inp = httpclient.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x, binary_data=False)
        res = client.infer("resnet18", [inp])
        assert res.as_numpy("output").shape == (1, 1000)
        # the binary tensor extension, both ways
        inp.set_data_from_numpy(x, binary_data=True)
        out = httpclient.InferRequestedOutput("output", binary_data=True)
        res2 = client.infer("resnet18", [inp], outputs=[out])
        assert res2.get_response()["outputs"][0]["parameters"]["binary_data_size"] == 4000
        assert np.allclose(res2.as_numpy("output"), res.as_numpy("output"), atol=1e-5)
    finally:
        server.should_exit = True
        th.join(timeout=10)


def test_binary_tensor_data_is_checked():
    import json

    import numpy as np

    x = build("resnet18").input_spec.example(1).numpy().astype(np.float32)
    blob = x.tobytes()

    def post(c, size, extra=b"", head=None):
        inp = {"name": "input", "shape": list(x.shape), "datatype": "FP32",
               "parameters": {"binary_data_size": size}}  # fmt: skip
        js = json.dumps({"inputs": [inp], "parameters": {"binary_data_output": True}}).encode()
        hdr = {"Inference-Header-Content-Length": head or str(len(js))}
        return c.post("/v2/models/resnet18/infer", content=js + blob + extra, headers=hdr)

    with TestClient(create_app(_cpu_server())) as c:
        r = post(c, len(blob))
        assert r.status_code == 200, r.text
        n = int(r.headers["inference-header-content-length"])
        head = json.loads(r.content[:n])
        got = np.frombuffer(r.content[n:], dtype="<f4")
        assert head["outputs"][0]["shape"] == [1, 1000] and got.shape == (1000,)
        r = post(c, len(blob) + 4, extra=b"\0\0\0\0")
        assert (
            r.status_code == 400
            and "602116, shape [1, 3, 224, 224] of FP32 needs" in r.json()["error"]
        )
        r = post(c, len(blob) - 4)
        assert r.status_code == 400 and "binary_data_size 602108" in r.json()["error"]
        r = post(c, len(blob), head="x")
        assert r.status_code == 400 and "Inference-Header-Content-Length" in r.json()["error"]


def test_graceful_shutdown_answers_requests_in_flight():
    """uvicorn told to exit while requests are in flight: each still gets its answer (200),
    then the workers are released."""
    import concurrent.futures

    import httpx
    import uvicorn

    # emulated: one CPU worker taking the estimated ~0.1 s per ResNet-50 request
    s = build_setup("local-cpu", ["resnet50"], slo_ms={"resnet50": 20000.0}, max_batch=1)
    srv = Server(s, ServerConfig(scheduler="flex", emulate=True, params={"max_batch": 1}))
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(srv), host="127.0.0.1", port=port, log_level="error")
    )
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    for _ in range(100):
        if server.started:
            break
        time.sleep(0.05)
    from hetserve.experiments.live import binary_body

    body, hdr = binary_body(torch.zeros(1, 3, 224, 224).numpy())
    url = f"http://127.0.0.1:{port}/v2/models/resnet50/infer"
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futs = [
            pool.submit(httpx.post, url, content=body, headers=hdr, timeout=30) for _ in range(8)
        ]
        # until all eight have reached the server and some are still held by it (on a
        # loaded machine the first can be answered, ~0.1 s, before the eighth arrives:
        # waiting for eight held at once failed so in a newcomer's first run)
        for _ in range(3000):
            held = len(srv._futures)
            if srv.engine is not None and held and held + sum(f.done() for f in futs) == 8:
                break
            time.sleep(0.01)
        assert held and held + sum(f.done() for f in futs) == 8
        server.should_exit = True
        codes = [f.result().status_code for f in futs]
    th.join(timeout=30)
    assert codes == [200] * 8 and not th.is_alive()
    assert srv.draining and not srv._futures


def test_serve_cli_reports_configuration_errors_in_one_line(capsys, tmp_path, monkeypatch):
    from hetserve.cli import main

    monkeypatch.setenv("HETSERVE_CACHE", str(tmp_path))
    rc = main(["serve", "--cluster", "shepherd-12xv100", "--models", "bert", "--emulate"])
    err = capsys.readouterr().err
    assert rc == 2 and "bert" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_draining_server_is_not_ready_and_refuses_new_requests():
    s = group_setup(1, {"resnet50": 1.0})
    srv = Server(s, ServerConfig(scheduler="flex", emulate=True))
    with TestClient(create_app(srv)) as c:
        assert c.get("/v2/health/ready").status_code == 200
        srv.draining = True
        assert c.get("/v2/health/ready").status_code == 503
        assert c.get("/v2/models/resnet50/ready").status_code == 503
        r = c.post("/v2/models/resnet50/infer", json=_zeros(1))
        assert r.status_code == 503 and "shutting down" in r.json()["error"]


def test_a_magicbatch_plan_serves_requests_by_stream_in_emulation(tmp_path):
    """Requests name their stream; the magicbatch scheduler queues them on the stream's GPU
    with the stream's deadline; a stream the plan does not place gets a 503 saying why."""
    from hetserve.core.latency import RooflineModel
    from hetserve.core.presets import load_cluster
    from hetserve.planning.magicbatch import EdgeStream, plan_streams

    c = load_cluster("magicbatch-edge")
    lat = RooflineModel(catalog=c.catalog)
    streams = [EdgeStream("cam1", "resnet50", 20.0, 0.3), EdgeStream("cam2", "resnet50", 5.0, 0.2),
               EdgeStream("flood", "resnet50", 1e6, 0.3)]  # no GPU keeps up  # fmt: skip
    types = {g.name: g for g in c.gpu_types()}
    plan, a, _ = plan_streams("exact", streams, c.gpu_counts(), types, lat)
    assert "flood" in a.rejected
    s = build_setup(c, ["resnet50"], plan=plan)
    # a wide margin: the wall clock of a busy test machine is late by milliseconds
    srv = Server(s, ServerConfig(scheduler="magicbatch", emulate=True, params={"margin_ms": 50}))
    body = _zeros(1)  # (the streams' planned batch is 1: a request holds one row)
    with TestClient(create_app(srv)) as client:
        url = "/v2/models/resnet50/infer"
        for name in ("cam1", "cam2"):
            r = client.post(url, json={**body, "parameters": {"stream": name}})
            assert r.status_code == 200, r.text
        r = client.post(url, json={**body, "parameters": {"stream": "flood"}})
        assert r.status_code == 503 and "stream flood rejected by the plan" in r.json()["error"]
        r = client.post(url, json=body)  # no stream: "http", which the plan does not know
        assert r.status_code == 503 and "stream http is not in the plan" in r.json()["error"]
        for bad in (7, "", " cam1", "x" * 200, "a\nb"):
            r = client.post(url, json={**body, "parameters": {"stream": bad}})
            assert r.status_code == 400 and "parameters.stream must be" in r.json()["error"]
    get = srv.metrics.registry.get_sample_value
    assert get("hetserve_requests_total", {"model": "resnet50", "outcome": "ok"}) == 2


def test_cluster_workers_lists_each_worker_its_stages_state_and_batches():
    s = build_setup("hc1-s", ["resnet50"], plan=None)
    srv = Server(s, ServerConfig(scheduler="flex", emulate=True))
    with TestClient(create_app(srv, token="t0p")) as c:
        assert c.get("/v2/cluster/workers").status_code == 401  # behind the token
        h = {"Authorization": "Bearer t0p"}
        before = c.get("/v2/cluster/workers", headers=h).json()
        assert {w["id"] for w in before} == {w.id for w in s.placement.workers}
        for w in before:
            assert w["state"] == "ready" and w["queue"] == 0 and w["batches_served"] == 0
            assert w["gpu_type"] in ("P4", "L4") and w["share"] >= 1
            assert w["stages"] and all(st["model"] == "resnet50" for st in w["stages"])
            # an in-process engine: no Ray node, no physical GPU to report
            assert w["node_id"] is None and w["gpu_index"] is None
        assert c.post("/v2/models/resnet50/infer", json=_zeros(1), headers=h).status_code == 200
        after = c.get("/v2/cluster/workers", headers=h).json()
        assert sum(w["batches_served"] for w in after) >= 1
        ready = c.get("/v2/health/ready").json()
        assert ready == {"ready": True, "lost_workers": []}
        # a worker lost: readiness and the listing say so; the model stays ready while
        # another pipeline has every stage alive
        lost = before[0]["id"]
        srv.engine.worker_lost(lost)
        after = {w["id"]: w for w in c.get("/v2/cluster/workers", headers=h).json()}
        assert after[lost]["state"] == "lost"
        assert c.get("/v2/health/ready").json()["lost_workers"] == [lost]
        assert c.get("/v2/models/resnet50/ready", headers=h).status_code == 200
        for w in after:  # all of them: the model has no live pipeline left
            srv.engine.worker_lost(w)
        assert c.get("/v2/models/resnet50/ready", headers=h).status_code == 503
        assert c.get("/v2/health/ready").status_code == 503
        index = c.post("/v2/repository/index", json={}, headers=h).json()
        assert index[0]["state"] == "UNAVAILABLE" and "lost worker" in index[0]["reason"]


def test_an_answer_the_model_does_not_advertise_is_a_json_500_counted_as_failed():
    """Exactly once, whatever the model returns: an answer whose shape differs from the
    advertised one fails its request (the protocol's JSON error, naming the model and the
    output), is counted as failed, and the worker serves the next request; an encoding
    that raises is a JSON 500 too, never a plain-text one."""
    from dataclasses import replace

    from hetserve.core.tensors import TensorSpec

    srv = _cpu_server()
    model = build("resnet18")
    x = model.input_spec.example(1, seed=0)
    with TestClient(create_app(srv)) as c:
        right = srv.tensors("resnet18")
        wrong = replace(right, outputs=(TensorSpec("output", "FP32", (999,)),))
        srv._tensors["resnet18"] = wrong
        r = c.post("/v2/models/resnet18/infer", json=_body(x))
        assert r.status_code == 500
        err = r.json()["error"]
        assert "output 'output' has shape [1000]" in err and "advertises [999]" in err
        text = c.get("/metrics").text
        assert 'hetserve_failures_total{model="resnet18",reason="bad_output"} 1.0' in text
        assert 'hetserve_requests_total{model="resnet18",outcome="failed"} 1.0' in text
        srv._tensors["resnet18"] = right  # the worker serves on
        r = c.post("/v2/models/resnet18/infer", json=_body(x))
        assert r.status_code == 200 and r.json()["outputs"][0]["shape"] == [1, 1000]

        import hetserve.runtime.http as http_mod

        def broken(*a, **k):
            raise ValueError("cannot encode")

        real, http_mod.encode_outputs = http_mod.encode_outputs, broken
        try:
            r = c.post("/v2/models/resnet18/infer", json=_body(x))
        finally:
            http_mod.encode_outputs = real
        assert r.status_code == 500 and r.headers["content-type"] == "application/json"
        assert "could not be encoded: ValueError: cannot encode" in r.json()["error"]


@pytest.mark.parametrize(
    "scheduler, params",
    [("flex", {"max_batch": 32}), ("fixed-batch", {"max_batch": 32, "max_queue_delay_s": 0.0})],
)
def test_a_request_of_many_rows_runs_as_one_execution_on_the_cpu(scheduler, params):
    """A request is what the client sent: a 2-row and a 32-row request at low load are
    each one execution (the statistics extension shows batches of 2 and 32 rows), and the
    answers are the model's for every row; requests and rows are counted apart."""
    import numpy as np

    from hetserve.experiments.live import binary_body

    s = build_setup("local-cpu", ["resnet18"], slo_ms={"resnet18": 60000.0}, max_batch=32)
    srv = Server(s, ServerConfig(scheduler=scheduler, build=build, params=params))
    model = build("resnet18")
    with TestClient(create_app(srv)) as c:
        for n in (2, 32):
            x = model.input_spec.example(n, seed=n)
            body, hdr = binary_body(x.numpy())
            r = c.post("/v2/models/resnet18/infer", content=body, headers=hdr)
            assert r.status_code == 200, r.text
            head = int(r.headers["inference-header-content-length"])
            got = np.frombuffer(r.content[head:], dtype="<f4").reshape(n, 1000)
            with torch.inference_mode():
                want = model(x).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        stats = c.get("/v2/models/resnet18/stats").json()["model_stats"][0]
        text = c.get("/metrics").text
    assert stats["execution_count"] == 2
    assert [b["batch_size"] for b in stats["batch_stats"]] == [2, 32]
    assert stats["inference_count"] == 34 and stats["inference_stats"]["success"]["count"] == 2
    assert 'hetserve_requests_total{model="resnet18",outcome="ok"} 2.0' in text
    assert 'hetserve_rows_total{model="resnet18",outcome="ok"} 34.0' in text


def test_serve_sends_activations_at_the_plans_precision():
    """What a plan means for a run is derived once (``Setup``): a plan that sends FP32 at
    its cuts (RAMPA's) is served with FP32 cuts, as ``simulate`` simulates it; others
    with FP16 (PPipe section 6)."""
    from dataclasses import replace

    from hetserve.engine.setup import Setup

    base = build_setup("local-cpu", ["resnet18"], slo_ms={"resnet18": 20000.0}, max_batch=4)
    for factor, dtype in ((1.0, None), (0.5, torch.float16)):
        plan = replace(base.plan, meta={**base.plan.meta, "cut_bytes_factor": factor})
        s = Setup(base.cluster, base.latency, base.models, base.slos_s, plan, base.placement)
        assert s.cut_bytes_factor == factor and s.warm and s.latency_kind == "roofline"
        srv = Server(s, ServerConfig(scheduler="flex", build=build))
        with TestClient(create_app(srv)):
            assert srv.engine.view.cut_bytes_factor == factor
            assert srv.engine.executor.cut_dtype == dtype


def test_a_start_up_that_fails_says_why_in_one_line(monkeypatch):
    """The ASGI lifespan as uvicorn drives it: a start-up that raises a HetserveError
    (Ray did not start, a placement Ray cannot reserve) fails with that one line as the
    message uvicorn prints, not a traceback."""
    import asyncio

    from hetserve.core.errors import HetserveError

    srv = _cpu_server()

    def start():
        raise HetserveError("a local Ray instance did not start: the GCS timed out")

    monkeypatch.setattr(srv, "start", start)
    app = create_app(srv)
    sent = []

    async def receive():
        return {"type": "lifespan.startup"}

    async def send(msg):
        sent.append(msg)

    with pytest.raises(HetserveError):
        asyncio.run(app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}},
                        receive, send))  # fmt: skip
    assert sent == [{"type": "lifespan.startup.failed",
                     "message": "hetserve: error: a local Ray instance did not start: the GCS "
                                "timed out"}]  # fmt: skip
