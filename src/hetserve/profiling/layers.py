"""DeepPlan's per-layer measurements (``layers.csv``), on CUDA.

For every layer of a zoo model that holds weights (a leaf module with parameters or
buffers), three times, each the median of ``repeats`` runs after ``warmup`` (CUDA events):

- ``load_us``: copying the layer's weights from pinned host memory to the GPU (what a
  pipelined load pays per layer);
- ``exec_gpu_us``: running the layer with its weights on the GPU;
- ``exec_host_us``: running it with its weights left in pinned host memory, read by the
  kernels over PCIe (DeepPlan's *direct-host-access*: no load at all, a slower run).

Each layer runs on the input it gets in a whole forward pass of the model at ``batch``.
The weights in host memory are handed to the kernels as CUDA tensors that alias the pinned
buffers (:func:`host_alias`): with unified virtual addressing a pinned buffer's host
address is valid on the device, and a DLPack capsule that says "CUDA" gives PyTorch a
tensor over it without a copy.

Format (``layers.csv``, one row per layer, in execution order)::

    model,layer,kind,param_bytes,load_us,exec_gpu_us,exec_host_us
    resnet50,0,Conv2d,37632,5.1,21.3,48.0

``layer`` is the index among the model's weighted layers, ``kind`` the module's class.

Status: written without a GPU to run it on. The DLPack wrapper is tested on the CPU
(``tests/profiling/test_layers.py``: a capsule over a host buffer becomes a tensor that
shares its memory and frees it when dropped); the CUDA timings have not been run yet.
"""

from __future__ import annotations

import csv
import ctypes
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hetserve.core.errors import ConfigError, HetserveError
from hetserve.core.files import csv_rows

LAYER_COLUMNS = (
    "model",
    "layer",
    "kind",
    "param_bytes",
    "load_us",
    "exec_gpu_us",
    "exec_host_us",
)


@dataclass(frozen=True)
class LayerRow:
    model: str
    layer: int
    kind: str
    param_bytes: int
    load_us: float
    exec_gpu_us: float
    exec_host_us: float


def write_layers_csv(rows: Sequence[LayerRow], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(LAYER_COLUMNS)
        for r in rows:
            w.writerow(
                [r.model, r.layer, r.kind, r.param_bytes]
                + [f"{v:.3f}" for v in (r.load_us, r.exec_gpu_us, r.exec_host_us)]
            )
    return path


def read_layers_csv(path: str | Path) -> list[LayerRow]:
    """The rows of a ``layers.csv``; a bad field is a one-line error naming file and line."""
    path = Path(path)
    rows: list[LayerRow] = []
    seen: dict[str, int] = {}
    for line, row in csv_rows(path, LAYER_COLUMNS):

        def bad(col: str, want: str, line: int = line, row: dict = row) -> ConfigError:
            return ConfigError(f"{path}:{line}: field '{col}': expected {want}, got {row[col]!r}")

        model, kind = row["model"].strip(), row["kind"].strip()
        if not model:
            raise bad("model", "a model name")
        if not kind:
            raise bad("kind", "a layer kind")
        ints = {}
        for col in ("layer", "param_bytes"):
            try:
                ints[col] = int(row[col])
            except ValueError:
                raise bad(col, "an integer >= 0") from None
            if ints[col] < 0:
                raise bad(col, "an integer >= 0")
        nums = {}
        for col in ("load_us", "exec_gpu_us", "exec_host_us"):
            try:
                nums[col] = float(row[col])
            except ValueError:
                raise bad(col, "a non-negative number of microseconds") from None
            if not math.isfinite(nums[col]) or nums[col] < 0:
                raise bad(col, "a non-negative number of microseconds")
        want = seen.get(model, 0)
        if ints["layer"] != want:
            raise ConfigError(
                f"{path}:{line}: model {model}: layers must be numbered 0, 1, ... in order; "
                f"expected {want}, got {ints['layer']}"
            )
        seen[model] = want + 1
        rows.append(LayerRow(model, ints["layer"], kind, ints["param_bytes"], **nums))
    return rows


# ------------------------------------------------------------------ DLPack


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [
    ("dl_tensor", _DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _DELETER),
]

KDL_CPU, KDL_CUDA = 1, 2
# what keeps each capsule's memory (and the structure itself) alive until its deleter runs
_ALIVE: dict[int, tuple[Any, ...]] = {}


@_DELETER
def _release(managed: Any) -> None:
    _ALIVE.pop(ctypes.addressof(managed.contents), None)


def _dl_dtype(dtype: Any) -> tuple[int, int]:
    import torch

    codes = {
        torch.float32: (2, 32), torch.float16: (2, 16), torch.float64: (2, 64),
        torch.bfloat16: (4, 16), torch.int64: (0, 64), torch.int32: (0, 32),
        torch.uint8: (1, 8), torch.int8: (0, 8), torch.bool: (6, 8),
    }  # fmt: skip
    if dtype not in codes:
        raise HetserveError(f"no DLPack code for {dtype}")
    return codes[dtype]


def dlpack_capsule(t: Any, device_type: int, device_id: int = 0) -> Any:
    """A DLPack capsule over ``t``'s memory (a contiguous CPU tensor) that *says* it lives
    on ``device_type`` (1: CPU, 2: CUDA). ``t`` is kept alive until the consumer frees it."""
    if not t.is_contiguous():
        raise HetserveError("dlpack_capsule: the tensor must be contiguous")
    shape = (ctypes.c_int64 * max(1, t.dim()))(*t.shape)
    managed = _DLManagedTensor()
    code, bits = _dl_dtype(t.dtype)
    managed.dl_tensor = _DLTensor(
        ctypes.c_void_p(t.data_ptr()), _DLDevice(device_type, device_id), t.dim(),
        _DLDataType(code, bits, 1), shape, None, 0,
    )  # fmt: skip
    managed.manager_ctx = None
    managed.deleter = _release
    _ALIVE[ctypes.addressof(managed)] = (managed, shape, t)
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(ctypes.addressof(managed), b"dltensor", None)


def host_alias(t: Any, device_id: int = 0) -> Any:
    """A CUDA tensor over the pinned host tensor ``t`` (no copy: kernels read the host
    memory over PCIe). Needs unified virtual addressing (every 64-bit CUDA platform)."""
    import torch

    if not t.is_pinned():
        raise HetserveError("host_alias: the tensor must be in pinned host memory")
    return torch.from_dlpack(dlpack_capsule(t, KDL_CUDA, device_id))


# ------------------------------------------------------------------ measuring


def weighted_layers(net: Any) -> list[tuple[str, Any]]:
    """The leaf modules that hold weights (parameters or buffers), in definition order."""
    out = []
    for name, mod in net.named_modules():
        if next(mod.children(), None) is not None:
            continue
        if any(True for _ in mod.parameters(recurse=False)) or any(
            True for _ in mod.buffers(recurse=False)
        ):
            out.append((name, mod))
    return out


def _median_us(fn: Callable[[], Any], warmup: int, repeats: int) -> float:
    import torch

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    times.sort()
    return times[len(times) // 2]


def measure_layers(
    model: str, device: str = "cuda", batch: int = 1, warmup: int = 3, repeats: int = 10
) -> list[LayerRow]:
    """The module docstring's three times for every weighted layer of ``model``."""
    import torch

    from hetserve.zoo.registry import build

    if not device.startswith("cuda") or not torch.cuda.is_available():
        raise HetserveError(
            f"layers.csv needs a CUDA device (got {device!r}; CUDA available: "
            f"{torch.cuda.is_available()})"
        )
    dev = torch.device(device)
    dev_id = dev.index if dev.index is not None else torch.cuda.current_device()
    net = build(model).eval().to(dev)
    layers = weighted_layers(net)
    inputs: dict[str, tuple[Any, ...]] = {}

    def keep(name: str) -> Callable[..., None]:
        def hook(_mod: Any, args: tuple[Any, ...]) -> None:
            inputs.setdefault(name, tuple(a.detach().clone() for a in args))

        return hook

    handles = [mod.register_forward_pre_hook(keep(name)) for name, mod in layers]
    with torch.inference_mode():
        net(net.input_spec.example(batch).to(dev))
    for h in handles:
        h.remove()
    rows = []
    with torch.inference_mode():
        for name, mod in layers:
            if name not in inputs:
                continue  # not on the forward path (an unused head)
            args = inputs[name]
            state = {**dict(mod.named_parameters(recurse=False)),
                     **dict(mod.named_buffers(recurse=False))}  # fmt: skip
            nbytes = sum(v.numel() * v.element_size() for v in state.values())
            pinned = {n: v.detach().cpu().pin_memory() for n, v in state.items()}
            targets = {n: torch.empty_like(v) for n, v in state.items()}

            def load(pinned: dict = pinned, targets: dict = targets) -> None:
                for n, host in pinned.items():
                    targets[n].copy_(host, non_blocking=True)

            def on_gpu(mod: Any = mod, args: tuple = args) -> Any:
                return mod(*args)

            aliases = {n: host_alias(v, dev_id) for n, v in pinned.items()}

            def on_host(mod: Any = mod, args: tuple = args, aliases: dict = aliases) -> Any:
                return torch.func.functional_call(mod, aliases, args)

            times = [_median_us(f, warmup, repeats) for f in (load, on_gpu, on_host)]
            rows.append(LayerRow(model, len(rows), type(mod).__name__, nbytes, *times))
    return rows
