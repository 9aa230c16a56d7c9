"""The runtime's executors by kind (``core.registry``: the one registry shape), each made
from an :class:`ExecutorRequest` by a factory here:

- ``modelled``: the simulator's modelled executor on the wall clock (``--emulate``);
- ``threads``: the model's blocks really run on threads of this process
  (``runtime.torch_executor``);
- ``ray``: Ray actors, one per worker slot, real or emulated (``runtime.ray_executor``).

The server picks the kind from its configuration (:func:`executor_kind`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hetserve.core.errors import HetserveError
from hetserve.core.registry import Registry
from hetserve.engine.executor import Executor
from hetserve.engine.modelled import ModelledExecutor
from hetserve.engine.setup import Setup
from hetserve.runtime.serverconfig import ServerConfig
from hetserve.scheduling.protocol import ClusterView


@dataclass(frozen=True)
class ExecutorRequest:
    """What an executor is made from."""

    setup: Setup
    cfg: ServerConfig
    view: ClusterView
    preemptive: bool  # stages stop at block boundaries (a scheduler that preempts)
    version_of: Callable[[int], int | None]  # a request's model version (None: default)


#: executors by kind
EXECUTORS: Registry[Callable[[ExecutorRequest], Executor]] = Registry("executor")


def executor_kind(cfg: ServerConfig) -> str:
    """The kind a configuration asks for: Ray's actors (emulated or real), else the
    modelled executor when emulating, else threads."""
    if cfg.engine == "ray":
        return "ray"
    return "modelled" if cfg.emulate else "threads"


@EXECUTORS.register("modelled")
def _modelled(r: ExecutorRequest) -> Executor:
    # the plan's blocks resident at start, unless its load plans load them (cold starts)
    return ModelledExecutor(warm=r.setup.warm, graphs=r.setup.model_catalog.graph)


@EXECUTORS.register("threads")
def _threads(r: ExecutorRequest) -> Executor:
    from hetserve.runtime.torch_executor import TorchExecutor, local_devices

    cfg, st = r.cfg, r.setup
    if cfg.build is None:
        raise HetserveError("real workers need a model builder (or emulate=True)")
    if cfg.cpu_threads > 0:  # (process-wide: the stages run in this process)
        import torch

        torch.set_num_threads(cfg.cpu_threads)
    devices = local_devices(r.view, cfg.gpu_device)  # GPU workers on this machine's GPUs
    if st.plan.load_plans:  # cold starts: models load on demand, whole
        return TorchExecutor(
            cfg.build, n_blocks=1, leaf_rows=cfg.leaf_rows, host_alias=cfg.host_alias,
            graphs=st.model_catalog.graph, devices=devices,
        )  # fmt: skip
    ex = TorchExecutor(
        cfg.build, n_blocks=cfg.n_blocks, version_of=r.version_of, preemptive=r.preemptive,
        cut_fp16=st.cut_fp16, graphs=st.model_catalog.graph, devices=devices,
    )  # fmt: skip
    ex.prepare(st.plan, st.placement, cfg.versions.others())
    return ex


@EXECUTORS.register("ray")
def _ray(r: ExecutorRequest) -> Executor:
    from hetserve.runtime.ray_executor import RayExecutor

    cfg, st = r.cfg, r.setup
    if cfg.emulate:  # emulated actors on a Ray cluster
        return RayExecutor(
            r.view, None, cfg.n_blocks, cfg.ray_address, st.plan, emulate=True,
            found=cfg.found, runtime_env=cfg.runtime_env,
        )  # fmt: skip
    if cfg.build is None:
        raise HetserveError("real workers need a model builder (or emulate=True)")
    cold: Any = (cfg.leaf_rows, cfg.host_alias) if st.plan.load_plans else None
    return RayExecutor(
        r.view, cfg.build, 1 if st.plan.load_plans else cfg.n_blocks, cfg.ray_address,
        st.plan, cfg.cpu_threads, found=cfg.found, runtime_env=cfg.runtime_env,
        versions=cfg.versions.others(), version_of=r.version_of, preemptive=r.preemptive,
        cold=cold, gpu_device=cfg.gpu_device, cut_fp16=st.cut_fp16,
        graphs=st.model_catalog.graph,
    )  # fmt: skip
