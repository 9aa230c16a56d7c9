# cython: annotation_typing=False
"""A cold start's ready times (``core/coldstart.py``'s :class:`TimelineParts`): when each
layer's weights are on the primary GPU, for one sharing of the host links.

Part 0's layers arrive back to back over the primary's own host link; each secondary's
over its host link, each then forwarded over NVLink once it has arrived and the previous
forward is done (the module docstring of ``core/coldstart.py``). A simulated run of
DeepPlan's 180 instances asks for about 130 sharings, one per distinct ``load_scale`` a
cold start meets: this loop, per loaded layer, was 8% of such a 60-second run's time as
Python.

This file is plain Python and runs as it is. Where the package was built with Cython
(``setup.py``; ``timeline_core_c.pxd`` beside it declares the C types: the loaded layers'
numbers as C buffers), the same file is also compiled as ``hetserve.core.timeline_core_c``,
and ``core/coldstart.py`` calls that one (``HETSERVE_PURE_PYTHON=1`` keeps this file). Both
make the same doubles by the same operations in the same order."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["ready_times"]


def ready_times(
    layer: Sequence[int],
    load_s: Sequence[float],
    fwd_s: Sequence[float],
    part_end: Sequence[int],
    scale: Sequence[float],
    n_layers: int,
) -> tuple[tuple[float, ...], float]:
    """Each layer's ready time and the latest of them (0.0 where there is no layer).

    The loaded layers are listed part by part: part ``p``'s are positions
    ``part_end[p - 1]`` (0 for part 0) up to ``part_end[p]`` of ``layer`` (the layer's
    number), ``load_s`` (its load time over its part's host link, unshared) and ``fwd_s``
    (its NVLink forward time; part 0's are not read). Part ``p``'s load times are
    multiplied by ``scale[p]`` (1.0 past the end of ``scale``). Layers not listed (DHA,
    no weights) are ready at 0.0."""
    ready = [0.0] * n_layers
    n_scale = len(scale)
    start = 0
    last = 0.0  # (each layer is listed once: the latest of the times set)
    for p in range(len(part_end)):
        share = scale[p] if p < n_scale else 1.0
        end = part_end[p]
        link_free = 0.0  # the part's host link
        fwd_free = 0.0  # a secondary's forwards
        for k in range(start, end):
            t = link_free = link_free + load_s[k] * share
            if p > 0:
                if fwd_free > t:
                    t = fwd_free
                t = fwd_free = t + fwd_s[k]
            ready[layer[k]] = t
            if t > last:
                last = t
        start = end
    return tuple(ready), last
