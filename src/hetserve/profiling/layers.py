"""DeepPlan's per-layer measurements (``layers.csv``), on CUDA.

For every row of a zoo model's layer table (``hetserve.core.layertable``: one row per
leaf-module call in execution order, the same numbering as the shipped tables and the
estimate), three times, each the median of ``repeats`` runs after ``warmup`` (CUDA events):

- ``load_us``: copying the row's weights from pinned host memory to the GPU (what a
  pipelined load pays per layer);
- ``exec_gpu_us``: running the row with its weights on the GPU;
- ``exec_host_us``: running it with its weights left in pinned host memory, read by the
  kernels over PCIe (DeepPlan's *direct-host-access*: no load at all, a slower run).

The weights in host memory are handed to the kernels as CUDA tensors that alias the pinned
buffers (:func:`host_alias`): with unified virtual addressing a pinned buffer's host
address is valid on the device, and a DLPack capsule that says "CUDA" gives PyTorch a
tensor over it without a copy. The format (read and written in ``core.layertable``) is in
``docs/profiles.md``.

Status: written without a GPU to run it on. The DLPack wrapper and the measurement's
bookkeeping (rows numbered like the table) are tested on the CPU
(``tests/profiling/test_layers.py``, ``tests/zoo/test_leaves.py``); the CUDA timings have
not been run yet.
"""

from __future__ import annotations

import ctypes
import itertools
from typing import Any

from hetserve.core.errors import HetserveError
from hetserve.core.layertable import (  # noqa: F401  (the format lives in core)
    LAYER_COLUMNS,
    LayerRow,
    read_layers_csv,
    write_layers_csv,
)
from hetserve.core.models import ZOO, ModelCatalog
from hetserve.profiling.measure import device_name

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


class _Clock:
    """Time stamps on a stream: CUDA events on a GPU, ``perf_counter`` on the CPU (where
    the measurement only checks its own bookkeeping)."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda

    def stamp(self) -> Any:
        if self.cuda:
            import torch

            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        import time

        return time.perf_counter()

    def elapsed_us(self, a: Any, b: Any) -> float:
        if self.cuda:
            b.synchronize()
            return float(a.elapsed_time(b)) * 1e3
        return (b - a) * 1e6


def leaf_rows(net: Any, rows: Any = None) -> tuple[list[str], list[list[str]]]:
    """The rows of ``net``'s layer table (``zoo.leaves.trace_rows``): per row, the module
    that opens it, and the names of the weights (parameters, buffers) it is first to read.
    The runtime's cold loader takes it as a parameter (the runtime sits below the zoo)."""
    from hetserve.zoo.leaves import trace_rows

    if rows is None:
        rows, _ = trace_rows(net)
    by_ptr = {
        v.untyped_storage().data_ptr(): n
        for n, v in [*net.named_parameters(), *net.named_buffers()]
    }
    return [r.name for r in rows], [[by_ptr[p] for p in r.weight_ptrs] for r in rows]


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2]


def measure_layers(
    model: str,
    device: str = "cuda",
    batch: int = 1,
    warmup: int = 3,
    repeats: int = 10,
    model_catalog: ModelCatalog = ZOO,
) -> list[LayerRow]:
    """The module docstring's three times for every row of ``model``'s layer table (the
    leaf-module calls of :func:`hetserve.zoo.leaves.trace_rows`, at the input size of the
    shipped table), so that a measured ``layers.csv`` and an estimated one number their
    layers alike.

    Execution times come from one whole forward pass with a time stamp where each row
    opens (each leaf-module call), so the operators between leaf modules count with the
    row before them, as in the table; the DHA pass runs the whole model on host aliases of
    pinned copies of every weight. Loads copy each row's weights (those it is first to
    read). ``device="cpu"`` runs the same bookkeeping without a host link (loads 0, DHA =
    in-memory): for tests, not for planning. ``model_catalog``: where ``model`` comes
    from (the zoo, and a model repository's).
    """
    import torch

    from hetserve.zoo.leaves import DEEPPLAN_SEQ_LEN, trace_rows
    from hetserve.zoo.registry import build

    cuda = device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        raise HetserveError(f"layers.csv: {device!r} asked for, but CUDA is not available")
    if not cuda and device != "cpu":
        raise HetserveError(f"layers.csv: device must be cpu or cuda[:N], got {device!r}")
    # the catalog's name of the GPU type (``CPU`` on the CPU), which plan --planner
    # deepplan --layers selects the rows by; the driver's string is only an alias of it
    gpu = device_name(device)
    seq = DEEPPLAN_SEQ_LEN.get(model)
    net = build(model, seq_len=seq, model_catalog=model_catalog)
    rows, _ = trace_rows(net)
    _, row_weights = leaf_rows(net, rows)
    dev = torch.device(device)
    net = net.to(dev)
    dev_id = (dev.index if dev.index is not None else torch.cuda.current_device()) if cuda else 0
    clock = _Clock(cuda)
    opens = {r.name for r in rows}
    named = dict(net.named_modules())
    stamps: list[Any] = []

    def mark(_mod: Any, _args: Any) -> None:
        stamps.append(clock.stamp())

    hooks = [named[n].register_forward_pre_hook(mark) for n in sorted(opens)]
    x = net.input_spec.example(batch).to(dev)
    state = {**dict(net.named_parameters()), **dict(net.named_buffers())}
    if cuda:
        host = {n: v.detach().cpu().pin_memory() for n, v in state.items()}
        aliases = {n: host_alias(v, dev_id) for n, v in host.items()}
    else:
        host, aliases = {n: v.detach() for n, v in state.items()}, dict(state)

    def pass_times(weights: dict[str, Any] | None) -> list[float]:
        stamps.clear()
        if weights is None:
            net(x)
        else:
            torch.func.functional_call(net, weights, (x,))
        stamps.append(clock.stamp())
        if len(stamps) != len(rows) + 1:
            raise HetserveError(
                f"{model}: {len(stamps) - 1} leaf calls in a pass, the layer table has "
                f"{len(rows)} rows"
            )
        return [clock.elapsed_us(a, b) for a, b in itertools.pairwise(stamps)]

    try:
        with torch.inference_mode():
            gpu_runs, host_runs = [], []
            for k in range(warmup + repeats):
                g, h = pass_times(None), pass_times(aliases)
                if k >= warmup:
                    gpu_runs.append(g)
                    host_runs.append(h)
    finally:
        for hk in hooks:
            hk.remove()
    targets = {n: torch.empty_like(v) for n, v in state.items()}

    def load_us(names: list[str]) -> float:
        if not names or not cuda:
            return 0.0
        times = []
        for k in range(warmup + repeats):
            a = clock.stamp()
            for n in names:
                targets[n].copy_(host[n], non_blocking=True)
            b = clock.stamp()
            if k >= warmup:
                times.append(clock.elapsed_us(a, b))
        return _median(times)

    out = []
    for i, r in enumerate(rows):
        nbytes = int(sum(state[n].nbytes for n in row_weights[i]))
        out.append(
            LayerRow(
                model, i, r.kind, nbytes, load_us(row_weights[i]),
                _median([run[i] for run in gpu_runs]), _median([run[i] for run in host_runs]),
                gpu, batch,
            )
        )  # fmt: skip
    return out
