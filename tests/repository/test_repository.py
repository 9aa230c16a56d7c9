"""Repository models end to end: import (tensors, cut points, graph), execution with
their own weights block by block, planning, simulation and serving — on models nobody
here wrote (transformers BERT, GPT-2, ViT; random weights from their configs) and a CNN
with skips and two outputs written here, as Hugging Face folders, model.py + safetensors
and torch.export programs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hetserve.core.latency import RooflineModel  # noqa: E402
from hetserve.repository import cuts  # noqa: E402
from hetserve.runtime.stage import StageRunner  # noqa: E402
from hetserve.zoo.registry import build  # noqa: E402
from tests.repository.models import (  # noqa: E402
    eager_outputs,
    repository_in_use,
    write_repository,
)

pytestmark = pytest.mark.torch
NAMES = ["tiny-bert", "tiny-gpt2", "tiny-vit", "skipnet", "skipnet-pt2", "vit-pt2"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo")
    eager = write_repository(root)
    cache = tmp_path_factory.mktemp("cache")
    with repository_in_use(root, cache):
        yield root, eager, cache


@pytest.fixture(scope="module")
def catalog(repo):
    """The repository's models as a command names them (``--model-repository``)."""
    from hetserve.core.models import ModelCatalog
    from hetserve.repository.models import ModelRepository

    return ModelCatalog(ModelRepository(repo[0]))


def _inputs(net, batch, seed=5):
    x = net.input_spec.example(batch, seed=seed)
    return x if isinstance(x, tuple) else (x,)


def test_tensors_derived_from_the_models(repo, catalog):
    g = catalog.graph("tiny-bert")
    assert [(s.name, s.datatype, s.shape, s.value_range) for s in g.inputs] == [
        ("input_ids", "INT64", (32,), (0, 1000)),
        ("attention_mask", "INT64", (32,), (0, 2)),
    ]
    assert [(s.name, s.shape) for s in g.outputs] == [("logits", (3,))]
    assert [(s.name, s.shape) for s in catalog.graph("tiny-gpt2").outputs] == [
        ("logits", (16, 1000))
    ]
    for name in ("skipnet", "skipnet-pt2"):
        g = catalog.graph(name)
        assert [(s.name, s.datatype, s.shape) for s in g.inputs] == [("image", "FP32", (3, 32, 32))]
        assert [(s.name, s.shape) for s in g.outputs] == [("logits", (10,)), ("boxes", (4,))]
    assert [s.name for s in catalog.graph("tiny-vit").inputs] == ["pixel_values"]
    assert catalog.graph("tiny-bert").meta["max_batch"] == 16


@pytest.mark.parametrize("name", NAMES)
def test_blocks_compose_to_the_eager_model(repo, name, catalog):
    """Batch 1, 7 and the max batch: the blocks run in sequence equal the eager model."""
    _, eager, _ = repo
    net = build(name, model_catalog=catalog)
    g = catalog.graph(name)
    assert len(net.layers) == len(g.layers) >= 4
    for batch in (1, 7, g.meta["max_batch"]):
        xs = _inputs(net, batch)
        out = net.run_layers(xs if len(xs) > 1 else xs[0], 0, len(net.layers))
        out = out if isinstance(out, tuple) else (out,)
        ref = eager_outputs(name, eager[name], xs)
        assert len(out) == len(ref)
        for o, r in zip(out, ref, strict=True):
            assert o.shape == r.shape
            torch.testing.assert_close(o, r, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["tiny-bert", "skipnet", "vit-pt2"])
def test_any_block_range_continues_on_another_worker(repo, name, catalog):
    """Blocks [0, k) on one runner and [k, n) on another give the whole model's result:
    exactly with FP32 cuts, within FP16 rounding with FP16 cuts."""
    net = build(name, model_catalog=catalog)
    blocks = RooflineModel(catalog.graph, n_blocks=10).blocks(name)
    n = len(blocks)
    xs = _inputs(net, 3)
    x = xs if len(xs) > 1 else xs[0]
    whole = StageRunner(net, blocks, (0, n), cut_dtype=None).run(x).output
    for k in range(1, n):
        for cut in (None, torch.float16):
            a = StageRunner(net, blocks, (0, k), cut_dtype=cut).run(x)
            b = StageRunner(build(name, model_catalog=catalog), blocks, (k, n), cut_dtype=cut).run(
                a.output
            )
            got = b.output if isinstance(b.output, tuple) else (b.output,)
            want = whole if isinstance(whole, tuple) else (whole,)
            for o, w in zip(got, want, strict=True):
                if cut is None:
                    assert torch.equal(o, w), (name, k)
                else:
                    torch.testing.assert_close(o, w, rtol=2e-2, atol=2e-3)


@pytest.mark.parametrize("name", ["tiny-gpt2", "skipnet"])
def test_blocks_share_the_loaded_weights(repo, name, catalog):
    net = build(name, model_catalog=catalog)
    own = {t.data_ptr() for t in [*net.program.parameters(), *net.program.buffers()]}
    used = {t.data_ptr() for layer in net.layers for t in [*layer.parameters(), *layer.buffers()]}
    assert used and used <= own  # no piece holds a copy


def test_cut_points_hold_few_tensors_and_no_sizes(repo, catalog):
    """Cuts fall where few tensors are live (one between the CNN's residual blocks); no
    piece takes a symbolic size across a cut: its inputs are tensors only."""
    net = build("skipnet", model_catalog=catalog)
    for layer in net.layers:
        for n in layer.graph.nodes:
            if n.op == "placeholder":
                assert isinstance(n.meta.get("val"), torch.Tensor)
    ep = torch.export.load(str(repo[0] / "skipnet-pt2" / "1" / "model.pt2"))
    c = cuts.Cutter(cuts.flatten(ep))
    index = {n.name: i for i, n in enumerate(c.compute)}
    live = [len(c.position(index[b]).live) for b in catalog.graph("skipnet-pt2").meta["cuts"]]
    assert live.count(1) >= 6 and max(live) <= 2
    bert = build("tiny-bert", model_catalog=catalog)
    assert any(
        n.target is torch.ops.aten.sym_size.int
        for layer in bert.layers[1:]
        for n in layer.graph.nodes
    )  # fmt: skip  (the batch size, recomputed from a live tensor's shape)


def test_graph_is_cached_by_the_files_hash(repo):
    _root, _, cache = repo
    folders = sorted(p.name for p in (cache / "imports").iterdir())
    assert any(f.startswith("skipnet-v1-") for f in folders)
    g = json.loads(next((cache / "imports").glob("skipnet-v1-*/graph.json")).read_text())
    assert g["meta"]["format"] == "python" and g["meta"]["digest"]


def _file_mapped(ts):
    """How many of the tensors lie in a mapping of a .safetensors file (/proc/self/maps)."""
    spans = []
    for line in open("/proc/self/maps"):
        parts = line.split()
        if len(parts) >= 6 and parts[5].endswith(".safetensors"):
            a, b = (int(x, 16) for x in parts[0].split("-"))
            spans.append((a, b))
    return sum(any(a <= t.data_ptr() < b for a, b in spans) for t in ts)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc (Linux)")
@pytest.mark.parametrize("name", ["tiny-bert", "skipnet", "vit-pt2"])
def test_safetensors_weights_are_mapped_from_their_files(repo, name, catalog):
    """model.py and Hugging Face weights are the safetensors files' pages (not copies);
    a model.pt2's are read into memory."""
    net = build(name, model_catalog=catalog)
    ts = [t for t in [*net.program.parameters(), *net.program.buffers()] if t.is_floating_point()]
    mapped = _file_mapped(ts)
    assert mapped == (0 if name == "vit-pt2" else len(ts)), (name, mapped, len(ts))


@pytest.mark.parametrize("name", ["tiny-bert", "skipnet", "vit-pt2"])
def test_layer_tables_have_a_row_per_leaf_module_call(repo, name, catalog):
    """DeepPlan's layer table of a repository model: its rows are the eager model's own
    leaf modules (path and class), in order, and add up to the graph's weights and FLOPs."""

    _, eager, _ = repo
    table = catalog.layer_table(name)
    g = catalog.graph(name)
    modules = dict(eager[name].named_modules())
    for leaf in table.leaves:
        assert leaf.name in modules, leaf.name
        mod = modules[leaf.name]
        assert next(mod.children(), None) is None and type(mod).__name__ == leaf.kind
    assert [x.layer for x in table.leaves] == sorted(x.layer for x in table.leaves)
    assert {x.layer for x in table.leaves} <= set(range(len(g.layers)))
    assert table.param_bytes == pytest.approx(g.param_bytes)
    assert sum(x.flops for x in table.leaves) == pytest.approx(sum(x.flops for x in g.layers))
    kinds = {x.kind for x in table.leaves}
    assert {"Linear", "LayerNorm"} <= kinds if name != "skipnet" else {"Conv2d", "Linear"} <= kinds
    # every weighted leaf of the eager model has its row (the table misses no weight)
    weighted = {
        n
        for n, m in modules.items()
        if next(m.children(), None) is None and any(True for _ in m.parameters())
    }
    assert weighted <= {x.name for x in table.leaves}


def test_plan_deepplan_on_a_repository_model(repo, tmp_path):
    root, _, cache = repo
    env = {**os.environ, "HETSERVE_CACHE": str(cache)}
    plan = tmp_path / "dp.json"
    r = _cli(["plan", "--planner", "deepplan", "--model-repository", str(root), "--models",
              "tiny-bert", "--cluster", "p3-8xlarge", "--output", str(plan)], env)  # fmt: skip
    assert "tiny-bert" in r.stdout
    p = json.loads(plan.read_text())
    assert "tiny-bert" in p["load_plans"]


def _cli(args, env, check=True):
    r = subprocess.run(
        [sys.executable, "-m", "hetserve", *args], capture_output=True, text=True, env=env,
        timeout=300,
    )  # fmt: skip
    if check:
        assert r.returncode == 0, r.stderr
    return r


@pytest.fixture(scope="module")
def bigger(tmp_path_factory):
    """A BERT large enough that PPipe's MILP splits it over a P4 and L4 slices."""
    from transformers import BertConfig, BertForSequenceClassification

    root = tmp_path_factory.mktemp("repo2")
    torch.manual_seed(0)
    BertForSequenceClassification(BertConfig(
        vocab_size=2000, hidden_size=384, num_hidden_layers=6, num_attention_heads=6,
        intermediate_size=1536, num_labels=3, max_position_embeddings=128,
    )).save_pretrained(root / "small-bert" / "1", safe_serialization=True)  # fmt: skip
    env = {**os.environ, "HETSERVE_CACHE": str(tmp_path_factory.mktemp("cache2"))}
    return root, env


def test_plan_ppipe_cuts_a_repository_model_into_a_pipeline_and_simulates(bigger, tmp_path):
    root, env = bigger
    plan = tmp_path / "plan.json"
    _cli(["plan", "--planner", "ppipe", "--model-repository", str(root), "--models",
          "small-bert", "--cluster", "hc1-s", "--output", str(plan)], env)  # fmt: skip
    p = json.loads(plan.read_text())
    stages = [len(pl["stages"]) for pl in p["models"]["small-bert"]["pipelines"]]
    assert max(stages) >= 2, stages
    env2 = {**env, "HETSERVE_MODEL_REPOSITORY": str(root)}  # the variable, not the option
    _cli(["simulate", "--plan", str(plan), "--cluster", "hc1-s", "--rate", "2000",
          "--duration", "2", "--out", str(tmp_path / "sim")], env2)  # fmt: skip
    out = json.loads((tmp_path / "sim" / "summary.json").read_text())
    assert out["arrived"] > 3000 and out["attainment"] > 0.9
    assert set(out["utilization"]) == {"L4", "P4"}  # both stages' GPU types ran


def test_a_repository_named_once_is_not_kept_for_the_next_command(repo, capsys):
    """The catalog lives in one invocation (no module-level active repository): in one
    process, a command after one with ``--model-repository`` sees the zoo alone."""
    from hetserve.cli import main

    root = str(repo[0])
    assert main(["model", "show", "skipnet", "--model-repository", root, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "skipnet"
    assert main(["model", "show", "skipnet", "--json"]) == 2
    assert "unknown model 'skipnet'" in capsys.readouterr().err
    assert main(["model", "list"]) == 0
    assert "model repository" not in capsys.readouterr().out


def test_model_list_and_show_name_repository_models(repo):
    root, _, cache = repo
    env = {**os.environ, "HETSERVE_CACHE": str(cache)}
    r = _cli(["model", "list", "--model-repository", str(root)], env)
    assert "tiny-gpt2" in r.stdout and "huggingface" in r.stdout
    # a program whose outputs are transformers classes, read by a fresh process with a
    # fresh cache (transformers' output types must be registered before torch reads it)
    fresh = {**env, "HETSERVE_CACHE": str(cache.parent / "fresh-cache")}
    r = _cli(["model", "show", "vit-pt2", "--model-repository", str(root), "--json"], fresh)
    assert [o["shape"] for o in json.loads(r.stdout)["outputs"]] == [[5]]
    r = _cli(["model", "show", "skipnet", "--model-repository", str(root), "--json"], env)
    shown = json.loads(r.stdout)
    assert shown["name"] == "skipnet" and [o["name"] for o in shown["outputs"]] == [
        "logits",
        "boxes",
    ]


def test_serve_answers_tritonclient_with_the_eager_models_outputs(repo, tmp_path):
    """A real ``hetserve serve`` process: metadata from the models (two inputs; two
    outputs), and outputs equal to the eager models' for requests a standard client sent."""
    import signal

    import tritonclient.http as triton

    from tests.runtime.serving import start_serve

    root, eager, cache = repo
    env = {**os.environ, "HETSERVE_CACHE": str(cache), "PYTHONUNBUFFERED": "1"}
    args = ["--model-repository", str(root), "--models", "tiny-bert,skipnet", "--engine",
            "threads"]  # fmt: skip
    proc, url, out = start_serve(tmp_path, args, env, timeout_s=240)
    try:
        c = triton.InferenceServerClient(url.removeprefix("http://"))
        meta = c.get_model_metadata("tiny-bert")
        assert [(i["name"], i["datatype"], i["shape"]) for i in meta["inputs"]] == [
            ("input_ids", "INT64", [-1, 32]),
            ("attention_mask", "INT64", [-1, 32]),
        ]
        assert [o["name"] for o in c.get_model_metadata("skipnet")["outputs"]] == [
            "logits", "boxes",
        ]  # fmt: skip
        rng = np.random.default_rng(0)
        ids = rng.integers(0, 1000, (3, 32)).astype(np.int64)
        mask = np.ones((3, 32), np.int64)
        mask[2, 20:] = 0
        a = triton.InferInput("input_ids", list(ids.shape), "INT64")
        a.set_data_from_numpy(ids)
        b = triton.InferInput("attention_mask", list(mask.shape), "INT64")
        b.set_data_from_numpy(mask)
        got = c.infer("tiny-bert", [a, b], timeout=30_000_000).as_numpy("logits")
        (want,) = eager_outputs(
            "tiny-bert", eager["tiny-bert"], (torch.from_numpy(ids), torch.from_numpy(mask))
        )
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)
        x = rng.standard_normal((2, 3, 32, 32)).astype(np.float32)
        i = triton.InferInput("image", list(x.shape), "FP32")
        i.set_data_from_numpy(x)
        res = c.infer("skipnet", [i], timeout=30_000_000)
        logits, boxes = eager_outputs("skipnet", eager["skipnet"], (torch.from_numpy(x),))
        np.testing.assert_allclose(res.as_numpy("logits"), logits.numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(res.as_numpy("boxes"), boxes.numpy(), rtol=1e-4, atol=1e-5)
        bad = triton.InferInput("input_ids", [17, 32], "INT64")  # over max_batch_size 16
        bad.set_data_from_numpy(np.zeros((17, 32), np.int64))
        with pytest.raises(Exception, match="400|batch"):
            c.infer("tiny-bert", [bad, b])
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        out.close()


@pytest.mark.parametrize("name", ["tiny-bert", "tiny-gpt2"])
def test_moving_a_model_moves_the_devices_its_graph_recorded(repo, name, catalog):
    """The export records the example inputs' device in ``arange``/``to`` calls (a BERT's
    attention bias); moving the model moves them too, or on a GPU those tensors stay on
    the CPU and the first block fails (seen on an H200, issue 43). The meta device stands
    in for the GPU here; moved back to the CPU the model gives the same outputs."""
    import copy

    net = build(name, model_catalog=catalog)

    def recorded(m):
        return {str(n.kwargs["device"]) for layer in m.layers for n in layer.graph.nodes
                if n.kwargs.get("device") is not None}  # fmt: skip

    assert recorded(net) == {"cpu"}, "the export recorded no device: the test checks nothing"
    x = net.input_spec.example(3)
    with torch.no_grad():
        before = net.run_layers(x, 0, len(net.layers))
    elsewhere = copy.deepcopy(net).to("meta")
    assert recorded(elsewhere) == {"meta"}
    net.to(torch.device("cpu"))
    assert recorded(net) == {"cpu"}
    with torch.no_grad():
        after = net.run_layers(x, 0, len(net.layers))
    after, before = (t if isinstance(t, tuple) else (t,) for t in (after, before))
    assert all(torch.equal(a, b) for a, b in zip(after, before, strict=True))


def test_show_layers_lists_the_leaf_modules_and_names_say_what_a_layer_holds(repo, capsys):
    """``model show --layers`` on a repository model: its layers (the cut pieces), named
    by the one module they hold whole or by their first and last module, then DeepPlan's
    per-leaf-module table as docs/repository.md promises."""
    from hetserve.cli import main

    root = str(repo[0])
    assert main(["model", "show", "tiny-bert", "--model-repository", root, "--json"]) == 0
    names = [layer["name"] for layer in json.loads(capsys.readouterr().out)["layers"]]
    # the first piece holds the embeddings and part of layer 0: not just "bert"
    assert names[0].startswith("bert.embeddings") and " .. bert.encoder.layer.0" in names[0]
    assert "bert" not in names and all(n for n in names)
    assert main(["model", "show", "tiny-bert", "--model-repository", root, "--layers"]) == 0
    out = capsys.readouterr().out
    assert "leaf modules (DeepPlan's layer table" in out
    assert "bert.embeddings.word_embeddings" in out and "classifier" in out
