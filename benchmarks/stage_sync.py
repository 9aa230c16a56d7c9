"""FLEX's preemption on a real device (issue 43, item 5): what the per-block
synchronisation costs a stage, and how long a stop takes to land.

A preemptible stage (``runtime.stage.StageRunner.run`` with ``should_stop``) waits for
each block's kernels at every block boundary, so that it can stop there; a stage that
cannot be preempted waits once, at its end. For each model and batch:

- **sync cost**: the whole stage's time, preemptible against not (median of
  ``--repeats``), and their difference per block;
- **stop latency**: the stage started on a thread, a stop asked after a random fraction
  of its time, and the time from the ask until ``run`` returns (the rest of the block
  under way, then the wait): median and worst, beside the slowest block's time.

Run: ``.venv/bin/python benchmarks/stage_sync.py --device cuda [--models resnet50,bert-base]
[--batches 1,8,32] [--repeats 20]``; ``--device cpu`` dry-runs it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

import numpy as np

from hetserve.core.latency import RooflineModel
from hetserve.core.provenance import provenance_line


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


class _StageThread:
    """One long-lived thread that runs the stage when asked, as a server's worker thread
    does. (The first version started a new thread for each stop: on the H200, ResNet-50's
    stops then took longer than its whole stage, BERT's did not; a fresh thread's first
    cuDNN call is the suspect, not established.)"""

    def __init__(self, runner: object, x: object, device: str) -> None:
        import queue

        self.runner, self.x, self.device = runner, x, device
        self.flag = [False]
        self.jobs: queue.Queue[bool] = queue.Queue()
        self.ended: queue.Queue[float] = queue.Queue()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()
        for _ in range(3):  # warm: this thread's own handles and first calls
            self.jobs.put(True)
            self.ended.get()

    def _loop(self) -> None:
        while self.jobs.get():
            self.runner.run(self.x, lambda: self.flag[0])  # type: ignore[attr-defined]
            _sync(self.device)
            self.ended.put(time.perf_counter())

    def stop_once(self, after_s: float) -> float:
        """The stage started on the thread, a stop asked ``after_s`` into it: seconds from
        the ask until ``run`` returned and its queued work was done."""
        _sync(self.device)
        self.flag[0] = False
        self.jobs.put(True)
        time.sleep(after_s)
        t_ask = time.perf_counter()
        self.flag[0] = True
        return max(0.0, self.ended.get() - t_ask)

    def close(self) -> None:
        self.jobs.put(False)
        self.thread.join()


def measure(model_name: str, device: str, batch: int, repeats: int, seed: int) -> dict:
    import torch

    from hetserve.runtime.stage import StageRunner
    from hetserve.zoo.registry import build

    model = build(model_name)
    blocks = RooflineModel(n_blocks=10).blocks(model_name)
    runner = StageRunner(model, blocks, (0, len(blocks)), device=device)
    x = model.input_spec.example(batch)
    x = tuple(t.to(device) for t in x) if isinstance(x, tuple) else x.to(device)
    never = lambda: False  # noqa: E731  (preemptible, never stopped)
    for _ in range(3):
        runner.run(x)
        runner.run(x, never)
    _sync(device)

    def timed(stop: object) -> float:
        _sync(device)
        t0 = time.perf_counter()
        runner.run(x, stop)  # type: ignore[arg-type]
        _sync(device)
        return time.perf_counter() - t0

    plain = statistics.median(timed(None) for _ in range(repeats))
    preemptible = statistics.median(timed(never) for _ in range(repeats))
    per_block = []  # the slowest block: the longest a stop can wait
    mid = x
    with torch.inference_mode():
        for k in range(len(blocks)):
            one = StageRunner(model, blocks, (k, k + 1), device=device)
            _sync(device)
            t0 = time.perf_counter()
            out = one.run(mid)
            _sync(device)
            per_block.append(time.perf_counter() - t0)
            mid = out.output
    rng = np.random.default_rng(seed)
    worker = _StageThread(runner, x, device)
    lat = [worker.stop_once(float(rng.uniform(0.2, 0.8)) * plain) for _ in range(repeats)]
    worker.close()
    return {
        "model": model_name, "batch": batch, "device": device,
        "stage_ms": plain * 1e3, "preemptible_stage_ms": preemptible * 1e3,
        "sync_cost_per_block_us": (preemptible - plain) / len(blocks) * 1e6,
        "slowest_block_ms": max(per_block) * 1e3,
        "stop_latency_ms": {"p50": statistics.median(lat) * 1e3, "max": max(lat) * 1e3},
    }  # fmt: skip


def main() -> None:
    print(provenance_line(), flush=True)
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--models", default="resnet50,bert-base")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    rows = []
    for m in a.models.split(","):
        for b in (int(x) for x in a.batches.split(",")):
            rows.append(measure(m, a.device, b, a.repeats, seed=len(rows)))
            print(json.dumps(rows[-1]), flush=True)
    print("\n| model | batch | stage ms | preemptible ms | sync per block | slowest block ms "
          "| stop latency p50 / max ms |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        s = r["stop_latency_ms"]
        print(f"| {r['model']} | {r['batch']} | {r['stage_ms']:.2f} | "
              f"{r['preemptible_stage_ms']:.2f} | {r['sync_cost_per_block_us']:.0f} us | "
              f"{r['slowest_block_ms']:.2f} | {s['p50']:.2f} / {s['max']:.2f} |")  # fmt: skip
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
