"""Cut points of an exported program, and its blocks as modules sharing the weights.

An exported program (``torch.export``) is flattened into one ``torch.fx`` graph of ATen
operators whose inputs are the request's tensors (batch dimension symbolic) and whose
output is the tuple of the model's output tensors. A *position* ``p`` lies between the
``p-1``-th and the ``p``-th compute node (in the graph's order, which is a topological
one). The values *live* at ``p`` are those computed (or given as inputs) before it and
used after it; parameters and buffers are never live (every block reads them from the one
loaded copy).

A position is a **valid cut** when everything live there is a tensor, or a symbolic size
(a ``SymInt`` such as the batch) that can be *recomputed* after the cut from the shape of a
live tensor — sizes are never carried across a cut. Among the valid cuts, the *layers* of
the imported graph are chosen coarse-to-fine along the model's module tree
(``nn_module_stack``): while the biggest piece holds more than a sixteenth of the model's
FLOPs, it is cut at its fewest-live-tensor positions on its outermost module boundaries
(a piece without FLOPs then joins a neighbour). So a ResNet is cut between its
residual blocks (one live tensor), a BERT between its encoder layers and between their
attention and feed-forward halves (the hidden state and the attention mask).

:func:`split` makes one ``GraphModule`` per layer: it takes the tensors live at its start
(the request's inputs for the first) and returns those live at its end (the model's
outputs for the last), a lone tensor unwrapped. The modules are built with the flattened
program as their root, so ``get_attr`` nodes refer to the very parameter tensors of the
loaded program: no weight is copied. (``torch.fx.passes.split_module`` wires values from
partition ``i`` straight to partition ``j > i+1`` through its top-level graph; a pipeline
stage only receives what the stage before it sends, so every layer here passes on what
is live across it.)
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

# nodes that only check (dtype, device, shape guards): dropped before cutting
_CHECKS = {
    "aten._assert_tensor_metadata.default",
    "aten._assert_scalar.default",
    "aten.sym_constrain_range_for_size.default",
    "aten.sym_constrain_range.default",
    "aten._assert_async.msg",
}
INSIDE = 1000  # the level of a position inside one module's code
_SYM_OPS = {
    operator.mul, operator.add, operator.sub, operator.floordiv, operator.mod,
    operator.truediv, operator.neg, operator.pow,
}  # fmt: skip


class CutError(ValueError):
    """The program cannot be flattened or cut as asked (message says why)."""


def _is_tensor(n: fx.Node) -> bool:
    return isinstance(n.meta.get("val"), torch.Tensor)


def _is_sym(n: fx.Node) -> bool:
    return isinstance(n.meta.get("val"), torch.SymInt | torch.SymFloat | torch.SymBool)


def _expr(v: Any) -> Any:
    return v.node.expr if isinstance(v, torch.SymInt) else v


def module_path(n: fx.Node) -> str:
    """The innermost module a node was traced in ('' for the model itself)."""
    stack = n.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    return "" if path.startswith("_empty") else str(path)


def flatten(ep: Any) -> fx.GraphModule:
    """The exported program as a flat graph module: positional tensor inputs, a tuple of
    output tensors (a ``None`` output left out: ``sources.leaf_names``), no guard or
    assertion nodes. The weights are the program's own."""
    gm = ep.module()
    gm._forward_pre_hooks.clear()  # the exported input-spec check: inputs are positional
    gm._forward_hooks.clear()
    g = gm.graph
    for n in list(g.nodes):
        if n.op == "call_module" and str(n.target).startswith("_guards"):
            g.erase_node(n)
    for n in reversed(list(g.nodes)):
        if n.op == "call_function" and str(n.target) in _CHECKS and not n.users:
            g.erase_node(n)
    g._codegen = fx.graph.CodeGen()  # no pytree in- and out-specs: flat tuples
    out = next(n for n in g.nodes if n.op == "output")
    outs = out.args[0]
    outs = tuple(outs) if isinstance(outs, list | tuple) else (outs,)
    out.args = (tuple(o for o in outs if o is not None),)  # a None output is no tensor
    g.eliminate_dead_code()
    g.lint()
    gm.recompile()
    return gm


def retarget(gm: fx.GraphModule, device: Any) -> bool:
    """Points the devices the export recorded in calls (``arange(device=)``, ``full``,
    ``to(x, device)``...: the device of the example inputs, usually ``cpu``) at ``device``, where
    the module's weights now are; returns whether any changed. Without this a model
    exported on the CPU and moved to a GPU builds those tensors on the CPU and fails
    ("Expected all tensors to be on the same device": a Hugging Face BERT's attention
    bias, found on a GPU)."""
    dev = torch.device(device)
    changed = False

    def move(v: Any) -> Any:
        nonlocal changed
        if isinstance(v, torch.device) and v != dev:
            changed = True
            return dev
        return v

    for n in gm.graph.nodes:
        kw = dict(n.kwargs)
        if isinstance(kw.get("device"), str):  # as written in the graph: a device name
            kw["device"] = torch.device(kw["device"])
        # positional too: ``aten.to.device(x, device, dtype, ...)``
        n.args = fx.node.map_aggregate(n.args, move)
        n.kwargs = fx.node.map_aggregate(kw, move)
    if changed:
        gm.recompile()
    return changed


@dataclass(frozen=True)
class Position:
    index: int  # cut before compute node ``index``
    live: tuple[str, ...]  # names of the tensors live here, in definition order
    level: int  # depth of the module boundary (0: outermost)
    valid: bool


class Cutter:
    """Liveness over a flattened graph, valid cuts, and the layers among them."""

    def __init__(self, gm: fx.GraphModule) -> None:
        self.gm = gm
        nodes = list(gm.graph.nodes)
        self.inputs = [n for n in nodes if n.op == "placeholder"]
        self.compute = [n for n in nodes if n.op in ("call_function", "call_method")]
        self.output = next(n for n in nodes if n.op == "output")
        for n in nodes:
            if n.op == "call_module":
                raise CutError(f"unexpected submodule call {n.target} in the flat graph")
        self.pos = {n: i for i, n in enumerate(self.compute)}
        n_c = len(self.compute)
        self.pos[self.output] = n_c
        for p in self.inputs:
            self.pos[p] = -1
        # last use of every value (placeholders and compute nodes)
        self.last_use: dict[fx.Node, int] = {}
        for n in [*self.inputs, *self.compute]:
            uses = [self.pos[u] for u in n.users if u in self.pos]
            self.last_use[n] = max(uses, default=self.pos[n])
        self.outputs = list(self.output.args[0])

    def live_at(self, p: int) -> list[fx.Node]:
        """Values defined before compute node ``p`` and used at or after it."""
        return [
            n for n in [*self.inputs, *self.compute[:p]] if self.last_use[n] >= p
        ]  # fmt: skip

    def _rebuildable(self, s: fx.Node, tensors: Sequence[fx.Node]) -> bool:
        e = _expr(s.meta.get("val"))
        for t in tensors:
            if any(_expr(d) == e for d in t.meta["val"].shape):
                return True
        if s.op != "call_function" or s.target not in _SYM_OPS:
            return False
        return all(
            self._rebuildable(a, tensors) if isinstance(a, fx.Node) else True for a in s.args
        )

    def position(self, p: int) -> Position:
        live = self.live_at(p)
        tensors = [n for n in live if _is_tensor(n)]
        valid = all(_is_tensor(n) or (_is_sym(n) and self._rebuildable(n, tensors)) for n in live)
        a = module_path(self.compute[p - 1]).split(".")
        b = module_path(self.compute[p]).split(".")
        level = 0
        while level < min(len(a), len(b)) and a[level] == b[level]:
            level += 1
        if a == b:  # inside one module: no boundary
            level = INSIDE
        return Position(p, tuple(n.name for n in tensors), level, valid)

    def positions(self) -> list[Position]:
        return [self.position(p) for p in range(1, len(self.compute))]

    def choose(
        self, flops: Sequence[float], refine: int = 16, max_layers: int = 64, max_live: int = 4
    ) -> list[int]:
        """The layer boundaries (compute-node indices, ``0`` and ``len`` included): while
        the piece with the most FLOPs holds more than ``1/refine`` of the model's, it is
        cut at its outermost module boundaries holding the fewest live tensors (no more
        than one more than the fewest any cut of the model holds, nor than ``max_live``).
        ``flops``: per compute node."""
        n = len(self.compute)
        if len(flops) != n:
            raise ValueError("one FLOP count per compute node expected")
        prefix = [0.0]
        for f in flops:
            prefix.append(prefix[-1] + f)
        total = prefix[-1]
        cands = {q.index: q for q in self.positions() if q.valid and len(q.live) <= max_live}
        inner = [len(q.live) for q in cands.values() if 0 < prefix[q.index] < total]
        cap = min(max_live, min(inner, default=max_live) + 1)
        pieces, done = [(0, n)], []
        while pieces and len(pieces) + len(done) < max_layers:
            pieces.sort(key=lambda ab: prefix[ab[1]] - prefix[ab[0]])
            a, b = pieces[-1]
            if (prefix[b] - prefix[a]) <= total / refine:
                break
            pieces.pop()
            inside = [q for i, q in cands.items() if a < i < b and len(q.live) <= cap]
            if not inside:
                done.append((a, b))
                continue
            outer = min(q.level for q in inside)
            inside = [q for q in inside if q.level == outer]
            few = min(len(q.live) for q in inside)
            cuts = sorted(q.index for q in inside if len(q.live) == few)
            # a run of equal positions (a chain of ops between two modules): its first
            runs = [c for i, c in enumerate(cuts) if i == 0 or cuts[i - 1] != c - 1]
            edges = [a, *runs, b]
            pieces.extend(itertools.pairwise(edges))
        bounds = sorted({0, n, *(a for a, _ in pieces + done)})
        # a piece without FLOPs (glue, a norm after a convolution) joins the piece before it
        # (the first such piece, the one after it)
        keep = [0] + [c for c, d in itertools.pairwise(bounds) if prefix[d] > prefix[c]]
        if len(keep) > 1 and prefix[keep[1]] == 0.0:
            keep.pop(1)
        out = [*keep, n]
        return out


def layer_name(cutter: Cutter, a: int, b: int) -> str:
    """A name for compute nodes ``a..b-1`` that says what they hold: the module path they
    all run in where they hold every operator of that module ('model' at the top), else
    the first and the last operator's module paths (``bert.embeddings.word_embeddings ..
    bert.encoder.layer.0.attention.self.query``): a common ancestor alone would name a
    piece holding the embeddings and part of a layer by the whole model."""
    paths = [module_path(n) for n in cutter.compute[a:b] if module_path(n)]
    if not paths:
        return "model"
    parts = [p.split(".") for p in paths]
    common = parts[0]
    for q in parts[1:]:
        k = 0
        while k < min(len(common), len(q)) and common[k] == q[k]:
            k += 1
        common = common[:k]
    if common:
        prefix = ".".join(common)
        inside = [
            i for i, n in enumerate(cutter.compute)
            if (module_path(n) + ".").startswith(prefix + ".")
        ]  # fmt: skip
        if inside and a <= inside[0] and inside[-1] < b:
            return prefix
    return paths[0] if paths[0] == paths[-1] else f"{paths[0]} .. {paths[-1]}"


def split(cutter: Cutter, bounds: Sequence[int]) -> list[fx.GraphModule]:
    """One module per layer ``bounds[i]..bounds[i+1]`` (module docstring)."""
    mods = []
    for a, b in itertools.pairwise(bounds):
        first, last = a == 0, b == len(cutter.compute)
        ins = list(cutter.inputs) if first else [n for n in cutter.live_at(a) if _is_tensor(n)]
        outs = cutter.outputs if last else [n for n in cutter.live_at(b) if _is_tensor(n)]
        mods.append(_segment(cutter, ins, cutter.compute[a:b], outs))
    return mods


def _segment(
    cutter: Cutter, ins: list[fx.Node], body: list[fx.Node], outs: list[Any]
) -> fx.GraphModule:
    g = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for n in ins:
        env[n] = g.placeholder(n.name)
        env[n].meta = dict(n.meta)

    def value(n: fx.Node) -> fx.Node:
        if n in env:
            return env[n]
        if n.op == "get_attr":
            env[n] = g.get_attr(str(n.target))
            env[n].meta = dict(n.meta)
            return env[n]
        if _is_sym(n):  # a size computed before the cut: recompute it here
            env[n] = _rebuild(g, n, ins, env)
            return env[n]
        raise CutError(f"value {n.name} crosses a cut but is not passed on")

    for n in body:
        for a in n.all_input_nodes:
            value(a)
        env[n] = g.node_copy(n, lambda m: env[m])
    results = [value(o) if isinstance(o, fx.Node) else o for o in outs]
    g.output(results[0] if len(results) == 1 else tuple(results))
    g.lint()
    return fx.GraphModule(cutter.gm, g)


def _rebuild(g: fx.Graph, s: fx.Node, ins: list[fx.Node], env: dict[fx.Node, fx.Node]) -> fx.Node:
    e = _expr(s.meta.get("val"))
    for t in ins:
        if not _is_tensor(t):
            continue
        for d, size in enumerate(t.meta["val"].shape):
            if _expr(size) == e:
                node = g.call_function(torch.ops.aten.sym_size.int, (env[t], d))
                node.meta = dict(s.meta)
                return node
    if s.op == "call_function" and s.target in _SYM_OPS:
        args = tuple(
            (env[a] if a in env else _rebuild(g, a, ins, env)) if isinstance(a, fx.Node) else a
            for a in s.args
        )
        node = g.call_function(s.target, args)
        node.meta = dict(s.meta)
        return node
    raise CutError(f"size {s.name} ({e}) cannot be recomputed after the cut")


def node_flops(gm: fx.GraphModule, args: Sequence[Any]) -> list[float]:
    """FLOPs of every compute node (the order of :class:`Cutter`) on ``args``."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    flops: list[float] = []

    class _Run(fx.Interpreter):
        def run_node(self, n: fx.Node) -> Any:
            if n.op not in ("call_function", "call_method"):
                return super().run_node(n)
            before = counter.get_total_flops()
            out = super().run_node(n)
            flops.append(float(counter.get_total_flops() - before))
            return out

    with torch.no_grad(), counter:
        _Run(gm).run(*args)
    return flops


# ------------------------------------------------------------------ leaf-module calls


def leaf_calls(gm: fx.GraphModule) -> dict[str, tuple[str, str, str]]:
    """Per operator node traced inside a *leaf* module (one no other traced module is
    inside): (the call's key, the module's path, its class name). Operators of container
    modules (attention's matmuls, residual adds) are glue, not listed."""
    where: dict[str, tuple[str, str, str]] = {}
    for n in gm.graph.nodes:
        stack = n.meta.get("nn_module_stack") or {}
        if n.op == "call_function" and stack:
            key, (path, kind) = list(stack.items())[-1]
            if path and not str(path).startswith("_empty"):  # (not the model itself)
                where[n.name] = (str(key), str(path), str(getattr(kind, "__name__", kind)))
    paths = {p for _, p, _ in where.values()}
    inner = {p.rsplit(".", i)[0] for p in paths for i in range(1, p.count(".") + 1)}
    return {
        n: (key, path, kind.rsplit(".", 1)[-1])
        for n, (key, path, kind) in where.items()
        if path not in inner
    }


def run_marked(
    piece: fx.GraphModule, x: Any, calls: dict[str, tuple[str, str, str]], on_call: Any
) -> Any:
    """Run ``piece`` node by node, calling ``on_call(path, kind)`` where a leaf call in
    ``calls`` begins."""
    state = [""]

    class _Marked(fx.Interpreter):
        def run_node(self, n: fx.Node) -> Any:
            c = calls.get(n.name) if n.op == "call_function" else None
            if c is not None and c[0] != state[0]:
                state[0] = c[0]
                on_call(c[1], c[2])
            return super().run_node(n)

    args = x if isinstance(x, tuple) else (x,)
    return _Marked(piece).run(*args)
