"""Model versions (Triton's version policies): which versions serve and why the others do
not, batches that mix versions, and a real ``serve`` process answering each version with
its own weights while a broken model beside it is UNAVAILABLE."""

from __future__ import annotations

import os
import signal
import textwrap

import httpx
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from hetserve.core.latency import RooflineModel  # noqa: E402
from hetserve.repository import models  # noqa: E402
from hetserve.runtime.torch_executor import TorchExecutor  # noqa: E402
from hetserve.zoo.registry import builder  # noqa: E402
from tests.repository.models import MODEL_PY, eager_outputs, repository_in_use  # noqa: E402

pytestmark = pytest.mark.torch


def _version(root, name, v, source, seed):
    from safetensors.torch import save_file

    ns: dict = {}
    exec(source, ns)
    torch.manual_seed(seed)
    net = ns["build"]().eval()
    d = root / name / str(v)
    d.mkdir(parents=True)
    (d / "model.py").write_text(textwrap.dedent(source))
    save_file(net.state_dict(), str(d / "weights.safetensors"))
    return net


@pytest.fixture(scope="module")
def vrepo(tmp_path_factory):
    """skipnet: version 1 another architecture (four residual blocks), versions 2 and 3
    the same one with different weights, policy all; broken: a corrupt safetensors."""
    root = tmp_path_factory.mktemp("vrepo")
    other = MODEL_PY.replace("range(6)", "range(4)")
    assert other != MODEL_PY
    eager = {v: _version(root, "skipnet", v, src, seed)
             for v, src, seed in ((1, other, 1), (2, MODEL_PY, 2), (3, MODEL_PY, 3))}  # fmt: skip
    (root / "skipnet" / "config.yaml").write_text(
        "max_batch_size: 16\nslo_ms: 500\nversion_policy: all\n"
    )
    d = root / "broken" / "1"
    d.mkdir(parents=True)
    (d / "model.py").write_text(MODEL_PY)
    (d / "w.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not a header")
    cache = tmp_path_factory.mktemp("vcache")
    with repository_in_use(root, cache):
        yield root, eager, cache


@pytest.fixture(scope="module")
def catalog(vrepo):
    """The repository's models as a command names them (``--model-repository``)."""
    from hetserve.core.models import ModelCatalog
    from hetserve.repository.models import ModelRepository

    return ModelCatalog(ModelRepository(vrepo[0]))


def test_version_states_follow_the_policy_and_the_graph(vrepo, catalog, tmp_path):
    root, _, _ = vrepo
    repo = catalog.source
    states = repo.version_states("skipnet")
    assert [(s.version, s.state) for s in states] == [
        (1, "UNAVAILABLE"), (2, "READY"), (3, "READY"),
    ]  # fmt: skip
    assert "differ from version 3's" in states[0].reason
    ok, broken = repo.serving(["skipnet", "broken", "resnet18"])
    assert list(ok) == ["skipnet"] and list(broken) == ["broken"]
    assert broken["broken"][0] == 1 and "not a readable safetensors file" in broken["broken"][1]
    # {latest: 1}: the older versions are not served, and the states say so
    (root / "skipnet" / "config.yaml").write_text("max_batch_size: 16\nslo_ms: 500\n")
    try:
        states = models.ModelRepository(root).version_states("skipnet")
    finally:
        (root / "skipnet" / "config.yaml").write_text(
            "max_batch_size: 16\nslo_ms: 500\nversion_policy: all\n"
        )
    assert [s.state for s in states] == ["UNAVAILABLE", "UNAVAILABLE", "READY"]
    assert all("version policy (latest: 1)" in s.reason for s in states[:2])


def test_a_batch_mixing_versions_runs_each_row_with_its_versions_weights(vrepo, catalog):
    """Rows of versions 2 and 3 in one batch, over two stages: each row equals its own
    version's eager model; a stop leaves both parts at the same block."""
    _, eager, _ = vrepo
    versions = (2, None, 2, None, None, 2)  # None: the default version (3)
    ex = TorchExecutor(builder(catalog), n_blocks=4, cut_fp16=False, graphs=catalog.graph)
    n = len(RooflineModel(catalog.graph, n_blocks=4).blocks("skipnet"))
    x = torch.randn(len(versions), 3, 32, 32, generator=torch.Generator().manual_seed(0))
    a = ex.run_stage("w0", "skipnet", (0, 2), x, versions)
    b = ex.run_stage("w1", "skipnet", (2, n), a.output, versions)
    assert a.completed and b.completed
    logits, boxes = b.output
    for i, v in enumerate(versions):
        want = eager_outputs("skipnet", eager[v or 3], (x[i : i + 1],))
        torch.testing.assert_close(logits[i : i + 1], want[0], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(boxes[i : i + 1], want[1], rtol=1e-4, atol=1e-5)
    # the versions really differ (else the test could not fail)
    assert not torch.allclose(eager_outputs("skipnet", eager[2], (x,))[0],
                              eager_outputs("skipnet", eager[3], (x,))[0])  # fmt: skip
    asked = []
    stopped = ex.run_stage("w0", "skipnet", (0, 2), x, versions, lambda: asked.append(1) or True)
    assert not stopped.completed and stopped.blocks_done == 1 and asked


def test_serve_answers_each_version_with_its_weights_beside_a_broken_model(vrepo, tmp_path):
    import tritonclient.http as triton

    from tests.runtime.serving import start_serve

    root, eager, cache = vrepo
    env = {**os.environ, "HETSERVE_CACHE": str(cache), "PYTHONUNBUFFERED": "1"}
    args = ["--model-repository", str(root), "--models", "skipnet,broken", "--engine",
            "threads", "--max-batch", "8"]  # fmt: skip
    proc, url, out = start_serve(tmp_path, args, env, timeout_s=240)
    try:
        log = out.read()
        assert "model broken is UNAVAILABLE (the others serve)" in log
        assert "skipnet version 1: UNAVAILABLE" in log
        c = triton.InferenceServerClient(url.removeprefix("http://"))
        assert c.get_model_metadata("skipnet")["versions"] == ["2", "3"]
        index = {(e["name"], e["version"]): e for e in c.get_model_repository_index()}
        assert {k: e["state"] for k, e in index.items()} == {
            ("skipnet", "1"): "UNAVAILABLE", ("skipnet", "2"): "READY",
            ("skipnet", "3"): "READY", ("broken", "1"): "UNAVAILABLE",
        }  # fmt: skip
        assert "differ from version 3's" in index[("skipnet", "1")]["reason"]
        assert "safetensors" in index[("broken", "1")]["reason"]

        rng = np.random.default_rng(0)
        xs = [rng.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(16)]

        # versions 2 and 3 and the default, sent together (batches that mix versions);
        # the client's own concurrency (its connections are not for threads)
        pool = triton.InferenceServerClient(url.removeprefix("http://"), concurrency=8)
        sent = []
        for i, x in enumerate(xs):
            inp = triton.InferInput("image", [1, 3, 32, 32], "FP32")
            inp.set_data_from_numpy(x)
            version = ("2", "3", "")[i % 3]
            sent.append(pool.async_infer("skipnet", [inp], model_version=version,
                                         timeout=30_000_000))  # fmt: skip
        got = []
        for req in sent:
            res = req.get_result()
            got.append((res.get_response()["model_version"], res.as_numpy("logits")))
        pool.close()
        for i, (used, logits) in enumerate(got):
            want = ("2", "3", "3")[i % 3]
            assert used == want
            (ref, _) = eager_outputs("skipnet", eager[int(want)], (torch.from_numpy(xs[i]),))
            np.testing.assert_allclose(logits, ref.numpy(), rtol=1e-4, atol=1e-5)

        # the statistics extension per version: 6 requests named version 2, 10 got 3
        stats = {e["version"]: e for e in c.get_inference_statistics("skipnet")["model_stats"]}
        assert set(stats) == {"2", "3"}
        assert stats["2"]["inference_stats"]["success"]["count"] == 6
        assert stats["3"]["inference_stats"]["success"]["count"] == 10
        for e in stats.values():  # each version's rows ran, on the server's measured clock
            assert e["execution_count"] >= 1 and e["inference_stats"]["compute_infer"]["ns"] > 0
        (only,) = c.get_inference_statistics("skipnet", "2")["model_stats"]
        assert only["version"] == "2" and only["inference_count"] == 6

        body = {"inputs": [{"name": "image", "shape": [1, 3, 32, 32], "datatype": "FP32",
                            "data": xs[0].ravel().tolist()}]}  # fmt: skip
        r = httpx.post(f"{url}/v2/models/skipnet/versions/1/infer", json=body)
        assert r.status_code == 404 and "UNAVAILABLE" in r.json()["error"]
        r = httpx.post(f"{url}/v2/models/skipnet/versions/9/infer", json=body)
        assert r.status_code == 404 and "versions: 2, 3" in r.json()["error"]
        r = httpx.post(f"{url}/v2/models/skipnet/versions/2/infer",
                       json={**body, "model_version": "3"})  # fmt: skip
        assert r.status_code == 400 and "route names version '2'" in r.json()["error"]
        r = httpx.post(f"{url}/v2/models/broken/infer", json=body)
        assert r.status_code == 404
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        out.close()


def test_serve_emulated_repository_model(vrepo, tmp_path):
    """--emulate serves a repository model (timing from the latency model, no outputs),
    each version routed, under a scheduler other than the default."""
    from tests.runtime.serving import start_serve

    root, _, cache = vrepo
    env = {**os.environ, "HETSERVE_CACHE": str(cache), "PYTHONUNBUFFERED": "1"}
    # (margin_s: a lone request otherwise waits to its last moment for a fuller batch,
    # and a timer a few ms late on a loaded machine finds it dropped at its deadline)
    args = ["--model-repository", str(root), "--models", "skipnet", "--emulate",
            "--scheduler", "edf-adaptive", "--param", "margin_s=0.2"]  # fmt: skip
    proc, url, out = start_serve(tmp_path, args, env, timeout_s=240)
    try:
        x = np.zeros((2, 3, 32, 32), np.float32)
        body = {"inputs": [{"name": "image", "shape": list(x.shape), "datatype": "FP32",
                            "data": x.ravel().tolist()}]}  # fmt: skip
        for path, version in (("", "3"), ("/versions/2", "2")):
            r = httpx.post(f"{url}/v2/models/skipnet{path}/infer", json=body, timeout=30)
            assert r.status_code == 200, r.text
            assert r.json()["model_version"] == version
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        out.close()


def test_a_cold_start_plan_refuses_several_versions(vrepo, tmp_path):
    """DeepPlan's cold starts load one version: serving several under one is refused at
    start-up, in one line, rather than answering every version with the default's weights."""
    import subprocess
    import sys

    root, _, cache = vrepo
    env = {**os.environ, "HETSERVE_CACHE": str(cache)}
    plan = tmp_path / "dp.json"
    base = [sys.executable, "-m", "hetserve"]
    subprocess.run(
        [*base, "plan", "--planner", "deepplan", "--model-repository", str(root), "--models",
         "skipnet", "--cluster", "p3-8xlarge", "--output", str(plan)],
        check=True, env=env, capture_output=True, timeout=300,
    )  # fmt: skip
    r = subprocess.run(
        [*base, "serve", "--model-repository", str(root), "--plan", str(plan), "--cluster",
         "p3-8xlarge", "--engine", "threads", "--check"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip().splitlines() == [
        "hetserve: error: model skipnet: a cold-start plan loads one version of a model; its "
        "version_policy serves 2"
    ]
