"""A batch as the workers hold it: tensors (or tuples of them, one per model input or
output) whose first dimension is the batch, made of requests of ``rows`` rows each, one
after the other. Shared by the threads executor and the Ray actors."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch


def row_versions(
    version_of: Callable[[int], int | None] | None, requests: Sequence[Any]
) -> tuple[int | None, ...] | None:
    """A batch's rows' model versions, row by row (each request's for all its rows; None
    when every row asks for the default one)."""
    if version_of is None:
        return None
    vs = tuple(v for r in requests for v in (version_of(r.id),) * r.rows)
    return vs if any(v is not None for v in vs) else None


def batch_input(net: Any, requests: Sequence[Any], payload: Sequence[Any] | None) -> Any:
    """A batch's input: its requests' inputs (each ``rows`` rows, with the batch as their
    first dimension) one after the other; the model's example input for a request
    without one."""
    xs = [
        p if p is not None else net.input_spec.example(r.rows)
        for p, r in zip(payload or [None] * len(requests), requests, strict=True)
    ]
    return xs[0] if len(xs) == 1 else concat(xs)


def map_tensors(x: Any, fn: Callable[[Any], Any]) -> Any:
    """``fn`` on every tensor of ``x`` (a tensor, or a tuple of them)."""
    if isinstance(x, torch.Tensor):
        return fn(x)
    return type(x)(map_tensors(v, fn) for v in x)


def split(out: Any, rows: Sequence[int]) -> list[Any]:
    """A batch's output cut into its requests' parts, ``rows[i]`` rows for request ``i``
    (each keeps the batch dimension)."""
    parts, lo = [], 0
    for k in rows:
        parts.append(slice_rows(out, lo, lo + k))
        lo += k
    return parts


def slice_rows(x: Any, lo: int, hi: int) -> Any:
    """Rows ``lo .. hi - 1`` of a batch (a tensor, or a tuple of them)."""
    if isinstance(x, torch.Tensor):
        return x[lo:hi]
    return type(x)(slice_rows(v, lo, hi) for v in x)


def take(x: Any, rows: torch.Tensor) -> Any:
    """Rows ``rows`` of a batch (a tensor, or a tuple of them)."""
    return map_tensors(x, lambda t: t.index_select(0, rows.to(t.device)))


def concat(parts: Sequence[Any]) -> Any:
    """Parts of a batch (tensors, or tuples of them) joined along the batch dimension."""
    first = parts[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(list(parts))
    return type(first)(concat([p[k] for p in parts]) for k in range(len(first)))
