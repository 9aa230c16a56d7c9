"""Benchmark: hetserve on a real multi-node Ray cluster started on this machine (the tests'
``tests/runtime/raycluster.py``: ``ray start --head`` plus ``ray start --address`` nodes
with ``--num-gpus`` and ``accelerator_type:T4``, GPU-less in fact).

- ``startup``: time to ready for 8 and 64 emulated workers (one per GPU of 2 nodes x 4 and
  4 nodes x 16 "T4"s): discovery (a probe task per node), then ``Server.start`` (placement
  groups reserved, actors created, each actor's report checked against the plan, the
  engine started). Ray's worker processes are part of it: one per actor.
- ``hop``: the cost of one activation hop between two actors, for ResNet-50's activation
  at its middle cut (after block 5 of 10) at batch 1 and 8: an actor makes the array (in
  its node's object store), another consumes it (copied into a tensor, as a stage does),
  timed from the consumer's call to its reply; on the same node and on another node
  (another raylet and object store: Ray's object manager moves it, over loopback here).
  A no-payload call on the same node is the floor.

Run: ``.venv/bin/python benchmarks/bench_cluster.py [startup] [hop] [--repeats 200]``.
Each section prints a table and a JSON line; docs/benchmarks.md records the results.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.runtime.raycluster

from hetserve.core.provenance import provenance_line


def _cluster(shapes: list[int]):  # type: ignore[no-untyped-def]
    from tests.runtime.raycluster import LocalRayCluster

    c = LocalRayCluster()
    c.start_head()
    for n in shapes:
        c.add_node(n, "T4")
    return c


def startup(sizes: tuple[tuple[int, int], ...] = ((2, 4), (4, 16))) -> list[dict]:
    import asyncio

    import ray

    from hetserve.engine.setup import build_setup
    from hetserve.runtime.discovery import connect, discover
    from hetserve.runtime.server import Server, ServerConfig

    rows = []
    for nodes, gpus in sizes:
        c = _cluster([gpus] * nodes)
        try:
            t0 = time.perf_counter()
            connect(c.address)
            found = discover(c.address)
            t1 = time.perf_counter()
            setup = build_setup(found.cluster(), ["resnet50"], max_batch=8)
            srv = Server(setup, ServerConfig(scheduler="flex", emulate=True, engine="ray",
                                             ray_address=c.address, found=found))  # fmt: skip

            async def up(srv: Server = srv) -> float:
                srv.start()  # ready: every worker placed, checked, the engine started
                ready = time.perf_counter()
                await srv.stop()
                return ready

            t2 = time.perf_counter()
            t3 = asyncio.run(up())
            n = len(setup.placement.workers)
            rows.append({"workers": n, "nodes": nodes, "discover_s": round(t1 - t0, 2),
                         "start_s": round(t3 - t2, 2), "ready_s": round(t3 - t0, 2)})  # fmt: skip
            print(f"{n:3d} workers on {nodes} nodes: discovery {t1 - t0:.2f} s, placement "
                  f"+ actors + checks {t3 - t2:.2f} s, ready after {t3 - t0:.2f} s",
                  flush=True)  # fmt: skip
        finally:
            ray.shutdown()
            c.stop()
    return rows


def hop(repeats: int = 200) -> list[dict]:
    import ray

    from hetserve.runtime.torch_executor import TorchExecutor
    from hetserve.zoo.registry import build

    first = TorchExecutor(build, n_blocks=10).runner("w", "resnet50", (0, 5))
    act = first.run(build("resnet50").input_spec.example(1)).output  # what crosses the cut
    shape, dtype = tuple(act.shape[1:]), str(act.dtype).removeprefix("torch.")

    c = _cluster([1, 1])
    rows = []
    try:
        ray.init(address=c.address, log_to_driver=False)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        @ray.remote(num_cpus=0)
        class End:
            def make(self, n: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
                return np.ones((n, *shape), dtype=dtype)

            def take(self, x: np.ndarray | None) -> int:
                if x is None:
                    return 0
                import torch

                return int(torch.from_numpy(np.array(x, copy=True)).numel())

        a_node, b_node = c.nodes[1].node_id, c.nodes[2].node_id

        def on(node: str):  # type: ignore[no-untyped-def]
            return End.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
            ).remote()

        src, near, far = on(a_node), on(a_node), on(b_node)
        ray.get([x.take.remote(None) for x in (src, near, far)])
        for batch in (1, 8):
            mb = batch * int(np.prod(shape)) * np.dtype(dtype).itemsize / 1e6
            for label, dst in (("no payload", near), ("same node", near), ("other node", far)):
                ts = []
                for _ in range(repeats):
                    ref = src.make.remote(batch, shape, dtype) if label != "no payload" else None
                    if ref is not None:
                        ray.wait([ref])  # made, in its node's object store
                    t0 = time.perf_counter()
                    ray.get(dst.take.remote(ref))
                    ts.append(time.perf_counter() - t0)
                p50, p99 = (float(np.percentile(ts, q)) * 1e3 for q in (50, 99))
                rows.append({"batch": batch, "mb": round(mb, 2), "hop": label,
                             "p50_ms": round(p50, 2), "p99_ms": round(p99, 2),
                             "mean_ms": round(statistics.fmean(ts) * 1e3, 2)})  # fmt: skip
                print(f"batch {batch} ({mb:.2f} MB, {dtype} {list(shape)}) {label:>10}: "
                      f"p50 {p50:.2f} ms, p99 {p99:.2f} ms", flush=True)  # fmt: skip
    finally:
        ray.shutdown()
        c.stop()
    return rows


def main(argv: list[str]) -> None:
    print(provenance_line())
    repeats = 200
    if "--repeats" in argv:
        repeats = int(argv[argv.index("--repeats") + 1])
    which = [a for a in argv if a in ("startup", "hop")] or ["startup", "hop"]
    out = {}
    if "startup" in which:
        out["startup"] = startup()
    if "hop" in which:
        out["hop"] = hop(repeats)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
