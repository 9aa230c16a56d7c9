"""``hetserve profile measure``: per-block latencies of the zoo's PyTorch models, measured.

For every model, batch size and share: the model is cut into the same blocks as the
roofline estimate (``RooflineModel(n_blocks).blocks``, over the layers of the exported
graph, which are the zoo model's layers), an input of that batch size runs through the
blocks once to produce each block's input, and then each block runs ``warmup`` times
unmeasured and ``repeats`` times measured; the median is the block's latency. On CUDA every
measured run is bracketed by ``torch.cuda.synchronize()``. A *share* ``k`` on the CPU is
``1/k`` of its threads (``torch.set_num_threads``); on a GPU only share 1 is measured (MPS
slices need the MPS daemon).

``out_bytes`` of a block is measured too: the bytes of its output tensors per request.
Energy (``energy.csv``) is written where power can be read: RAPL on CPUs
(``/sys/class/powercap/intel-rapl:0/energy_uj``, read before and after the measured runs)
and NVML on NVIDIA GPUs (``torch.cuda.power_draw`` x time); without either there is no
``energy.csv``.

Each model's whole-model latency (the sum of its blocks) is fitted to Shepherd's Eq. 1,
``alpha * batch + beta``, with the largest relative error of the fit reported.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hetserve.core.errors import HetserveError
from hetserve.core.latency import LinearParams, RooflineModel, fit_linear
from hetserve.core.profiles import ProfileSet

RAPL = Path("/sys/class/powercap/intel-rapl:0/energy_uj")


@dataclass(frozen=True)
class Fit:
    model: str
    device: str
    params: LinearParams
    max_rel_error: float


def device_name(device: str) -> str:
    """The GPU-type name a device's rows carry: ``CPU`` (the ``local-cpu`` preset's type)
    or the CUDA device's name as the catalog knows it."""
    import torch

    if device == "cpu":
        return "CPU"
    if not device.startswith("cuda"):
        raise HetserveError(f"--device must be cpu or cuda[:N], got {device!r}")
    if not torch.cuda.is_available():
        raise HetserveError(f"--device {device}: CUDA is not available on this machine")
    from hetserve.core.gpus import DEFAULT_CATALOG, gpu_type

    dev = torch.device(device)
    raw = torch.cuda.get_device_name(dev)
    memory_mb = torch.cuda.get_device_properties(dev).total_memory / 2**20
    # the driver's name, exactly (the catalog carries drivers' strings as aliases): never
    # by substring, which took an A100 for an A10
    return gpu_type(raw, DEFAULT_CATALOG, f"--device {device}", memory_mb).name


class _Energy:
    """Joules between two reads, where the hardware lets us read them (else None)."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.kind = None
        if device == "cpu" and RAPL.exists() and os.access(RAPL, os.R_OK):
            self.kind = "rapl"
        elif device.startswith("cuda"):
            import torch

            try:
                torch.cuda.power_draw(torch.device(device))
                self.kind = "nvml"
            except Exception:  # no pynvml, or no permission: no energy
                self.kind = None

    def start(self) -> Any:
        if self.kind == "rapl":
            return int(RAPL.read_text())
        return time.perf_counter()

    def joules(self, mark: Any, seconds: float) -> float | None:
        if self.kind == "rapl":
            delta = int(RAPL.read_text()) - mark
            return delta / 1e6 if delta >= 0 else None  # (the counter wrapped)
        if self.kind == "nvml":
            import torch

            return torch.cuda.power_draw(torch.device(self.device)) / 1e3 * seconds
        return None


def measure_profiles(
    models: Sequence[str],
    device: str = "cpu",
    batches: Sequence[int] = (1, 2, 4, 8),
    shares: Sequence[int] = (1,),
    n_blocks: int = 10,
    warmup: int = 3,
    repeats: int = 10,
    progress: Callable[[str], None] | None = None,
    threads: int = 0,
) -> tuple[ProfileSet, list[Fit]]:
    """Measure a profile set (module docstring); returns it with the alpha/beta fits.
    ``threads``: torch threads to measure with (0: as set), as the serving workers run."""
    import torch

    if threads > 0:
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return measure_profiles(
                models, device, batches, shares, n_blocks, warmup, repeats, progress
            )
        finally:
            torch.set_num_threads(before)

    from hetserve.zoo.layered import tensors_of
    from hetserve.zoo.registry import build

    if warmup < 0 or repeats < 1:
        raise HetserveError("profile measure: need --warmup >= 0 and --repeats >= 1")
    if not batches or min(batches) < 1 or not shares or min(shares) < 1:
        raise HetserveError("profile measure: batch sizes and shares must be >= 1")
    gpu = device_name(device)
    if device != "cpu" and any(s != 1 for s in shares):
        raise HetserveError(f"--device {device}: only --shares 1 is measured on a GPU")
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    energy = _Energy(device)
    threads = torch.get_num_threads()
    roofline = RooflineModel(n_blocks=n_blocks)
    ps = ProfileSet(energy_mj={} if energy.kind else None)
    fits: list[Fit] = []

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(dev)

    try:
        for name in models:
            net = build(name).to(dev)
            blocks = roofline.blocks(net.model_name)
            if blocks.bounds[-1] != len(net.layers):
                raise HetserveError(
                    f"{name}: the graph has {blocks.bounds[-1]} layers, the zoo model "
                    f"{len(net.layers)}; re-export the graph (hetserve zoo export)"
                )
            n = len(blocks)
            out_bytes = [0.0] * n
            whole: dict[int, float] = {}
            for share in shares:
                torch.set_num_threads(max(1, threads // share) if not cuda else threads)
                for b in batches:
                    x: Any = _to(net.input_spec.example(b), dev)
                    lat_us, e_mj = [], []
                    with torch.inference_mode():
                        for k in range(n):
                            lo, hi = blocks.bounds[k], blocks.bounds[k + 1]
                            for _ in range(warmup):
                                net.run_layers(x, lo, hi)
                            sync()
                            times = []
                            mark = energy.start()
                            t_all = time.perf_counter()
                            for _ in range(repeats):
                                t0 = time.perf_counter()
                                y = net.run_layers(x, lo, hi)
                                sync()
                                times.append(time.perf_counter() - t0)
                            j = energy.joules(mark, time.perf_counter() - t_all)
                            lat_us.append(statistics.median(times) * 1e6)
                            if j is not None:
                                e_mj.append(j / repeats * 1e3)
                            out_bytes[k] = (
                                sum(t.numel() * t.element_size() for t in tensors_of(y)) / b
                            )
                            x = y
                    ps.latency_us[(net.model_name, gpu, share, b)] = lat_us
                    if ps.energy_mj is not None and len(e_mj) == n:
                        ps.energy_mj[(net.model_name, gpu, share, b)] = e_mj
                    if share == shares[0]:
                        whole[b] = sum(lat_us) / 1e6
                    if progress:
                        progress(f"{name} share {share} batch {b}: {sum(lat_us) / 1e3:.2f} ms")
            ps.out_bytes[net.model_name] = out_bytes
            if len(whole) >= 2:
                p = fit_linear(list(whole), list(whole.values()))
                err = max(abs(p.alpha_s * b + p.beta_s - t) / t for b, t in whole.items())
                fits.append(Fit(net.model_name, gpu, p, err))
    finally:
        torch.set_num_threads(threads)
    if ps.energy_mj is not None and not ps.energy_mj:
        ps.energy_mj = None
    return ps, fits


def _to(x: Any, dev: Any) -> Any:
    """A tensor, or a tuple of them (several inputs), on ``dev``."""
    return x.to(dev) if hasattr(x, "to") else tuple(t.to(dev) for t in x)
