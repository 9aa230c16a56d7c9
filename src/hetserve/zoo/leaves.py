"""Layer-table export: a zoo model's leaf-module calls, as DeepPlan plans them
(:mod:`hetserve.core.layertable` says what each field means).

The model runs once at batch 1 under a ``TorchDispatchMode`` that sees every operator;
forward pre-hooks on the leaf modules open a new row at each call. An operator counts
with the row open when it runs (glue between leaf modules counts with the call before
it); a weight (parameter or buffer) belongs to the first row whose operators read it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from hetserve.core.layertable import LayerTable, Leaf
from hetserve.zoo.layered import LayeredModel
from hetserve.zoo.registry import build

# the input sizes DeepPlan evaluates (section 5.1): 384 tokens for BERT and RoBERTa, 1,024
# for GPT-2 (the paper's "1,204" is a typo: GPT-2 has 1,024 positions)
DEEPPLAN_SEQ_LEN = {
    "bert-base": 384, "bert-large": 384, "roberta-base": 384, "roberta-large": 384,
    "gpt2": 1024, "gpt2-medium": 1024,
}  # fmt: skip

_GEMM = {
    "aten.addmm.default": "linear",
    "aten.mm.default": "linear",
    "aten.bmm.default": "linear",
    "aten.baddbmm.default": "linear",
    "aten.convolution.default": "conv",
}


def _ptr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


class _Row:
    def __init__(self, name: str, kind: str, layer: int) -> None:
        self.name, self.kind, self.layer = name, kind, layer
        self.param_bytes = 0.0
        self.n_tensors = 0
        self.act_bytes = 0.0
        self.n_ops = 0
        self.once = 0.0
        self.sparse = 0.0
        self.gemm = 0.0
        self.gemm_rows = 0.0
        self.gemm_kind = ""
        self.flops = 0.0
        self.weight_ptrs: list[int] = []  # storages of the weights it is first to read
        self.own = False  # a graph layer without leaf calls, as one row


class _Recorder(TorchDispatchMode):
    def __init__(self, weights: dict[int, float]) -> None:
        super().__init__()
        self.weights = weights  # storage pointer -> bytes
        self.claimed: set[int] = set()
        self.rows: list[_Row] = []
        self.pending: _Row | None = None  # glue before the layer's first leaf call

    def current(self) -> _Row:
        if self.rows and self.pending is None:
            return self.rows[-1]
        assert self.pending is not None
        return self.pending

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        in_ptrs = {_ptr(t) for t in ins}
        fresh = [t for t in outs if _ptr(t) not in in_ptrs]
        if not fresh:
            return out  # a view or an in-place alias: no kernel
        row = self.current()
        row.n_ops += 1
        row.act_bytes += sum(t.nbytes for t in fresh)
        name = str(func)
        for k, t in enumerate(ins):
            p = _ptr(t)
            if p not in self.weights:
                row.act_bytes += t.nbytes
                continue
            if p not in self.claimed:
                self.claimed.add(p)
                row.param_bytes += self.weights[p]
                row.n_tensors += 1
                row.weight_ptrs.append(p)
            if name == "aten.embedding.default" and k == 0:
                idx = ins[1]
                row.sparse += min(idx.numel(), t.shape[0]) * t[0].nbytes
            elif name in _GEMM and t.dim() >= 2:
                o = fresh[0]
                kind = _GEMM[name]
                rows = o.numel() / o.shape[1] if kind == "conv" else o.numel() / o.shape[-1]
                row.gemm += t.nbytes
                row.gemm_rows = max(row.gemm_rows, rows)
                row.gemm_kind = row.gemm_kind or kind
            else:
                row.once += t.nbytes
        return out


def trace_rows(model: LayeredModel) -> tuple[list[_Row], list[float]]:
    """The rows of ``model``'s layer table and their FLOPs (one run at batch 1). A row
    opens at each leaf-module call: seen by forward pre-hooks on a zoo model's leaf
    modules, or by the model's own ``run_layer_calls`` (an imported model's pieces are
    graphs of operators, each operator marked with the module it was traced in)."""
    weights: dict[int, float] = {}
    for w in [*model.parameters(), *model.buffers()]:
        if w.is_floating_point():
            weights[_ptr(w)] = float(w.nbytes)
    rec = _Recorder(weights)
    flop_rows: list[float] = []
    marks: list[float] = []
    counter = FlopCounterMode(display=False)

    def on_call(name: str, kind: str, layer: int) -> None:
        marks.append(counter.get_total_flops())
        row = _Row(name, kind, layer)
        if rec.pending is not None:  # glue ran before: it belongs to this first call
            for f in ("act_bytes", "n_ops", "param_bytes", "n_tensors", "once", "sparse"):
                setattr(row, f, getattr(rec.pending, f))
            row.weight_ptrs = list(rec.pending.weight_ptrs)
            rec.pending = None
        rec.rows.append(row)

    run_layer = getattr(model, "run_layer_calls", None)
    handles = [] if run_layer is not None else _leaf_hooks(model, on_call)
    x = model.input_spec.example(batch=1)
    try:
        with torch.no_grad():
            for li, layer in enumerate(model.layers):
                rec.pending = _Row(f"layers.{li}", type(layer).__name__, li)
                start = len(rec.rows)
                marks.clear()
                counter = FlopCounterMode(display=False)
                with rec, counter:
                    x = layer(x) if run_layer is None else run_layer(li, x, on_call)
                _split_flops(float(counter.get_total_flops()), marks, flop_rows)
                if len(rec.rows) == start:  # a layer without leaf calls: one row of its own
                    rec.pending.own = True
                    rec.rows.append(rec.pending)
                rec.pending = None
    finally:
        for h in handles:
            h.remove()
    return rec.rows, flop_rows


def _leaf_hooks(model: LayeredModel, on_call: Callable[[str, str, int], None]) -> list[Any]:
    """Forward pre-hooks calling ``on_call`` at each leaf-module call of a zoo model."""
    layer_of: dict[str, int] = {}
    for li, layer in enumerate(model.layers):
        for name, mod in layer.named_modules():
            if next(mod.children(), None) is None:
                layer_of[f"layers.{li}.{name}".rstrip(".")] = li
    names = {id(m): n for n, m in model.named_modules()}

    def pre_hook(mod: torch.nn.Module, _args: Any) -> None:
        name = names[id(mod)]
        on_call(name, type(mod).__name__, layer_of[name])

    return [
        mod.register_forward_pre_hook(pre_hook)
        for name, mod in model.named_modules()
        if name in layer_of
    ]


def _split_flops(total: float, marks: list[float], flop_rows: list[float]) -> None:
    """A layer's FLOPs per row: between the counter's readings at the rows' calls."""
    if not marks:  # no leaf call: the layer is one row
        flop_rows.append(total)
        return
    ends = [*marks[1:], total]
    starts = [0.0, *marks[1:]]  # glue before the first call counts with it
    flop_rows.extend(float(e - s) for s, e in zip(starts, ends, strict=True))


def leaf_table(model: LayeredModel) -> LayerTable:
    """The layer table of ``model`` at batch 1 (module docstring)."""
    rows, flop_rows = trace_rows(model)
    leaves = tuple(
        Leaf(
            name=r.name, kind=r.kind, layer=r.layer, param_bytes=r.param_bytes,
            n_tensors=r.n_tensors, flops=f, act_bytes=r.act_bytes, n_ops=r.n_ops,
            dha_once_bytes=r.once, dha_sparse_bytes=r.sparse, dha_gemm_bytes=r.gemm,
            gemm_rows=r.gemm_rows, gemm_kind=r.gemm_kind,
        )
        for r, f in zip(rows, flop_rows, strict=True)
    )  # fmt: skip
    return LayerTable(
        model.model_name,
        tuple(model.input_spec.shape),
        leaves,
        {
            "exported_by": "hetserve.zoo.leaves",
            "torch": torch.__version__.split("+")[0],
            "dtype": "float32",
            "batch": 1,
        },
    )


def export_layer_table(name: str) -> LayerTable:
    seq = DEEPPLAN_SEQ_LEN.get(name)
    return leaf_table(build(name, seq_len=seq) if seq else build(name))


def export_layer_tables(
    names: Iterable[str], out_dir: Any, on_done: Callable[[str], None] | None = None
) -> list[str]:
    from hetserve.zoo.export import write_each

    return write_each(names, out_dir, export_layer_table, on_done)
