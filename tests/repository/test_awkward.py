"""Models whose outputs are not the happy path (issue 39): a statistic over the batch, the
batch in another dimension than the first, nested dicts and tuples, None in a tuple, a
Hugging Face BERT that returns every hidden state, a program with a dynamic non-batch
dimension. Each is served correctly or refused with its reason, beside a healthy model
that keeps serving; never a hang, a silently wrong answer or a plain-text 500."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hetserve.core.errors import HetserveError  # noqa: E402
from tests.repository.models import repository_in_use  # noqa: E402

pytestmark = pytest.mark.torch

SOURCE = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.b = nn.Linear(16, 6)

    def forward(self, x):
        y = self.b(torch.relu(self.a(x)))
        return OUT


def build():
    return Net()


def example_inputs(batch):
    return {"x": torch.randn(batch, 8)}
"""

OUTS = {
    "plain": "y",
    "stat": "(y, y.mean())",
    "transposed": "y.t()",
    "nested": '{"a": y, "pair": {"twice": y * 2, "more": (y + 1, y - 1)}}',
    "holes": "(y, None, y * 3)",
}


def _eager(name):
    ns: dict = {}
    exec(SOURCE.replace("OUT", OUTS[name]), ns)
    torch.manual_seed(7)
    return ns["build"]().eval()


def _write(root):
    from safetensors.torch import save_file
    from transformers import BertConfig, BertForSequenceClassification

    for name, out in OUTS.items():
        d = root / name / "1"
        d.mkdir(parents=True)
        (d / "model.py").write_text(SOURCE.replace("OUT", out))
        save_file(_eager(name).state_dict(), str(d / "w.safetensors"))
        (root / name / "config.yaml").write_text("slo_ms: 5000\n")
    torch.manual_seed(0)
    bert = BertForSequenceClassification(BertConfig(
        vocab_size=500, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, num_labels=3, max_position_embeddings=32,
        output_hidden_states=True)).eval()  # fmt: skip
    bert.save_pretrained(root / "bert-hs" / "1", safe_serialization=True)
    (root / "bert-hs" / "config.yaml").write_text(
        "slo_ms: 5000\ninputs: [{name: input_ids, shape: [16]}]\n"
    )
    # a program whose second input dimension is dynamic: config.yaml names the size to serve
    net = _eager("plain")

    class Seq(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x):
            return self.net(x).mean(1)

    b, s = torch.export.Dim("batch", min=1, max=64), torch.export.Dim("seq", min=2, max=64)
    ep = torch.export.export(Seq(), (torch.randn(2, 5, 8),), dynamic_shapes=({0: b, 1: s},))
    for name, cfg in (("seq-pt2", "inputs: [{name: x, shape: [7, 8]}]\n"), ("seq-bare", "")):
        (root / name / "1").mkdir(parents=True)
        torch.export.save(ep, str(root / name / "1" / "model.pt2"))
        (root / name / "config.yaml").write_text(cfg)
    return bert, Seq().eval()


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("awkward")
    bert, seq = _write(root)
    cache = tmp_path_factory.mktemp("cache")
    with repository_in_use(root, cache):
        yield root, cache, bert, seq


@pytest.fixture(scope="module")
def catalog(repo):
    """The repository's models as a command names them (``--model-repository``)."""
    from hetserve.core.models import ModelCatalog
    from hetserve.repository.models import ModelRepository

    return ModelCatalog(ModelRepository(repo[0]))


def _built(catalog, name):
    return catalog.source.build(name)


def test_outputs_are_named_by_their_path_and_none_is_left_out(repo, catalog):
    assert [o.name for o in catalog.graph("nested").outputs] == [
        "a", "pair.twice", "pair.more.0", "pair.more.1",
    ]  # fmt: skip
    assert [o.name for o in catalog.graph("holes").outputs] == ["output_0", "output_2"]
    assert [(o.name, o.shape) for o in catalog.graph("transposed").outputs] == [("output", (6,))]
    assert catalog.graph("transposed").meta["batch_moved"] == "output (at 1)"
    names = [o.name for o in catalog.graph("bert-hs").outputs]
    assert names == ["logits", "hidden_states.0", "hidden_states.1", "hidden_states.2"]


@pytest.mark.parametrize("name", ["nested", "holes", "transposed"])
def test_the_served_rows_are_the_eager_models_answers(repo, catalog, name):
    net, eager = _built(catalog, name), _eager(name)
    x = torch.randn(5, 8)
    with torch.no_grad():
        got = net.run_layers((x,), 0, len(net.layers))
        want = eager(x)
    got = got if isinstance(got, tuple) else (got,)
    if name == "nested":
        want = (want["a"], want["pair"]["twice"], *want["pair"]["more"])
    elif name == "holes":
        want = (want[0], want[2])
    else:  # transposed: the batch moved to the front, so row i is the eager column i
        want = (want.t(),)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


def test_a_statistic_over_the_batch_is_refused_with_its_reason(repo, catalog):
    with pytest.raises(HetserveError, match=r"output 'output_1' has shape \[\] .*no batch"):
        catalog.graph("stat")


def test_a_dynamic_non_batch_dimension_takes_config_yamls_size(repo, catalog):
    _, _, _, seq = repo
    g = catalog.graph("seq-pt2")
    assert [(i.name, i.shape) for i in g.inputs] == [("x", (7, 8))]
    net = _built(catalog, "seq-pt2")
    x = torch.randn(3, 7, 8)
    with torch.no_grad():
        torch.testing.assert_close(net.run_layers((x,), 0, len(net.layers)), seq(x))
    with pytest.raises(HetserveError, match=r"dynamic non-batch dimension \(1\); give the size"):
        catalog.graph("seq-bare")


def _outputs(r):
    return {o["name"]: np.asarray(o["data"]).reshape(o["shape"]) for o in r.json()["outputs"]}


def _cli(args, env):
    return subprocess.run([sys.executable, "-m", "hetserve", *args], capture_output=True,
                          text=True, env=env, timeout=600)  # fmt: skip


def test_model_list_says_which_cannot_load_and_why(repo):
    root, cache, _, _ = repo
    env = {**os.environ, "HETSERVE_CACHE": str(cache)}
    r = _cli(["model", "list", "--model-repository", str(root)], env)
    assert r.returncode == 0, r.stderr
    line = next(s for s in r.stdout.splitlines() if s.strip().startswith("│ stat"))
    assert "UNAVAILABLE" in line
    nested = next(s for s in r.stdout.splitlines() if s.strip().startswith("│ nested"))
    assert "ok" in nested


@pytest.mark.parametrize("engine", ["threads", "ray"])
def test_serve_answers_the_awkward_models_and_refuses_the_broken_one(repo, tmp_path, engine):
    """A real ``serve`` process (threads, then Ray actors): the healthy model and every
    awkward one that can be served answer as the eager model does; the statistic is
    UNAVAILABLE with its reason; SIGTERM exits 0 promptly."""
    import time

    from tests.runtime.serving import start_serve

    root, cache, bert, _ = repo
    env = {**os.environ, "HETSERVE_CACHE": str(cache), "PYTHONUNBUFFERED": "1"}
    models = "plain,stat,transposed,nested,holes,bert-hs"
    args = ["--model-repository", str(root), "--models", models, "--engine", engine,
            "--max-batch", "4"]  # fmt: skip
    proc, url, out = start_serve(tmp_path, args, env, timeout_s=300)
    try:
        log = out.read()
        assert "model stat is UNAVAILABLE (the others serve)" in log and "no batch" in log
        assert "transposed: the batch dimension of output (at 1) is moved to the front" in log
        index = {e["name"]: e for e in httpx.post(f"{url}/v2/repository/index").json()}
        assert index["stat"]["state"] == "UNAVAILABLE" and "no batch" in index["stat"]["reason"]

        rng = np.random.default_rng(3)
        x = rng.standard_normal((3, 8)).astype(np.float32)
        body = {"inputs": [{"name": "x", "shape": [3, 8], "datatype": "FP32",
                            "data": x.ravel().tolist()}]}  # fmt: skip
        for name in ("plain", "transposed", "nested", "holes"):
            r = httpx.post(f"{url}/v2/models/{name}/infer", json=body, timeout=60)
            assert r.status_code == 200, (name, r.text)
            got = {
                o["name"]: np.asarray(o["data"]).reshape(o["shape"]) for o in r.json()["outputs"]
            }
            with torch.no_grad():
                want = _eager(name)(torch.from_numpy(x))
            y = want if name in ("plain",) else None
            if name == "transposed":
                y = want.t()
            if name == "nested":
                y = want["a"]
                np.testing.assert_allclose(got["pair.more.1"], want["pair"]["more"][1].numpy(),
                                           rtol=1e-5, atol=1e-6)  # fmt: skip
            if name == "holes":
                y = want[0]
                assert sorted(got) == ["output_0", "output_2"]
            first = (
                got["a"] if name == "nested" else got["output_0" if name == "holes" else "output"]
            )
            np.testing.assert_allclose(first, y.numpy(), rtol=1e-5, atol=1e-6)
        r = httpx.post(f"{url}/v2/models/stat/infer", json=body)
        assert r.status_code == 404 and "UNAVAILABLE" in r.json()["error"]

        ids = rng.integers(0, 500, (2, 16)).astype(np.int64)
        body = {"inputs": [{"name": "input_ids", "shape": [2, 16], "datatype": "INT64",
                            "data": ids.ravel().tolist()},
                           {"name": "attention_mask", "shape": [2, 16], "datatype": "INT64",
                            "data": [1] * 32}]}  # fmt: skip
        r = httpx.post(f"{url}/v2/models/bert-hs/infer", json=body, timeout=60)
        assert r.status_code == 200, r.text
        got = _outputs(r)
        with torch.no_grad():
            want = bert(input_ids=torch.from_numpy(ids), attention_mask=torch.ones(2, 16).long())
        assert sorted(got) == sorted(["logits", *(f"hidden_states.{k}" for k in range(3))])
        for k in range(3):
            np.testing.assert_allclose(got[f"hidden_states.{k}"], want.hidden_states[k].numpy(),
                                       rtol=1e-4, atol=1e-5)  # fmt: skip
    finally:
        t0 = time.monotonic()
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert time.monotonic() - t0 < 30  # promptly: nothing was left hanging
        out.close()
