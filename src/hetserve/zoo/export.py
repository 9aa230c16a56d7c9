"""Graph export: run a zoo model once at batch 1 and count, per layer, what the core's
:class:`~hetserve.core.graph.ModelGraph` records.

- FLOPs with PyTorch's ``torch.utils.flop_counter.FlopCounterMode`` (matmuls and
  convolutions, multiply-add = 2 FLOPs);
- activation traffic, kernel count and output bytes with :class:`TrafficCounter`, a
  ``TorchDispatchMode`` that sees every operator: for each that produces fresh storage
  (views and in-place aliases are free), it adds the bytes of its tensor inputs — except
  the layer's own parameters and buffers — and outputs;
- parameter bytes from the layer's parameters and buffers (FP32).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from hetserve.core.graph import Layer, ModelGraph
from hetserve.core.tensors import TORCH_TO_DATATYPE, TensorSpec
from hetserve.zoo.layered import LayeredModel, tensors_of
from hetserve.zoo.registry import build


def _storage_ptr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


class TrafficCounter(TorchDispatchMode):
    """Counts kernels and the bytes they read and write, ignoring ``exclude`` storages."""

    def __init__(self, exclude: Iterable[int] = ()) -> None:
        super().__init__()
        self.exclude = set(exclude)
        self.bytes = 0
        self.ops = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        in_ptrs = {_storage_ptr(t) for t in ins}
        fresh = [t for t in outs if _storage_ptr(t) not in in_ptrs]
        if fresh:
            self.ops += 1
            self.bytes += sum(t.nbytes for t in fresh)
            self.bytes += sum(t.nbytes for t in ins if _storage_ptr(t) not in self.exclude)
        return out


def tensor_specs(
    model: LayeredModel, final: Any = None
) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """The model's input and output tensors as the serving protocol shows them (one
    request's shapes, without the batch dimension). ``final``: the model's output at batch
    1, when the caller has it (else the model runs once)."""
    spec = model.input_spec
    dtype = TORCH_TO_DATATYPE[str(spec.dtype)]
    vr = (0, spec.vocab) if spec.vocab and not spec.dtype.is_floating_point else None
    inputs = (TensorSpec(spec.name, dtype, tuple(spec.shape), vr),)
    if final is None:
        with torch.no_grad():
            final = model(spec.example(batch=1))
    outs = tensors_of(final)
    names = model.output_names or (
        ("output",) if len(outs) == 1 else tuple(f"output_{k}" for k in range(len(outs)))
    )
    outputs = tuple(
        TensorSpec(n, TORCH_TO_DATATYPE[str(o.dtype)], tuple(o.shape[1:]))
        for n, o in zip(names, outs, strict=True)
    )
    return inputs, outputs


def count_layers(model: LayeredModel, x: Any) -> tuple[list[Layer], Any]:
    """Every layer of ``model`` run once on ``x`` (batch 1), counted as the module
    docstring says; and the model's output. Parameter bytes are FP32 bytes whatever the
    weights' dtype (the graph format's unit)."""
    layers = []
    with torch.no_grad():
        for i, (name, kind, layer) in enumerate(
            zip(model.layer_names, model.layer_kinds, model.layers, strict=True)
        ):
            weights = [*layer.parameters(), *layer.buffers()]
            param_bytes = float(sum(4 * w.numel() for w in weights if w.is_floating_point()))
            counter = TrafficCounter(_storage_ptr(w) for w in weights)
            flops = FlopCounterMode(display=False)
            with flops, counter:
                x = model.run_layers(x, i, i + 1)
            out_bytes = float(sum(t.nbytes for t in tensors_of(x)))
            layers.append(
                Layer(
                    name=name,
                    kind=kind,
                    flops=float(flops.get_total_flops()),
                    param_bytes=param_bytes,
                    out_bytes=out_bytes,
                    mem_bytes=float(counter.bytes),
                    n_ops=counter.ops,
                )
            )
    return layers, x


def export_model(model: LayeredModel) -> ModelGraph:
    x = model.input_spec.example(batch=1)
    input_bytes = float(x.nbytes)
    layers, x = count_layers(model, x)
    inputs, outputs = tensor_specs(model, x)
    return ModelGraph(
        name=model.model_name,
        family=model.family,
        task=model.task,
        input_shape=tuple(model.input_spec.shape),
        input_bytes=input_bytes,
        layers=tuple(layers),
        inputs=inputs,
        outputs=outputs,
        meta={
            "exported_by": "hetserve.zoo.export",
            "torch": torch.__version__.split("+")[0],
            "dtype": "float32",
            "batch": 1,
        },
    )


def export(name: str) -> ModelGraph:
    return export_model(build(name))


def write_each(
    names: Iterable[str],
    out_dir: Any,
    make: Callable[[str], Any],
    on_done: Callable[[str], None] | None = None,
) -> list[str]:
    """``make(name).save(DIR/<its name>.json)`` for every name (graphs, layer tables)."""
    from pathlib import Path

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for n in names:
        obj = make(n)
        path = out / f"{getattr(obj, 'name', None) or obj.model}.json"
        obj.save(path)
        written.append(str(path))
        if on_done is not None:
            on_done(n)
    return written


def export_all(
    names: Iterable[str], out_dir: Any, on_done: Callable[[str], None] | None = None
) -> list[str]:
    return write_each(names, out_dir, export, on_done)
