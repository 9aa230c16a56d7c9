"""The reconciler: from (current plan and placement, target plan and placement) to the
steps of a switch (``docs/control.md``).

A worker's *need* under a plan is, per model, the blocks the plan's stages on it run (a
bit mask). Comparing the two needs of every worker says what each one does in the switch:

- ``keep``: the same blocks of the same models: it serves on, untouched;
- ``change``: in both placements with other blocks: it loads what the target adds
  *beside* what it holds (where its memory allows), and evicts what the target drops
  once the current plan's requests have left it;
- ``add``: only in the target: it loads its blocks;
- ``remove``: only in the current placement: once drained its weights are evicted and
  the GPU is no longer the plan's.

Loads go in *waves* of at most ``max_parallel`` workers, so a switch never has more than
that many workers moving weights at once. Pure functions of plain data: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hetserve.core.errors import HetserveError
from hetserve.core.plan import Placement, Plan

#: per worker: model -> bit mask of the blocks its stages run
Need = dict[str, int]
#: (model, [start, stop) of blocks)
Blocks = tuple[str, tuple[int, int]]

KINDS = ("keep", "change", "add", "remove")


def block_mask(blocks: tuple[int, int]) -> int:
    """The bit mask of blocks ``[start, stop)``."""
    return ((1 << blocks[1]) - 1) ^ ((1 << blocks[0]) - 1)


def mask_ranges(mask: int) -> list[tuple[int, int]]:
    """A bit mask of blocks as contiguous ``[start, stop)`` ranges, in order."""
    out: list[tuple[int, int]] = []
    k = 0
    while mask >> k:
        if mask >> k & 1:
            start = k
            while mask >> k & 1:
                k += 1
            out.append((start, k))
        else:
            k += 1
    return out


def needs(plan: Plan, placement: Placement) -> dict[str, Need]:
    """Every placed worker's need (workers that serve nothing need nothing)."""
    out: dict[str, Need] = {w.id: {} for w in placement.workers}
    for (model, pi, si), ws in placement.stages.items():
        st = plan.models[model].pipelines[pi].stages[si]
        m = block_mask(st.blocks)
        for wid in ws:
            need = out.setdefault(wid, {})
            need[model] = need.get(model, 0) | m
    return out


def _ranges(need: Need) -> tuple[Blocks, ...]:
    return tuple((m, r) for m in sorted(need) for r in mask_ranges(need[m]))


def _minus(a: Need, b: Need) -> Need:
    out = {m: mask & ~b.get(m, 0) for m, mask in a.items()}
    return {m: v for m, v in out.items() if v}


@dataclass(frozen=True)
class WorkerChange:
    """What one worker does in a switch (module docstring)."""

    worker: str
    kind: str  # one of KINDS
    load: tuple[Blocks, ...] = ()  # loaded before the target plan takes requests
    evict: tuple[Blocks, ...] = ()  # freed once the current plan's requests are gone


@dataclass(frozen=True)
class SwitchSteps:
    """A switch, planned: per worker its change, and the waves its loads go in."""

    changes: tuple[WorkerChange, ...]  # by worker id
    waves: tuple[tuple[str, ...], ...]  # workers that load; each wave at most max_parallel

    def of(self, kind: str) -> list[str]:
        """The workers of one kind (``KINDS``)."""
        return [c.worker for c in self.changes if c.kind == kind]

    @property
    def moved(self) -> int:
        """Workers whose weights change (every one that is not kept)."""
        return sum(c.kind != "keep" for c in self.changes)

    @property
    def loads(self) -> list[tuple[str, Blocks]]:
        """Every load of the switch: (worker, (model, blocks))."""
        return [(c.worker, b) for c in self.changes for b in c.load]

    def describe(self) -> str:
        """One line: how many workers of each kind, loads and waves."""
        counts = ", ".join(f"{len(self.of(k))} {k}" for k in KINDS if self.of(k))
        return (
            f"{counts or 'nothing'}; {len(self.loads)} loads in {len(self.waves)} "
            f"wave{'s' * (len(self.waves) != 1)}"
        )


def reconcile(
    current: tuple[Plan, Placement],
    target: tuple[Plan, Placement],
    max_parallel: int = 4,
) -> SwitchSteps:
    """The steps from the current plan's placement to the target's (module docstring)."""
    if max_parallel < 1:
        raise HetserveError(f"max_parallel must be >= 1, got {max_parallel}")
    old, new = needs(*current), needs(*target)
    changes = []
    for wid in sorted(set(old) | set(new)):
        a, b = old.get(wid), new.get(wid)
        if a is None:
            assert b is not None
            kind, load, evict = "add", b, {}
        elif b is None:
            kind, load, evict = "remove", {}, a
        elif a == b:
            kind, load, evict = "keep", {}, {}
        else:
            kind, load, evict = "change", _minus(b, a), _minus(a, b)
        changes.append(WorkerChange(wid, kind, _ranges(load), _ranges(evict)))
    loaders = [c.worker for c in changes if c.load]
    waves = tuple(
        tuple(loaders[k : k + max_parallel]) for k in range(0, len(loaders), max_parallel)
    )
    return SwitchSteps(tuple(changes), waves)


def placement_hint(plan: Plan, placement: Placement) -> Mapping[str, frozenset[tuple]]:
    """Per GPU id, what its workers served under ``plan``: ``(model, blocks, share)``
    (what ``core.placement.bind`` takes as ``prefer``, so that a new plan keeps a GPU on
    the stage it already holds)."""
    out: dict[str, set[tuple]] = {}
    slots = {w.id: w for w in placement.workers}
    for (model, pi, si), ws in placement.stages.items():
        st = plan.models[model].pipelines[pi].stages[si]
        for wid in ws:
            w = slots[wid]
            out.setdefault(w.gpu_id, set()).add((model, st.blocks, st.share))
    return {g: frozenset(v) for g, v in out.items()}
