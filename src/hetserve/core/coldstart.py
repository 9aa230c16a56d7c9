"""The cold-start timeline: how long a model takes to run while its weights arrive.

DeepPlan (EuroSys 2023, sections 3-4). A *load plan* says, per layer of a layer table
(``core.layertable``), how the layer gets its weights:

- ``LOAD`` over part ``k``: part 0 is the primary GPU's own host link; part ``k >= 1``
  is the host link of secondary GPU ``k``, then NVLink from it to the primary (DeepPlan's
  parallel transmission, PT);
- ``DHA``: never loaded, executed reading its weights from pinned host memory.

The primary's *load stream* copies the part-0 layers in order, back to back. Each
secondary copies its part's layers in order and a *migration stream* forwards each over
NVLink as soon as it has arrived and the previous forward is done. The *execution
stream* runs the layers in order; a loaded layer starts when the previous layer has
finished and its weights are on the primary (the gap is its *stall*); a DHA layer and a
layer without weights never wait for a load. Without pipelining (``pipelined=False``,
the baseline) execution starts when every load has finished.

``load_scale[k]`` multiplies the load times over part ``k``'s host link (2.0: the link is
shared with another cold start, DeepPlan's Table 4). The function is pure: the planner
optimises over it, the simulator and the emulated runtime follow it, and the runtime's
CUDA loader is measured against it.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from hetserve.core.compiled import build_of
from hetserve.core.errors import HetserveError
from hetserve.core.layertable import LayerRow

# the ready times' loop (``core/timeline_core.py``): its compiled build where there is one
# (by name: the Python file is imported only where the build is not taken)
_timeline_core, TIMELINE_COMPILED = build_of("hetserve.core.timeline_core")

LOAD, DHA = "load", "dha"
PLAN_KINDS = ("baseline", "pipeswitch", "dha", "pt", "pt+dha", "optimal")


@dataclass(frozen=True)
class LoadPlan:
    """Per layer: ``modes[i]`` (``"load"`` or ``"dha"``) and ``parts[i]`` (the host link
    a loaded layer comes over: 0 primary, ``k`` secondary ``k``; -1 for DHA)."""

    kind: str
    modes: tuple[str, ...]
    parts: tuple[int, ...]
    pipelined: bool = True

    def __post_init__(self) -> None:
        if len(self.modes) != len(self.parts):
            raise HetserveError(f"load plan {self.kind}: one part per layer expected")
        for i, (m, p) in enumerate(zip(self.modes, self.parts, strict=True)):
            if m not in (LOAD, DHA):
                raise HetserveError(f"load plan {self.kind}: layer {i}: mode {m!r}")
            if (m == DHA) != (p < 0):
                raise HetserveError(
                    f"load plan {self.kind}: layer {i}: a DHA layer has part -1, a loaded "
                    f"layer a part >= 0 (got {m} over part {p})"
                )

    @cached_property
    def n_parts(self) -> int:
        return max(self.parts, default=0) + 1

    @property
    def dha_layers(self) -> tuple[int, ...]:
        return tuple(i for i, m in enumerate(self.modes) if m == DHA)

    @staticmethod
    def all_loaded(n: int, kind: str = "pipeswitch", pipelined: bool = True) -> LoadPlan:
        return LoadPlan(kind, (LOAD,) * n, (0,) * n, pipelined)

    @staticmethod
    def from_sets(
        kind: str, n: int, dha: Sequence[int] = (), parts: Sequence[int] | None = None
    ) -> LoadPlan:
        """A plan with layers ``dha`` on DHA and the rest loaded over ``parts`` (default 0)."""
        d = set(dha)
        ps = list(parts) if parts is not None else [0] * n
        return LoadPlan(
            kind,
            tuple(DHA if i in d else LOAD for i in range(n)),
            tuple(-1 if i in d else ps[i] for i in range(n)),
        )


@dataclass(frozen=True)
class ModelLoadPlan:
    """A plan file's per-model load plan (``load_plans`` in docs/formats.md#plans): the
    plan for cold starts on ``gpu`` at ``batch``, with the predictions it was chosen by."""

    plan: LoadPlan
    gpu: str
    batch: int = 1
    parallelism: int = 1
    nvlink_gbps: float | None = None
    layers_source: str = "estimate"
    predicted: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.plan.kind,
            "gpu": self.gpu,
            "batch": self.batch,
            "pipelined": self.plan.pipelined,
            "layers": len(self.plan.modes),
            "parallelism": self.parallelism,
            "nvlink_gbps": self.nvlink_gbps,
            "layers_source": self.layers_source,
            "dha": list(self.plan.dha_layers),
            "parts": list(self.plan.parts),
            "predicted": dict(self.predicted),
        }

    @staticmethod
    def from_json(data: Any, where: str) -> ModelLoadPlan:
        from hetserve.core.errors import ConfigError

        if not isinstance(data, dict):
            raise ConfigError(f"{where}: expected an object")
        try:
            parts = [int(p) for p in data["parts"]]
            if int(data["layers"]) != len(parts):
                raise ConfigError(
                    f"{where}.parts: {len(parts)} entries for {data['layers']} layers"
                )
            plan = LoadPlan(
                str(data["kind"]),
                tuple(DHA if p < 0 else LOAD for p in parts),
                tuple(max(p, -1) for p in parts),
                bool(data.get("pipelined", True)),
            )
            nv = data.get("nvlink_gbps")
            return ModelLoadPlan(
                plan,
                str(data["gpu"]),
                int(data.get("batch", 1)),
                int(data.get("parallelism", plan.n_parts)),
                float(nv) if nv is not None else None,
                str(data.get("layers_source", "")),
                {str(k): float(v) for k, v in dict(data.get("predicted", {})).items()},
            )
        except KeyError as e:
            raise ConfigError(f"{where}: missing field {e}") from None
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{where}: malformed load plan ({e})") from None


@dataclass(frozen=True)
class Timeline:
    """Per layer (seconds from the cold start): when its weights are on the primary GPU
    (``ready_s``; 0 for DHA and weightless layers), how long it executes (``exec_s``),
    when execution may begin (``begin_s``: 0 pipelined, else when every load has ended)
    and the bytes involved; replayed from these when first read, each layer's execution
    start and end and its stall, and the total latency (a simulated cold start reads the
    arrivals only)."""

    ready_s: tuple[float, ...]
    exec_s: tuple[float, ...]
    begin_s: float
    gpu_bytes: int  # weights resident on the primary GPU once loaded
    loaded_bytes: tuple[int, ...] = field(default=())  # per part
    dha_bytes: int = 0  # weights left in host memory
    # (``load_done_s``: set once, made here, not a ``cached_property``: in Python 3.11
    # that takes a lock at its first read, about 20,000 instructions, as long as a
    # 76-layer timeline's making; a simulated cold start reads it once per new timeline)
    _load_done_s: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_load_done_s", max(self.ready_s, default=0.0))

    @cached_property
    def latency_s(self) -> float:
        prev = self.begin_s  # (the execution stream, as ``_schedule`` replays it)
        for x, a in zip(self.exec_s, self.ready_s, strict=True):
            prev = (a if a > prev else prev) + x
        return prev

    @cached_property
    def _schedule(self) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
        """(execution starts, ends, stalls): the execution stream layer by layer."""
        prev = self.begin_s
        starts, ends, stalls = [], [], []
        for x, a in zip(self.exec_s, self.ready_s, strict=True):
            s = a if a > prev else prev
            stalls.append(s - prev)
            starts.append(s)
            prev = s + x
            ends.append(prev)
        return tuple(starts), tuple(ends), tuple(stalls)

    @property
    def exec_start_s(self) -> tuple[float, ...]:
        return self._schedule[0]

    @property
    def exec_end_s(self) -> tuple[float, ...]:
        return self._schedule[1]

    @property
    def stall_s(self) -> tuple[float, ...]:
        return self._schedule[2]

    @property
    def total_stall_s(self) -> float:
        return sum(self.stall_s)

    @property
    def load_done_s(self) -> float:
        """When the last load ends (0.0 with no loads)."""
        return self._load_done_s


def _check(rows: Sequence[LayerRow], plan: LoadPlan) -> None:
    if len(rows) != len(plan.modes):
        raise HetserveError(
            f"load plan {plan.kind} has {len(plan.modes)} layers; the layer table has {len(rows)}"
        )


class TimelineParts:
    """What a plan's timeline over some layer rows is made of, less the link shares: per
    layer its execution time, per part its loaded layers' load and NVLink forward times,
    and the plan's totals. :meth:`timeline` gives the timeline for any ``load_scale``. The
    simulator keeps one of these per architecture, load plan and GPU type, and asks it for
    each sharing of the host links that a cold start meets (a 180-instance run on four
    GPUs meets about 130: its first loads start together, each sharing more)."""

    def __init__(
        self, rows: Sequence[LayerRow], plan: LoadPlan, nvlink_gbps: float | None = None
    ) -> None:
        _check(rows, plan)
        if plan.n_parts > 1 and not nvlink_gbps:
            raise HetserveError(
                f"load plan {plan.kind} loads over {plan.n_parts} GPUs' host links: parallel "
                f"transmission needs NVLink between them (no NVLink bandwidth given)"
            )
        self.n_parts = plan.n_parts
        self.pipelined = plan.pipelined
        # per part, its loaded layers (weights, not DHA) in order: (layer, load s, forward s)
        loads: list[list[tuple[int, float, float]]] = [[] for _ in range(plan.n_parts)]
        exec_s = []
        loaded = [0] * plan.n_parts
        dha = 0
        for i, (r, m, p) in enumerate(zip(rows, plan.modes, plan.parts, strict=True)):
            exec_s.append((r.exec_host_us if m == DHA else r.exec_gpu_us) * 1e-6)
            if m == DHA:
                dha += r.param_bytes
            if m == DHA or r.param_bytes == 0:
                continue
            loaded[p] += r.param_bytes
            fwd = r.param_bytes / (nvlink_gbps * 1e9) if p > 0 and nvlink_gbps else 0.0
            loads[p].append((i, r.load_us * 1e-6, fwd))
        self.exec_s: tuple[float, ...] = tuple(exec_s)
        self.loaded_bytes = tuple(loaded)
        self.dha_bytes = dha
        # the loads as C buffers, part after part (``timeline_core.ready_times``): each
        # layer's number, load and forward time, and where each part's end
        flat = [x for part in loads for x in part]
        self._layer = array("q", [x[0] for x in flat])
        self._load_s = array("d", [x[1] for x in flat])
        self._fwd_s = array("d", [x[2] for x in flat])
        self._part_end = array("q", itertools.accumulate(len(part) for part in loads))

    def timeline(self, load_scale: Sequence[float] = ()) -> Timeline:
        """The timeline with part ``k``'s load times multiplied by ``load_scale[k]``
        (1.0 for parts past its end)."""
        ready, last = _timeline_core.ready_times(
            self._layer, self._load_s, self._fwd_s, self._part_end, tuple(load_scale),
            len(self.exec_s),
        )  # fmt: skip
        begin_s = last if not self.pipelined else 0.0
        return Timeline(
            ready, self.exec_s, begin_s, sum(self.loaded_bytes), self.loaded_bytes,
            self.dha_bytes,
        )  # fmt: skip


def timeline(
    rows: Sequence[LayerRow],
    plan: LoadPlan,
    nvlink_gbps: float | None = None,
    load_scale: Sequence[float] = (),
) -> Timeline:
    """The module docstring's timeline of ``plan`` over the layer times ``rows``."""
    return TimelineParts(rows, plan, nvlink_gbps).timeline(load_scale)


def warm_latency_s(rows: Sequence[LayerRow], plan: LoadPlan) -> float:
    """Latency once the loaded layers are resident (DHA layers still read host memory)."""
    _check(rows, plan)
    return 1e-6 * sum(
        r.exec_host_us if m == DHA else r.exec_gpu_us for r, m in zip(rows, plan.modes, strict=True)
    )
