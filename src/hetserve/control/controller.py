"""The controller: when to re-plan, and whether a new plan is worth the switch
(``docs/control.md``).

A controller is a pure object, as a scheduler is: no clock, no I/O, the same object in
both engines. The engine's control loop (``engine.control``) hands it a :class:`Snapshot`
every period; it answers with a :class:`Replan` (plan for these rates) or nothing. When
the planner's candidate comes back, the loop computes what switching to it would cost
(:class:`SwitchEstimate`: loads, requests delayed, from the cluster's host links and the
observed rates) and the controller :meth:`~Controller.judge`\\ s it: switch only when the
predicted gain over a horizon exceeds the predicted cost, both in requests.

The built-in :class:`RateController`:

- ``every`` mode: a re-plan every ``period_s`` (Shepherd's periodic HERD, PPipe's
  periodic MILP);
- ``auto`` mode: a re-plan when a model's rate has moved from the rate the plan was made
  for by more than ``change`` (a ratio: 0.25 is 25% up or 20% down), in the short window
  *and* the long one (a burst alone does not move the plan: hysteresis); when a model's
  load ratio (rate over the plan's capacity for it) passes ``high_load`` in both windows;
  when every model's falls below ``low_load`` in both (over-provisioned: set for the cost
  objective, whose re-plans give GPUs back); or at once when attainment over the short
  window falls below ``alarm`` (the alarm);
- never more often than ``period_s``, except up: a re-plan for more (a rate up out of
  its band, a load ratio high, the alarm) may come ``up_period_s`` after the last (a
  quarter period by default: up fast, down slowly); never while a switch is under way.

Rates asked for: per model the larger of the short and the long window's rate (up fast,
down slowly: capacity is released only once the long window agrees).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

from hetserve.core.errors import HetserveError

MODES = ("auto", "every", "off")


@dataclass(frozen=True)
class Snapshot:
    """What the control loop observed, at ``now_s``."""

    now_s: float
    rate_rps: dict[str, float]  # per model: arrivals over the short window / its length
    rate_long_rps: dict[str, float]  # over the long window
    attainment: float | None  # share meeting their SLO of the requests due in the window
    due: int  # requests whose deadline fell in the short window (attainment's base)
    plan_version: int
    planned_rps: dict[str, float]  # the rates the current plan was made for
    capacity_rps: dict[str, float]  # the current plan's planned capacity per model
    gpus: int  # physical GPUs the current plan holds
    busy: bool = False  # a solve or a switch is under way
    # per model: a high quantile of its rate over short bins of the long window (bursts)
    rate_peak_rps: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Replan:
    """Ask the planner for a plan for ``rates_rps``; ``reason`` is logged."""

    rates_rps: dict[str, float]
    reason: str


@dataclass(frozen=True)
class SwitchEstimate:
    """What switching to a candidate plan would cost and give, computed by the control
    loop from the reconciler's steps (``control.reconcile``), the weights' bytes and the
    host links, and the observed rates."""

    capacity_rps: dict[str, float]  # the candidate's planned capacity per model
    gpus: int  # physical GPUs the candidate holds
    moved: int  # workers whose weights change
    load_s: float  # predicted time until every load has ended (waves one after another)
    load_gpu_s: float  # GPU-seconds spent loading weights
    delayed: float  # requests predicted to be delayed by the switch
    switch_s: float  # predicted wall time of the switch (workers started, loads, the drain)
    ready_s: float = 0.0  # of it, starting the workers the run does not have (Ray's actors)


@dataclass(frozen=True)
class Decision:
    """The controller's verdict on a candidate, with the figures it weighed."""

    switch: bool
    gain: float  # requests more served within their SLO over the horizon
    cost: float  # requests delayed by the switch
    gpu_s_saved: float  # GPU-seconds saved over the horizon, loading deducted
    text: str  # one line for the log


class Controller(Protocol):
    """The controller seam (module docstring); the engine's control loop calls it."""

    def observe(self, snap: Snapshot) -> Replan | None:
        """Called every ``period`` of the loop's own: a re-plan to ask for, or None."""
        ...

    def judge(self, snap: Snapshot, want: Replan, est: SwitchEstimate) -> Decision:
        """Called when the planner's candidate for ``want`` is back: switch to it or not
        (``snap`` is the snapshot that asked for it)."""
        ...


def served_rps(rates: dict[str, float], capacity: dict[str, float]) -> float:
    """Requests/s served within their SLO, as a fluid model predicts: per model the
    smaller of its rate and its capacity."""
    return sum(min(r, capacity.get(m, 0.0)) for m, r in rates.items())


@dataclass
class RateController:
    """The built-in controller (module docstring)."""

    mode: str = "auto"
    period_s: float = 60.0  # at most one re-plan per period
    change: float = 0.25  # auto: a rate this far from the planned one (ratio) re-plans
    alarm: float = 0.9  # auto: attainment below this over the short window re-plans
    min_due: int = 50  # the alarm needs at least this many requests due in the window
    horizon_s: float = 600.0  # the gain of a switch is counted over this long
    min_gain: float = 1.0  # a switch must gain at least this many requests net
    high_load: float = 0.9  # auto: a model this close to its planned capacity re-plans
    # what one delayed request is worth in GPU-seconds, to weigh GPU-seconds saved against
    # requests delayed by the switch that saves them
    request_gpu_s: float = 1.0
    # the rates a re-plan asks for: "mean" (per model the larger of the two windows'
    # rates) or "peak" (the snapshot's burst rate, where larger: a plan that carries the
    # bursts it saw)
    size_by: str = "mean"
    up_period_s: float | None = None  # re-plans for more, at most this often (period / 4)
    low_load: float | None = None  # auto: every model below this share of it re-plans
    _last_s: float = field(default=-math.inf, repr=False)

    def __post_init__(self) -> None:
        if self.size_by not in ("mean", "peak"):
            raise HetserveError(f"controller size_by: expected mean or peak, got {self.size_by}")
        if self.mode not in MODES:
            raise HetserveError(f"replan mode: expected one of {', '.join(MODES)}, got {self.mode}")
        for name in ("period_s", "change", "horizon_s"):
            v = getattr(self, name)
            if not 0 < v < math.inf:
                raise HetserveError(f"controller {name}: expected a number > 0, got {v}")
        if not 0 <= self.alarm <= 1:
            raise HetserveError(
                f"controller alarm: expected an attainment in [0, 1], got {self.alarm}"
            )

    def observe(self, snap: Snapshot) -> Replan | None:
        if self.mode == "off" or snap.busy:
            return None
        since = snap.now_s - self._last_s
        up_period = self.period_s / 4 if self.up_period_s is None else self.up_period_s
        if since < min(self.period_s, up_period):
            return None
        down_ok = since >= self.period_s  # (else only a re-plan for more may come)
        levels = {m: self._levels(snap, m) for m in snap.planned_rps}
        rates = self._rates(snap)
        if self.mode == "every":
            return self._ask(snap, rates, "periodic") if down_ok else None
        moved = [m for m in snap.planned_rps if self._moved(snap.planned_rps[m], *levels[m])]
        if not down_ok:  # only moves up
            moved = [m for m in moved if min(levels[m]) > snap.planned_rps[m]]
        if moved:
            text = ", ".join(
                f"{m} {snap.planned_rps[m]:.1f} -> {levels[m][0]:.1f} req/s" for m in moved
            )
            return self._ask(snap, rates, f"rates moved: {text}")
        cap = {m: max(snap.capacity_rps.get(m, 0.0), 1e-12) for m in snap.planned_rps}
        ratios = {m: min(levels[m]) / cap[m] for m in snap.planned_rps}
        hot = [m for m, r in ratios.items() if r > self.high_load]
        if hot:
            text = ", ".join(f"{m} at {ratios[m]:.0%} of its capacity" for m in hot)
            return self._ask(snap, rates, f"load high: {text}")
        peak = max((max(levels[m]) / cap[m] for m in snap.planned_rps), default=0.0)
        if self.low_load is not None and peak < self.low_load and down_ok:
            return self._ask(
                snap, rates, f"over-provisioned: every model below {peak:.0%} of its capacity"
            )
        att = snap.attainment
        if att is not None and snap.due >= self.min_due and att < self.alarm:
            # the plan fell short by the share missed: ask for that much more
            more = {m: r / max(att, 0.5) for m, r in rates.items()}
            return self._ask(
                snap, more, f"attainment {snap.attainment:.1%} < {self.alarm:.0%} (alarm)"
            )
        return None

    def _levels(self, snap: Snapshot, m: str) -> tuple[float, float]:
        """A model's load as the tests read it, in two windows: the short and the long
        window's rates (``size_by="mean"``), or the burst rate twice (``"peak"``: it is
        read over the long window already)."""
        if self.size_by == "peak":
            p = snap.rate_peak_rps.get(m, 0.0)
            return p, p
        return snap.rate_rps.get(m, 0.0), snap.rate_long_rps.get(m, 0.0)

    def _rates(self, snap: Snapshot) -> dict[str, float]:
        """The rates to plan for: per model the larger of its levels (and of the two
        windows' rates, sizing by peak)."""
        out = {}
        for m in snap.planned_rps:
            r = max(snap.rate_rps.get(m, 0.0), snap.rate_long_rps.get(m, 0.0))
            out[m] = max(r, *self._levels(snap, m))
        return out

    def _moved(self, planned: float, short: float, long_: float) -> bool:
        """Both levels left the band around the planned rate (hysteresis)."""
        band = 1.0 + self.change
        lo, hi = planned / band, planned * band
        return (short > hi and long_ > hi) or (short < lo and long_ < lo)

    def _ask(self, snap: Snapshot, rates: dict[str, float], reason: str) -> Replan:
        self._last_s = snap.now_s
        return Replan(rates, reason)

    def judge(self, snap: Snapshot, want: Replan, est: SwitchEstimate) -> Decision:
        # the gain at the rates observed (a re-plan may have asked for more: the alarm)
        rates = {m: r for m, r in self._rates(snap).items() if m in want.rates_rps}
        now_served = served_rps(rates, snap.capacity_rps)
        if snap.attainment is not None and snap.due >= self.min_due:
            # what the current plan really serves: no more than it was seen to
            now_served = min(now_served, snap.attainment * sum(snap.rate_rps.values()))
        gain = self.horizon_s * (served_rps(rates, est.capacity_rps) - now_served)
        saved = (snap.gpus - est.gpus) * self.horizon_s - est.load_gpu_s
        net = gain - est.delayed
        if est.moved == 0 and gain >= 0:
            ok, why = True, "no worker moves"
        elif net >= self.min_gain:
            ok, why = True, f"gain {gain:.0f} > cost {est.delayed:.0f} requests"
        elif gain >= -self.min_gain and saved > est.delayed * self.request_gpu_s:
            ok = True
            why = f"no loss, {saved:.0f} GPU-s saved > {est.delayed:.0f} requests delayed"
        else:
            ok = False
            why = f"gain {gain:.0f} <= cost {est.delayed:.0f} requests + {self.min_gain:g}"
        text = (
            f"{'switch' if ok else 'stay'}: {why} over {self.horizon_s:g} s "
            f"({est.moved} workers move, {est.load_gpu_s:.1f} GPU-s loading, "
            f"~{est.switch_s:.2f} s; GPUs {snap.gpus} -> {est.gpus})"
        )
        return Decision(ok, gain, est.delayed, saved, text)


def parse_replan(text: str, manual: bool = False) -> tuple[str, float | None]:
    """``auto``, ``every=SECONDS`` or ``off`` (and with ``manual``, ``manual``: a server
    that switches only to an operator's plans) -> (mode, period or None)."""
    t = text.strip().lower()
    if t in ("auto", "off") or (manual and t == "manual"):
        return t, None
    key, eq, val = t.partition("=")
    if key == "every" and eq:
        try:
            period = float(val)
        except ValueError:
            period = math.nan
        if 0 < period < math.inf:
            return "every", period
    kinds = (
        "auto, every=SECONDS (> 0), manual or off"
        if manual
        else ("auto, every=SECONDS (> 0) or off")
    )
    raise HetserveError(f"--replan: expected {kinds}, got {text!r}")


@dataclass
class AtTimes:
    """A controller that asks for a re-plan at each of ``times_s`` (one tick at or after
    each) and always switches: an operator's schedule of changes, in the simulator (the
    server's operator switches go through ``ControlLoop.switch_to`` instead). It asks at
    the rates observed (per model the larger of the two windows')."""

    times_s: tuple[float, ...]
    reason: str = "scheduled"
    _next: int = field(default=0, repr=False)

    def observe(self, snap: Snapshot) -> Replan | None:
        if snap.busy or self._next >= len(self.times_s) or snap.now_s < self.times_s[self._next]:
            return None
        self._next += 1
        seen = {m: max(snap.rate_rps.get(m, 0.0), snap.rate_long_rps.get(m, 0.0))
                for m in snap.planned_rps}  # fmt: skip
        return Replan(seen, self.reason)

    def judge(self, snap: Snapshot, want: Replan, est: SwitchEstimate) -> Decision:
        return Decision(True, 0.0, est.delayed, 0.0, f"switch: {self.reason}")
