"""Benchmark: repository models (issue 28's targets) on a BERT-Base-sized model (110 M
parameters, ``transformers``' default ``BertConfig``, random weights, a Hugging Face
folder with safetensors; sequence length 128):

- ``import``: the import (export, cut points, counting) in a fresh process: wall time and
  peak resident memory, then the same with the import cache warm;
- ``split``: the blocks run one after another (the runtime's ``StageRunner``, 10 blocks)
  against the eager ``transformers`` model, batch 1 and 8, on the CPU (target: <= 5 %
  slower), timed alternately in one process;
- ``memory``: a real ``hetserve serve`` process serving the model: its resident memory
  after requests at batch 8, minus that of the same command serving a 0.1 M-parameter
  model, against the weights' bytes (target: <= 1.2x plus activations).

Run: ``.venv/bin/python benchmarks/bench_repository.py [import split memory] [--repeats 20]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hetserve.core.provenance import provenance_line

ROOT = Path(__file__).resolve().parents[1]
SEQ = 128


def make_repository(root: Path) -> int:
    """bert-base (110 M) and tiny (the skip CNN of the tests); returns bert's weight bytes."""
    import torch
    from safetensors.torch import save_file
    from transformers import BertConfig, BertForSequenceClassification

    sys.path.insert(0, str(ROOT))
    from tests.repository.models import MODEL_PY

    torch.manual_seed(0)
    net = BertForSequenceClassification(BertConfig(num_labels=2))
    net.save_pretrained(root / "bert-base-x" / "1", safe_serialization=True)
    (root / "bert-base-x" / "config.yaml").write_text(
        f"max_batch_size: 8\nslo_ms: 5000\ninputs:\n  - {{name: input_ids, shape: [{SEQ}]}}\n"
        f"  - {{name: attention_mask, shape: [{SEQ}]}}\n"
    )
    ns: dict[str, object] = {}
    exec(MODEL_PY, ns)
    (root / "tiny" / "1").mkdir(parents=True)
    (root / "tiny" / "1" / "model.py").write_text(MODEL_PY)
    save_file(ns["build"]().state_dict(), str(root / "tiny" / "1" / "w.safetensors"))  # type: ignore[operator]
    (root / "tiny" / "config.yaml").write_text("max_batch_size: 8\nslo_ms: 5000\n")
    return sum(t.nbytes for t in net.state_dict().values())


IMPORT = """
import json, resource, sys, time
t0 = time.perf_counter()
from hetserve.repository import models
repo = models.ModelRepository(sys.argv[1])
t1 = time.perf_counter()
g = repo.graph("bert-base-x")
t2 = time.perf_counter()
net = repo.build("bert-base-x")
t3 = time.perf_counter()
rss = int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) * 1024
print(json.dumps({"graph_s": t2 - t1, "build_s": t3 - t2, "layers": len(g.layers),
                  "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "rss": rss, "params": sum(p.numel() for p in net.program.parameters())}))
"""


def bench_import(root: Path, cache: Path, weight_bytes: int) -> None:
    env = {**os.environ, "HETSERVE_CACHE": str(cache)}
    base = subprocess.run(
        [sys.executable, "-c", "import resource, torch, transformers, hetserve.repository."
         "importer; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)"],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    base_rss = int(base.stdout.split()[-1])
    print(f"\nweights {weight_bytes / 1e6:.0f} MB; a process with torch, transformers and the "
          f"importer loaded: {base_rss / 1e6:.0f} MB peak")  # fmt: skip
    print("| import | graph (export, cuts, counting) | build (load, export, cut) | peak RSS | "
          "peak RSS - baseline | RSS after |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|")
    for label in ("cold (no cache)", "cache warm"):
        r = subprocess.run([sys.executable, "-c", IMPORT, str(root)], capture_output=True,
                           text=True, env=env, check=True)  # fmt: skip
        d = json.loads(r.stdout.strip().splitlines()[-1])
        print(f"| {label} | {d['graph_s']:.1f} s | {d['build_s']:.1f} s | "
              f"{d['peak_rss'] / 1e6:.0f} MB | {(d['peak_rss'] - base_rss) / 1e6:.0f} MB "
              f"({(d['peak_rss'] - base_rss) / weight_bytes:.2f}x weights) | "
              f"{d['rss'] / 1e6:.0f} MB |")  # fmt: skip
    print(f"({d['layers']} layers, {d['params'] / 1e6:.1f} M parameters)")


def bench_split(root: Path, cache: Path, repeats: int) -> None:
    import torch

    os.environ["HETSERVE_CACHE"] = str(cache)
    from transformers import BertForSequenceClassification

    from hetserve.core.latency import RooflineModel
    from hetserve.repository import models
    from hetserve.runtime.stage import StageRunner

    repo = models.ModelRepository(root)
    net = repo.build("bert-base-x")
    eager = BertForSequenceClassification.from_pretrained(str(root / "bert-base-x" / "1")).eval()
    blocks = RooflineModel(repo.graph, n_blocks=10).blocks("bert-base-x")
    runner = StageRunner(net, blocks, (0, len(blocks)))
    print(f"\ntorch threads {torch.get_num_threads()}; {len(net.layers)} layers in "
          f"{len(blocks)} blocks; {repeats} alternating runs after 3 warm-ups")  # fmt: skip
    print("| batch | eager (median) | blocks (median) | blocks / eager | outputs max abs diff |")
    print("|---:|---:|---:|---:|---:|")
    for batch in (1, 8):
        ids, mask = net.input_spec.example(batch, seed=1)
        with torch.inference_mode():
            for _ in range(3):
                want = eager(input_ids=ids, attention_mask=mask).logits
                got = runner.run((ids, mask)).output
            te, ts = [], []
            for _ in range(repeats):
                t0 = time.perf_counter()
                eager(input_ids=ids, attention_mask=mask)
                t1 = time.perf_counter()
                runner.run((ids, mask))
                t2 = time.perf_counter()
                te.append(t1 - t0)
                ts.append(t2 - t1)
        out = got[0] if isinstance(got, tuple) else got
        e, s = statistics.median(te), statistics.median(ts)
        print(f"| {batch} | {e * 1e3:.1f} ms | {s * 1e3:.1f} ms | {s / e:.3f} | "
              f"{float((out - want).abs().max()):.1e} |")  # fmt: skip


def _rss(pid: int) -> dict[str, int]:
    text = Path(f"/proc/{pid}/status").read_text()
    out = {}
    for key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
        m = re.search(rf"{key}:\s+(\d+) kB", text)
        out[key] = int(m.group(1)) * 1024 if m else 0
    return out


def _serve(root: Path, cache: Path, model: str, tmp: Path) -> dict[str, int]:
    import httpx
    import numpy as np

    env = {**os.environ, "HETSERVE_CACHE": str(cache), "PYTHONUNBUFFERED": "1"}
    prof = tmp / f"prof-{model}"
    subprocess.run(
        [sys.executable, "-m", "hetserve", "profile", "estimate", "--cluster", "local-cpu",
         "--models", model, "--model-repository", str(root), "--out", str(prof)],
        check=True, env=env, capture_output=True,
    )  # fmt: skip
    log = open(tmp / f"serve-{model}.out", "w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "hetserve", "serve", "--model-repository", str(root), "--models",
         model, "--engine", "threads", "--profiles", str(prof), "--port", "0",
         "--max-batch", "8", "--no-admission"],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        url = None
        for _ in range(1200):
            log.seek(0)
            m = re.search(r"at http://127\.0\.0\.1:(\d+)/v2", log.read())
            if m:
                url = f"http://127.0.0.1:{m.group(1)}"
                try:
                    if httpx.get(f"{url}/v2/health/ready", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
            time.sleep(0.25)
        else:
            raise RuntimeError(f"serve did not start: {log.read()}")
        meta = httpx.get(f"{url}/v2/models/{model}").json()
        inputs = []
        for t in meta["inputs"]:
            shape = [8, *t["shape"][1:]]
            data = np.ones(shape, np.float32 if t["datatype"] == "FP32" else np.int64)
            inputs.append({"name": t["name"], "shape": shape, "datatype": t["datatype"],
                           "data": data.ravel().tolist()})  # fmt: skip
        for _ in range(3):
            r = httpx.post(f"{url}/v2/models/{model}/infer", json={"inputs": inputs}, timeout=120)
            assert r.status_code == 200, r.text
        return _rss(proc.pid)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=120)
        log.close()


def bench_memory(root: Path, cache: Path, weight_bytes: int, tmp: Path) -> None:
    big = _serve(root, cache, "bert-base-x", tmp)
    small = _serve(root, cache, "tiny", tmp)
    print("\n| served model | RSS | peak RSS | anonymous | file-backed |")
    print("|---|---:|---:|---:|---:|")
    for name, r in (("bert-base-x (110 M)", big), ("tiny (0.1 M)", small)):
        print(f"| {name} | {r['VmRSS'] / 1e6:.0f} MB | {r['VmHWM'] / 1e6:.0f} MB | "
              f"{r['RssAnon'] / 1e6:.0f} MB | {r['RssFile'] / 1e6:.0f} MB |")  # fmt: skip
    d = big["VmRSS"] - small["VmRSS"]
    print(f"RSS difference {d / 1e6:.0f} MB = {d / weight_bytes:.2f}x the weights "
          f"({weight_bytes / 1e6:.0f} MB); peak difference "
          f"{(big['VmHWM'] - small['VmHWM']) / 1e6:.0f} MB")  # fmt: skip


def main() -> None:
    print(provenance_line())
    ap = argparse.ArgumentParser()
    ap.add_argument("what", nargs="*", default=["import", "split", "memory"])
    ap.add_argument("--repeats", type=int, default=20)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        root, cache = tmp / "repo", tmp / "cache"
        weight_bytes = make_repository(root)
        if "import" in a.what:
            bench_import(root, cache, weight_bytes)
        if "split" in a.what:
            bench_split(root, cache, a.repeats)
        if "memory" in a.what:
            bench_memory(root, cache, weight_bytes, tmp)


if __name__ == "__main__":
    main()
