"""Real cold starts against the timeline's prediction (DeepPlan; issue 14's runtime part,
issue 18's item 4): for each model, measure ``layers.csv`` on the device, plan each load
plan kind from it, then cold-start the model for real with ``runtime.coldload`` (weights
in pinned host memory, a load stream with an event per row, DHA rows as host aliases)
and time the first request from the start of the load to its output. The gap between the
measured and the predicted cold start is the simulator's error on cold starts.

Run on a GPU: ``.venv/bin/python benchmarks/coldstart_real.py --device cuda --out DIR``
(defaults: ResNet-50, BERT-Base and GPT-2; baseline, PipeSwitch and DHA; 5 repeats).
``--device cpu`` dry-runs every step on the CPU (a loader thread instead of streams; the
host link is memory, so the numbers say nothing about a GPU). Writes ``DIR/layers.csv``
and ``DIR/coldstart.json``, and prints a table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path

import torch

from hetserve.core.coldstart import timeline
from hetserve.core.layertable import write_layers_csv
from hetserve.core.provenance import provenance_line
from hetserve.planning.deepplan import make_load_plan
from hetserve.profiling.layers import host_alias, leaf_rows, measure_layers
from hetserve.runtime.coldload import ColdModel, CudaBackend, ThreadBackend
from hetserve.zoo.leaves import DEEPPLAN_SEQ_LEN
from hetserve.zoo.registry import build


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def cold_start(
    cm: ColdModel, plan: object, x: torch.Tensor, device: str, busy_s: float = 0.0
) -> tuple[float, object, float]:
    """One cold start: evict, then load by ``plan`` and run one request at once; returns
    its time, output and the time until its last row had arrived. ``busy_s`` > 0 first
    queues about that much of another model's work (matrix products) on the execution
    stream, unsynchronised, to see whether the load waits for it (issue 43, item 4): the
    request waits for that work either way (it runs on the same stream), the load need
    not."""
    if cm.loaded:
        cm.evict()
    sync(device)
    if busy_s > 0:
        _queue_busy(device, busy_s)
    done = threading.Event()
    arrived: list[float] = []

    def on_done() -> None:
        arrived.append(time.perf_counter())
        done.set()

    t0 = time.perf_counter()
    cm.load(plan, on_done)  # type: ignore[arg-type]
    y = cm.run(x)
    sync(device)
    t = time.perf_counter() - t0
    done.wait()
    return t, y, arrived[0] - t0


def cold_start_s(cm: ColdModel, plan: object, x: torch.Tensor, device: str) -> float:
    return cold_start(cm, plan, x, device)[0]


def busy_alone_s(device: str, seconds: float) -> float:
    """How long the queued work of ``--busy-ms`` takes alone (queued, then waited for)."""
    sync(device)
    t0 = time.perf_counter()
    _queue_busy(device, seconds)
    sync(device)
    return time.perf_counter() - t0


_BUSY: dict[str, tuple[torch.Tensor, float]] = {}


def _queue_busy(device: str, seconds: float) -> None:
    """Queues ``seconds`` of 4096^3 matrix products on the current stream (the number of
    products per second measured once, synchronised)."""
    if device not in _BUSY:
        a = torch.randn(4096, 4096, device=device)
        for _ in range(3):
            a @ a
        sync(device)
        t0 = time.perf_counter()
        for _ in range(10):
            a @ a
        sync(device)
        _BUSY[device] = (a, 10 / (time.perf_counter() - t0))
    a, per_s = _BUSY[device]
    for _ in range(max(1, round(seconds * per_s))):
        a @ a


def max_rel_diff(y: object, ref: object) -> float:
    """The largest |y - ref| / max|ref| over the output's tensors (0.0: bit-equal)."""
    ys = [y] if isinstance(y, torch.Tensor) else list(_tensors(y))
    rs = [ref] if isinstance(ref, torch.Tensor) else list(_tensors(ref))
    worst = 0.0
    for a, b in zip(ys, rs, strict=True):
        a, b = a.detach().float().cpu(), b.detach().float().cpu()
        worst = max(worst, float((a - b).abs().max() / b.abs().max().clamp_min(1e-30)))
    return worst


def _tensors(o: object):
    if isinstance(o, torch.Tensor):
        yield o
    elif isinstance(o, dict):
        for v in o.values():
            yield from _tensors(v)
    elif isinstance(o, (list, tuple)):
        for v in o:
            yield from _tensors(v)
    elif hasattr(o, "to_tuple"):  # transformers' ModelOutput
        yield from _tensors(o.to_tuple())


def main() -> None:
    print(provenance_line())
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--models", default="resnet50,bert-base,gpt2")
    ap.add_argument("--kinds", default="baseline,pipeswitch,dha")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", default="coldstart-out")
    ap.add_argument(
        "--busy-ms", type=float, default=0.0,
        help="also cold-start behind this much of another model's queued work",
    )  # fmt: skip
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    all_rows, results = [], []
    for model in a.models.split(","):
        rows = measure_layers(model, a.device, 1, a.warmup, a.repeats)
        all_rows += rows
        seq = DEEPPLAN_SEQ_LEN.get(model)
        net = build(model, seq_len=seq) if seq else build(model)
        x = net.input_spec.example(1).to(a.device)
        if a.device.startswith("cuda"):  # deterministic kernels for the output check
            torch.backends.cudnn.deterministic = True
            torch.backends.cudnn.benchmark = False
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        warm = net.to(a.device).eval()
        with torch.inference_mode():
            ref = warm(x)
            ref = [t.clone() for t in _tensors(ref)]
        net = warm.to("cpu")
        if a.device.startswith("cuda"):
            backend: object = CudaBackend(host_alias, a.device)
        else:
            backend = ThreadBackend()
        cm = ColdModel(net, backend, leaf_rows(net))  # type: ignore[arg-type]
        for kind in a.kinds.split(","):
            plan = make_load_plan(kind, rows)
            predicted = timeline(rows, plan).latency_s
            cold_start(cm, plan, x, a.device)  # warm the kernels and allocator
            ts, loads, diff = [], [], 0.0
            for _ in range(a.repeats):
                t, y, t_load = cold_start(cm, plan, x, a.device)
                ts.append(t)
                loads.append(t_load)
                diff = max(diff, max_rel_diff(list(_tensors(y)), ref))
            measured = statistics.median(ts)
            behind: dict[str, float | None] = dict.fromkeys(
                ("behind_busy_ms", "load_behind_busy_ms", "busy_alone_ms")
            )
            if a.busy_ms > 0:
                runs = [cold_start(cm, plan, x, a.device, a.busy_ms / 1e3)
                        for _ in range(a.repeats)]  # fmt: skip
                alone = [busy_alone_s(a.device, a.busy_ms / 1e3) for _ in range(a.repeats)]
                behind = {
                    "behind_busy_ms": statistics.median(r[0] for r in runs) * 1e3,
                    "load_behind_busy_ms": statistics.median(r[2] for r in runs) * 1e3,
                    "busy_alone_ms": statistics.median(alone) * 1e3,
                }
            results.append({
                "model": model, "kind": kind, "rows": len(rows),
                "dha_rows": len(plan.dha_layers), "predicted_ms": predicted * 1e3,
                "measured_ms": measured * 1e3, "measured_all_ms": [t * 1e3 for t in ts],
                "error_pct": 100 * (measured - predicted) / predicted if predicted else None,
                "max_rel_diff_vs_warm": diff, "busy_ms": a.busy_ms,
                "load_alone_ms": statistics.median(loads) * 1e3, **behind,
            })  # fmt: skip
    write_layers_csv(all_rows, out / "layers.csv")
    device_name = torch.cuda.get_device_name() if a.device.startswith("cuda") else "cpu"
    (out / "coldstart.json").write_text(
        json.dumps({"device": device_name, "results": results}, indent=1) + "\n"
    )
    print(f"device: {device_name}")
    print(
        "| model | kind | rows (DHA) | predicted ms | measured ms (median) | error "
        "| max rel diff vs warm | load alone ms "
        f"| behind {a.busy_ms:g} ms of queued work: request / load / the work alone, ms |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    for r in results:
        err = "-" if r["error_pct"] is None else f"{r['error_pct']:+.1f}%"
        behind_cell = " / ".join(
            ms(r[k]) for k in ("behind_busy_ms", "load_behind_busy_ms", "busy_alone_ms")
        )
        print(f"| {r['model']} | {r['kind']} | {r['rows']} ({r['dha_rows']}) | "
              f"{r['predicted_ms']:.2f} | {r['measured_ms']:.2f} | {err} | "
              f"{r['max_rel_diff_vs_warm']:.2e} | {ms(r['load_alone_ms'])} | "
              f"{behind_cell} |")  # fmt: skip


if __name__ == "__main__":
    main()
