"""What a :class:`~hetserve.runtime.server.Server` is configured with, and the
schedulers' parameters for serving on the wall clock."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hetserve.runtime.versions import VersionTable


@dataclass
class ServerConfig:
    scheduler: str = "edf-adaptive"
    params: dict[str, Any] = field(default_factory=dict)
    emulate: bool = False
    max_pending: int = 10_000
    # refuse at arrival a request whose deadline even the best case misses (503 at once)
    admission: bool = True
    # rows (requests) in one infer request, at most: the model's max_batch_size
    max_request_batch: int = 64
    drain_timeout_s: float = 30.0  # a shutdown waits this long for the requests in flight
    n_blocks: int = 10
    # the models' builder for real workers (``hetserve.zoo.registry.build``)
    build: Callable[[str], Any] | None = None
    # cold loading (plans with load plans): hetserve.profiling.layers.leaf_rows and
    # host_alias, passed in like ``build`` (the runtime sits below zoo and profiling)
    leaf_rows: Callable[[Any], Any] | None = None
    host_alias: Callable[[Any, int], Any] | None = None
    engine: str = "threads"  # real workers: "threads" (this process) or "ray" (actors)
    ray_address: str | None = None
    # torch threads of all CPU workers together (0: torch's default); split among them
    cpu_threads: int = 0
    # the Ray cluster as discovered (``runtime.discovery.Discovered``): where GPU workers
    # may go; None: discovered when the Ray engine starts (GPU plans only)
    found: Any = None
    # Ray's runtime_env for the job (pip or py_modules for nodes without hetserve)
    runtime_env: dict[str, Any] | None = None
    # the models' served versions, and models that could not load (``runtime.versions``)
    versions: VersionTable = field(default_factory=VersionTable)
    # what the Ray engine's GPU workers compute on: ``cuda`` (the GPU Ray gave the actor);
    # tests on GPU-less Ray nodes that declare GPUs set ``cpu``
    gpu_device: str = "cuda"
    # re-planning (``serve --replan``): off, manual (an operator's plans only), auto or
    # every=SECONDS; the control loop itself comes with the server (``Server(control=)``)
    replan: str = "off"


def wall_clock_params(
    scheduler: str, params: Mapping[str, Any], max_batch: int = 8
) -> dict[str, Any]:
    """A scheduler's parameters for serving on the wall clock, where the simulator's
    defaults do not fit: FLEX and its baselines batch up to ``max_batch`` (their default,
    128, exceeds profile sets), EDF and reservation keep a 10 ms margin and MagicBatch
    10 ms instead of 2 (timers on the wall clock fire 1-4 ms late here). Given parameters
    are kept."""
    out = dict(params)
    if scheduler in ("flex", "flex-np", "clockwork", "nexus"):
        out.setdefault("max_batch", max_batch)
    if scheduler in ("edf-adaptive", "reservation"):
        out.setdefault("margin_s", 0.01)
    if scheduler == "magicbatch":
        out.setdefault("margin_ms", 10.0)
    return out
