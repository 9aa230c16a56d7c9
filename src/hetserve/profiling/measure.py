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

Energy (``energy.csv``) is written where an energy counter can be read, as the counter's
difference over a window of measured runs divided by the runs in the window:

- on the CPU, RAPL's package counter (``/sys/class/powercap/intel-rapl:0/energy_uj``, read
  before and after the ``repeats`` measured runs);
- on CUDA, NVML's total-energy counter of the torch device's GPU
  (``nvmlDeviceGetTotalEnergyConsumption``: millijoules since the driver loaded, Volta and
  newer; the ``nvml`` extra installs ``nvidia-ml-py``). The GPU is found by its UUID, since
  torch's device index counts the ``CUDA_VISIBLE_DEVICES`` only and NVML's counts them all.
  The counter is refreshed every few tens of milliseconds, so the measured runs go on
  (each synchronized, like the timed ones) until the window lasts at least
  :data:`MIN_ENERGY_WINDOW_S`; the latency is still the median of the first ``repeats``.

Without a counter (no RAPL, no ``nvidia-ml-py``, a GPU without the counter, no permission)
there is no ``energy.csv``, and ``note`` is told why once.

Each model's whole-model latency (the sum of its blocks) is fitted to Shepherd's Eq. 1,
``alpha * batch + beta``, with the largest relative error of the fit reported.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hetserve.core.errors import HetserveError
from hetserve.core.latency import LinearParams, RooflineModel, fit_linear
from hetserve.core.models import ZOO, ModelCatalog
from hetserve.core.profiles import ProfileSet

RAPL = Path("/sys/class/powercap/intel-rapl:0/energy_uj")
# The shortest energy window on CUDA. NVML's counter is refreshed every few tens of
# milliseconds, not at each read, so each end of a window may be stale by up to one
# refresh period P: a window of W seconds is off by about P/W of its energy, 10% at
# P = 50 ms and W = 0.5 s (20% at 0.25 s). 0.5 s costs 20 s per model at the default
# 4 batch sizes x 10 blocks, which we take for a tenth's accuracy.
MIN_ENERGY_WINDOW_S = 0.5
# ``--dtype``: torch's name of each precision a profile can be measured in
DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


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


def _uuid_key(uuid: Any) -> str:
    """A GPU UUID as both sides can be compared: torch's ``xxxxxxxx-xxxx-...`` and NVML's
    ``GPU-xxxxxxxx-xxxx-...`` (bytes or str), lower case, without the ``GPU-``."""
    s = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    return s.strip().lower().removeprefix("gpu-")


def nvml_handle(nvml: Any, device: str) -> Any:
    """NVML's handle of the physical GPU that torch's ``device`` is, matched by UUID (torch
    numbers the ``CUDA_VISIBLE_DEVICES`` only, NVML every GPU of the machine). A
    ``LookupError`` naming the UUID where no GPU NVML sees has it."""
    import torch

    want = _uuid_key(torch.cuda.get_device_properties(torch.device(device)).uuid)
    for i in range(nvml.nvmlDeviceGetCount()):
        try:
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            uuid = nvml.nvmlDeviceGetUUID(h)
        except nvml.NVMLError:  # a GPU this process may not query is not ours
            continue
        if _uuid_key(uuid) == want:
            return h
    raise LookupError(
        f"no GPU NVML sees has the UUID of {device} (GPU-{want}): a MIG slice, or a GPU this "
        f"process may not query"
    )


class _Energy:
    """The energy counter of a device (module docstring): ``kind`` ``"rapl"``, ``"nvml"``
    or None, with ``why`` saying why none; ``min_window_s``: the shortest window it can
    measure. :meth:`close` releases NVML."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.kind: str | None = None
        self.why = ""
        self.min_window_s = 0.0
        self._nvml: Any = None
        self._handle: Any = None
        if device == "cpu":
            if RAPL.exists() and os.access(RAPL, os.R_OK):
                self.kind = "rapl"
            else:
                self.why = f"{RAPL} (RAPL) is not readable on this machine"
        elif device.startswith("cuda"):
            self._open_nvml()

    def _open_nvml(self) -> None:
        try:
            import pynvml
        except ImportError:
            self.why = "nvidia-ml-py is not installed (the nvml extra)"
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            self.why = f"NVML did not start: {e}"
            return
        try:
            handle = nvml_handle(pynvml, self.device)
            pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        except LookupError as e:
            self.why = str(e)
        except pynvml.NVMLError_NotSupported:
            self.why = (
                f"the GPU of {self.device} has no total-energy counter (NVML: not supported; "
                f"it needs a Volta or newer GPU)"
            )
        except pynvml.NVMLError_NoPermission:
            self.why = f"NVML denied reading the energy counter of {self.device}'s GPU"
        except pynvml.NVMLError as e:
            self.why = f"NVML could not read the energy counter of {self.device}'s GPU: {e}"
        else:
            self.kind, self._nvml, self._handle = "nvml", pynvml, handle
            self.min_window_s = MIN_ENERGY_WINDOW_S
            return
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlShutdown()
            self._nvml = None

    def start(self) -> Any:
        if self.kind == "rapl":
            return int(RAPL.read_text())
        if self.kind == "nvml":
            return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))
        return None

    def joules(self, mark: Any) -> float | None:
        """Joules since ``start()`` returned ``mark`` (None where there is no counter, or
        it went back: RAPL's wrapped, or the driver reloaded)."""
        if self.kind == "rapl":
            delta = int(RAPL.read_text()) - mark
            return delta / 1e6 if delta >= 0 else None
        if self.kind == "nvml":
            delta = int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)) - mark
            return delta / 1e3 if delta >= 0 else None
        return None


@dataclass(frozen=True)
class Window:
    """One block's measured runs: the first ``repeats`` timed (``times_s``; the latency is
    their median), all ``runs`` inside the energy window of ``seconds``; ``joules``: the
    window's energy / ``runs`` (None without a counter); ``last``: the last run's output."""

    times_s: list[float]
    runs: int
    seconds: float
    joules: float | None
    last: Any


def measure_window(
    run: Callable[[], Any],
    repeats: int,
    energy: _Energy,
    clock: Callable[[], float] = time.perf_counter,
) -> Window:
    """Calls ``run`` (one synchronized run of a block) ``repeats`` times, and on until the
    window lasts ``energy.min_window_s``; the counter is read before the first and after
    the last run."""
    if repeats < 1:
        raise HetserveError(f"measure_window: repeats must be >= 1, got {repeats}")
    times: list[float] = []
    mark = energy.start()
    t_start = clock()
    runs = 0
    while True:
        t0 = clock()
        last = run()
        t1 = clock()
        if runs < repeats:
            times.append(t1 - t0)
        runs += 1
        if runs >= repeats and t1 - t_start >= energy.min_window_s:
            break
    total = energy.joules(mark)
    return Window(times, runs, t1 - t_start, None if total is None else total / runs, last)


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
    note: Callable[[str], None] | None = None,
    model_catalog: ModelCatalog = ZOO,
    dtype: str = "fp32",
) -> tuple[ProfileSet, list[Fit]]:
    """Measure a profile set (module docstring); returns it with the alpha/beta fits.
    ``threads``: torch threads to measure with (0: as set), as the serving workers run.
    ``progress`` is called after each (model, share, batch); ``note`` once, with why there
    is no energy where there is none. ``model_catalog``: where the models come from (the
    zoo, and a model repository's). ``dtype``: the precision of the weights and of the
    floating-point inputs (``fp32``, ``fp16``, ``bf16``; integer inputs stay as they are):
    the roofline models FP16, as the papers' TensorRT engines ran."""
    import torch

    if threads > 0:
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return measure_profiles(
                models, device, batches, shares, n_blocks, warmup, repeats, progress,
                note=note, model_catalog=model_catalog, dtype=dtype,
            )  # fmt: skip
        finally:
            torch.set_num_threads(before)

    from hetserve.zoo.layered import tensors_of
    from hetserve.zoo.registry import build

    if warmup < 0 or repeats < 1:
        raise HetserveError("profile measure: need --warmup >= 0 and --repeats >= 1")
    if not batches or min(batches) < 1 or not shares or min(shares) < 1:
        raise HetserveError("profile measure: batch sizes and shares must be >= 1")
    if dtype not in DTYPES:
        raise HetserveError(f"profile measure: --dtype {dtype!r}; expected {', '.join(DTYPES)}")
    float_dtype = getattr(torch, DTYPES[dtype])
    gpu = device_name(device)
    if device != "cpu" and any(s != 1 for s in shares):
        raise HetserveError(f"--device {device}: only --shares 1 is measured on a GPU")
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    energy = _Energy(device)
    if energy.kind is None and note is not None:
        note(f"no energy.csv: {energy.why}")
    threads = torch.get_num_threads()
    roofline = RooflineModel(model_catalog.graph, n_blocks=n_blocks)
    ps = ProfileSet(energy_mj={} if energy.kind else None)
    fits: list[Fit] = []

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(dev)

    def synced(net: Any, x: Any, lo: int, hi: int) -> Callable[[], Any]:
        def run() -> Any:
            y = net.run_layers(x, lo, hi)
            sync()
            return y

        return run

    try:
        for name in models:
            net = build(name, model_catalog=model_catalog).to(dev, float_dtype)
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
                    x: Any = _to(net.input_spec.example(b), dev, float_dtype)
                    lat_us, e_mj = [], []
                    with torch.inference_mode():
                        for k in range(n):
                            lo, hi = blocks.bounds[k], blocks.bounds[k + 1]
                            for _ in range(warmup):
                                net.run_layers(x, lo, hi)
                            sync()
                            w = measure_window(synced(net, x, lo, hi), repeats, energy)
                            lat_us.append(statistics.median(w.times_s) * 1e6)
                            if w.joules is not None:
                                e_mj.append(w.joules * 1e3)
                            y = w.last
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
        energy.close()
    if ps.energy_mj is not None and not ps.energy_mj:
        ps.energy_mj = None
    return ps, fits


def _to(x: Any, dev: Any, float_dtype: Any = None) -> Any:
    """A tensor, or a tuple of them (several inputs), on ``dev``; floating-point ones in
    ``float_dtype`` where given (token ids and masks stay integers)."""
    if not hasattr(x, "to"):
        return tuple(_to(t, dev, float_dtype) for t in x)
    if float_dtype is not None and x.is_floating_point():
        return x.to(dev, float_dtype)
    return x.to(dev)
