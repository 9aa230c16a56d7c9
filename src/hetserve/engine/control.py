"""The control loop: re-planning as the load moves, and switching plans live, on the
kernel's clock in either engine (``docs/control.md``).

Every ``tick_s`` the loop reads its :class:`Sensor` (arrivals per model over a short and a
long window, attainment of the requests due in the short window) into a
``control.controller.Snapshot`` and asks the controller. A re-plan it asks for is solved
(``replanner``: rates in, a plan out); the new plan arrives after the solve time (in the
simulator a modelled ``solve_s``, so that a run stays a function of its seed; the measured
time is recorded beside it). The candidate is bound near the current placement
(``core.placement.bind`` with ``prefer``), the reconciler turns the two placements into
steps, and the loop computes what the switch would cost (:meth:`ControlLoop.estimate`);
the controller judges. A switch is then carried out by the ``control.switching.Switching``
scheduler through the kernel (``Kernel.extend``, ``Kernel.apply``); the loop polls for
the old plan's drain and records a :class:`SwitchRecord` per switch.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from hetserve.control.controller import (
    Controller,
    Decision,
    Replan,
    Snapshot,
    SwitchEstimate,
)
from hetserve.control.reconcile import SwitchSteps, block_mask, needs, placement_hint, reconcile
from hetserve.control.switching import EPOCH_SHIFT, MODES, Switching
from hetserve.core.cluster import Cluster
from hetserve.core.errors import HetserveError
from hetserve.core.graph import ModelGraph
from hetserve.core.placement import gpus_needed
from hetserve.core.plan import Placement, Plan, bind
from hetserve.core.requests import Request
from hetserve.engine.kernel import Kernel
from hetserve.engine.residency import Residency
from hetserve.scheduling.protocol import ClusterView

LOG = logging.getLogger("hetserve.control")


@dataclass(frozen=True)
class ControlConfig:
    """How the loop runs (``simulate --replan``; ``docs/control.md`` lists each)."""

    switch: str = "mbb"  # mbb | flush
    max_parallel: int = 4  # workers loading at once
    tick_s: float = 5.0  # how often the controller is asked
    window_s: float = 30.0  # the short window (rates, attainment)
    long_window_s: float = 300.0  # the long window (rates)
    solve_s: float | None = 1.0  # a solve's modelled time; None: as measured
    poll_s: float = 0.01  # how often a switch's drain is checked
    burst_bin_s: float = 1.0  # the bins of the long window whose rates give the bursts
    burst_q: float = 0.95  # the quantile of those rates a snapshot's peak rate is
    until_s: float = math.inf  # no tick after this (the simulator: its last arrival)

    def __post_init__(self) -> None:
        if self.switch not in MODES:
            raise HetserveError(f"--switch: expected mbb or flush, got {self.switch!r}")
        if self.max_parallel < 1:
            raise HetserveError(f"--max-moving: expected >= 1, got {self.max_parallel}")
        for name in ("tick_s", "window_s", "long_window_s", "poll_s"):
            v = getattr(self, name)
            if not 0 < v < math.inf:
                raise HetserveError(f"control {name}: expected a number > 0, got {v}")
        if self.solve_s is not None and not 0 <= self.solve_s < math.inf:
            raise HetserveError(f"control solve_s: expected >= 0, got {self.solve_s}")


class Sensor(Protocol):
    """What the loop observes (the simulator's reads its trace and recorder)."""

    def rates(self, now: float, window_s: float) -> dict[str, float]:
        """Per model, arrivals in ``(now - window_s, now]`` over ``window_s``."""
        ...

    def attainment(self, now: float, window_s: float) -> tuple[float | None, int]:
        """Of the requests due (deadline) in ``(now - window_s, now]``: the share that
        met their SLO (None: none due), and how many were due."""
        ...

    def peak_rates(self, now: float, window_s: float, bin_s: float, q: float) -> dict[str, float]:
        """Per model, the ``q`` quantile of its arrival rate over ``bin_s`` bins of the
        window ``(now - window_s, now]``."""
        ...


@dataclass
class SwitchRecord:
    """One decision of the controller and, where it switched, the switch."""

    version: int  # the plan version it led to (the current one where it stayed)
    asked_s: float  # the tick that asked for a re-plan
    reason: str  # why it asked
    solve_s: float  # the solve time used (modelled or measured)
    measured_solve_s: float  # as measured on this machine
    decided_s: float
    decision: str  # the controller's line
    switched: bool
    steps: str = ""  # the reconciler's summary
    moved: int = 0
    predicted_delayed: float = 0.0
    predicted_switch_s: float = 0.0
    load_gpu_s: float = 0.0
    mode: str = ""
    fallback: str = ""
    late: tuple[str, ...] = ()  # workers whose loads waited for the old plan to drain (mbb)
    cutover_s: float = math.nan
    done_s: float = math.nan
    paused_s: float = 0.0  # how long ingestion stopped (flush)
    waited: int = 0  # requests that waited for a paused switch
    gpus: int = 0  # GPUs of the plan after it

    def to_json(self) -> dict[str, Any]:
        """The record as JSON (``control.json``, ``GET /v2/control``), with the switch's
        measured wall time beside its prediction (``switch_s``, ``predicted_switch_s``)."""
        out = asdict(self)
        out["switch_s"] = self.done_s - self.decided_s if self.switched else math.nan
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in out.items()}


#: rates in, the current plan and placement, a plan out
Replanner = Callable[[dict[str, float], Plan, Placement], Plan]
#: what a solve reports back: ``done(plan or the error it raised, measured seconds, now)``
Solved = Callable[[Any, float, float], None]


class Solver(Protocol):
    """Where the planner runs: the loop hands it each solve."""

    def solve(self, work: Callable[[], Plan], done: Solved) -> None:
        """Run ``work`` (the planner, on the rates asked for) and call ``done(plan,
        measured_s, now)`` on the kernel's clock when the plan is there (``done(error,
        measured_s, now)`` where ``work`` raised). The simulator's (:class:`InlineSolver`)
        runs it at once and reports after the modelled solve time; the server's runs it
        on a thread, off the event loop, and reports when it returns."""
        ...


class InlineSolver:
    """The simulator's :class:`Solver`: ``work`` runs at once; the answer comes
    ``solve_s`` later on the clock (None: the measured time), so that a run stays a
    function of its seed."""

    def __init__(self, clock: Any, solve_s: float | None) -> None:
        self.clock = clock
        self.solve_s = solve_s

    def solve(self, work: Callable[[], Plan], done: Solved) -> None:
        now = self.clock.now()
        t0 = time.perf_counter()
        result: Any
        try:
            result = work()
        except HetserveError as err:
            result = err
        measured = time.perf_counter() - t0
        if isinstance(result, HetserveError):  # (an error is known at once)
            self.clock.call_at(now, done, result, measured)
            return
        self.clock.call_at(now + (measured if self.solve_s is None else self.solve_s), done,
                           result, measured)  # fmt: skip


@dataclass(frozen=True)
class ControlSpec:
    """What a run re-plans with: the controller, the planner (``replanner``), the rates
    the first plan was made for, and the loop's configuration."""

    controller: Controller
    replanner: Replanner
    planned_rps: dict[str, float]
    config: ControlConfig = field(default_factory=ControlConfig)


@dataclass
class ControlLoop:
    """The loop (module docstring). ``grew``: told the kernel's worker count when a plan
    adds workers (the simulator's recorder makes room)."""

    kernel: Kernel
    switching: Switching
    controller: Controller
    replanner: Replanner
    sensor: Sensor
    cluster: Cluster
    graphs: Callable[[str], ModelGraph]
    planned_rps: dict[str, float]
    config: ControlConfig = field(default_factory=ControlConfig)
    grew: Callable[[int], None] | None = None
    records: list[SwitchRecord] = field(default_factory=list)
    solver: Solver | None = None  # None: an InlineSolver of ``config.solve_s``
    listener: Callable[[SwitchRecord], None] | None = None  # told each record as it is made

    def __post_init__(self) -> None:
        self.plan: Plan = self.kernel.plan
        self.placement: Placement = self.kernel.view.placement
        self.version = 0
        self.busy = False
        self._residency = Residency(self.cluster, self.kernel.view.latency, self.graphs)
        self._record: SwitchRecord | None = None
        self._want: Replan | None = None
        self._forced = False  # the solve under way is an operator's (no judgement)
        # (from when, GPUs held per type from then on): the plan's, and during a switch
        # the GPUs of both placements
        self.holding: list[tuple[float, dict[str, int]]] = [(0.0, held_gpus(self.placement))]
        self._solver: Solver = (
            self.solver if self.solver is not None
            else InlineSolver(self.kernel.clock, self.config.solve_s)
        )  # fmt: skip

    # ------------------------------------------------------------------ ticks
    def start(self, now: float) -> None:
        """The first tick, one ``tick_s`` from ``now``."""
        self.kernel.clock.call_at(now + self.config.tick_s, self._tick)

    def snapshot(self, now: float) -> Snapshot:
        """What the sensor reads now, of the models the current plan serves (a model an
        operator unloaded is left out: it comes back only by a load)."""
        cfg = self.config
        served = self.plan.models

        def of_plan(rates: dict[str, float]) -> dict[str, float]:
            return {m: r for m, r in rates.items() if m in served}

        att, due = self.sensor.attainment(now, cfg.window_s)
        return Snapshot(
            now,
            of_plan(self.sensor.rates(now, cfg.window_s)),
            of_plan(self.sensor.rates(now, cfg.long_window_s)),
            att,
            due,
            self.version,
            of_plan(self.planned_rps),
            capacity(self.plan),
            sum(gpus_needed(self.plan, self.cluster.catalog).values()),
            self.busy,
            of_plan(self.sensor.peak_rates(now, cfg.long_window_s, cfg.burst_bin_s, cfg.burst_q)),
        )

    def _tick(self, _: Any, __: Any, now: float) -> None:
        if now > self.config.until_s:
            return
        self.kernel.clock.call_at(now + self.config.tick_s, self._tick)
        snap = self.snapshot(now)
        want = self.controller.observe(snap)
        if want is None:
            return
        self.busy = True
        self._want = want
        self._record = SwitchRecord(
            self.version, now, want.reason, math.nan, math.nan, math.nan, "", False
        )
        plan, placement, rates = self.plan, self.placement, dict(want.rates_rps)
        self._solver.solve(lambda: self.replanner(rates, plan, placement), self._solved)

    def _solved(self, result: Plan | BaseException, measured_s: float, now: float) -> None:
        """The planner's answer (or its error), ``measured_s`` after it was asked."""
        rec = self._record
        assert rec is not None
        rec.measured_solve_s = measured_s
        rec.solve_s = measured_s if self.config.solve_s is None else self.config.solve_s
        rec.decided_s = now
        if isinstance(result, BaseException):
            rec.decision = f"stay: the planner failed: {result}"
            if not isinstance(result, HetserveError):
                LOG.error("the planner raised", exc_info=result)
            self._log(rec)
            self.busy = self._forced = False
            return
        forced, self._forced = self._forced, False
        self._decide(result, now, forced)

    def replan_now(self, rates_rps: dict[str, float], now: float, reason: str) -> None:
        """An operator's re-plan: the planner solves for ``rates_rps`` (its models are
        the models the new plan serves: a model left out is unloaded, one added is
        loaded) and the plan is switched to without the controller's judgement, as in
        :meth:`switch_to`. Raises ``HetserveError`` while a re-plan or switch is under
        way."""
        self._claim()
        self._want = Replan(dict(rates_rps), reason)
        self._record = SwitchRecord(
            self.version, now, reason, math.nan, math.nan, math.nan, "", False
        )
        plan, placement, rates = self.plan, self.placement, dict(rates_rps)
        self._forced = True
        try:
            self._solver.solve(lambda: self.replanner(rates, plan, placement), self._solved)
        except BaseException:
            self.busy = self._forced = False
            raise

    def _claim(self) -> None:
        if self.busy:
            raise HetserveError(
                f"a re-plan or switch is under way (plan version {self.version}): try again "
                f"when it ends"
            )
        self.busy = True

    def switch_to(self, plan: Plan, now: float, reason: str = "operator") -> None:
        """An operator's plan: switched to through the same reconciler and switch as a
        re-plan, without the controller's judgement (a plan that cannot be placed, or
        whose blocks a worker cannot hold, is refused). Raises ``HetserveError`` while a
        re-plan or a switch is under way (the caller answers 409)."""
        self._claim()
        try:  # (the rates it is taken as made for: its models' mix at its capacity)
            rates = plan.rates_at(1.0)
        except HetserveError:
            rates = {m: mp.throughput_rps for m, mp in plan.models.items()}
        self._want = Replan(rates, reason)
        self._record = SwitchRecord(self.version, now, reason, 0.0, 0.0, now, "", False)
        self._decide(plan, now, forced=True)

    def _decide(self, plan: Plan, now: float, forced: bool = False) -> None:
        rec, want = self._record, self._want
        assert rec is not None and want is not None
        try:
            placement = bind(plan, self.cluster, prefer=placement_hint(self.plan, self.placement))
        except HetserveError as err:
            rec.decision = f"stay: the plan cannot be placed: {err}"
            self._log(rec)
            self.busy = False
            return
        steps = reconcile((self.plan, self.placement), (plan, placement), self.config.max_parallel)
        snap = self.snapshot(now)
        rates = want.rates_rps
        if forced:  # (an operator's rates are the plan's: the switch meets today's)
            rates = {m: max(snap.rate_rps.get(m, 0.0), snap.rate_long_rps.get(m, 0.0))
                     for m in plan.models}  # fmt: skip
        est, why_not = self.estimate(steps, plan, placement, rates)
        if why_not:
            decision = Decision(False, 0.0, 0.0, 0.0, f"stay: {why_not}")
        elif forced:
            decision = Decision(True, 0.0, est.delayed, 0.0, "switch: an operator's change")
        else:
            decision = self.controller.judge(snap, want, est)
        rec.decision = decision.text
        rec.steps, rec.moved = steps.describe(), steps.moved
        rec.predicted_delayed, rec.predicted_switch_s = est.delayed, est.switch_s
        rec.load_gpu_s = est.load_gpu_s
        if not decision.switch:
            self._log(rec)
            self.busy = False
            return
        view = ClusterView.build(
            self.cluster, self.kernel.view.latency, placement, self.kernel.view.cut_bytes_factor
        )
        # what a stage call costs beyond compute (Ray's, measured at start-up) carries
        # over; a worker new to the run gets the typical (median) one
        known = self.kernel.view.stage_overhead_s
        if known:
            typical = sorted(known.values())[len(known) // 2]
            view.stage_overhead_s.update({w: known.get(w, typical) for w in view.workers})
        joining = self.kernel.joining(view)
        go = (view, plan, placement, steps, est.gpus)
        if not joining:
            self._begin(go, now)
            return

        def ready(why: str) -> None:  # (at once, or later on the clock: Ray's actors)
            if why:
                rec.decision = f"stay: the new plan's workers could not start: {why}"
                self._log(rec)
                self.busy = False
                return
            self._begin(go, self.kernel.clock.now())

        self.kernel.executor.add_workers(joining, ready)

    def _begin(self, go: tuple[ClusterView, Plan, Placement, SwitchSteps, int], now: float) -> None:
        """The switch begins: the kernel knows the new plan's workers, the switching
        scheduler starts the first wave of loads."""
        view, plan, placement, steps, gpus = go
        rec, want = self._record, self._want
        assert rec is not None and want is not None
        rec.switched = True
        rec.mode = self.config.switch
        rec.version = self.version + 1
        rec.gpus = gpus
        if self.kernel.extend(view, plan) and self.grew is not None:
            self.grew(len(self.kernel.workers))
        self._target = (plan, placement, dict(want.rates_rps))
        self.holding.append((now, held_gpus(self.placement, placement)))
        LOG.info("plan %d -> %d: %s; %s", self.version, self.version + 1, want.reason, rec.decision)
        mode = self.config.switch
        acts = self.switching.begin(view, plan, steps, mode, now, self.busy_until, self.held_now)
        self.kernel.rebind()
        self.kernel.apply(acts, now)
        self._poll(None, None, now)

    def _poll(self, _: Any, __: Any, now: float) -> None:
        sw = self.switching
        tr = sw.switch
        draining = tr is not None and sw.draining is not None and tr.mark_s is not None
        if draining and self._drained(tr.mark_s):  # type: ignore[union-attr,arg-type]
            held = self.kernel.held
            self.kernel.apply(sw.drained(now, lambda r: held.get(r.id) is r), now)
        if sw.state == "serving" and sw.switch is None:
            self._finish(now)
            return
        self.kernel.clock.call_at(now + self.config.poll_s, self._poll)

    def busy_until(self, now: float) -> dict[str, float]:
        """Per worker with work running or queued: when that work is predicted to end
        (the running stage's modelled end, or its start plus the latency model's time;
        then each queued stage's time one after another)."""
        lat = self.kernel.view.latency
        out: dict[str, float] = {}
        for wid, w in self.kernel.workers.items():
            t = now
            task = w.running
            if task is not None:
                run = task.run
                b = task.batch
                took = run[0][-1] if run is not None else lat.latency(
                    b.model, w.gpu, w.info.share, b.rows, range(*task.step.blocks)
                )  # fmt: skip
                t = max(t, task.start_s + took)
            for q in w.queued() + w.waiting:
                if not q.dead:
                    b = q.batch
                    t += lat.latency(b.model, w.gpu, w.info.share, b.rows, range(*q.step.blocks))
            if t > now:
                out[wid] = t
        return out

    def held_now(self) -> list[Request]:
        """The requests the scheduler holds, undispatched and not parked, by id."""
        parked = self.kernel.parked
        return sorted(
            (r for r in self.kernel.held.values() if r.id not in parked), key=lambda r: r.id
        )

    def _drained(self, mark_s: float) -> bool:
        """The epoch that stopped taking requests at ``mark_s`` owns none: no batch of
        it is under way, and no request that arrived before ``mark_s`` is held."""
        old = self.switching.draining
        assert old is not None
        if any(b >> EPOCH_SHIFT == old.no for b in self.kernel.batches):
            return False
        moved = self.switching.moved  # (the new plan's since the cut-over)
        return not any(
            r.arrival_s < mark_s and r.id not in moved for r in self.kernel.held.values()
        )

    def _finish(self, now: float) -> None:
        rec = self._record
        tr = self.switching.last
        assert rec is not None and tr is not None
        ev = dict(tr.events)
        rec.cutover_s = ev.get("cutover", math.nan)
        rec.done_s = ev.get("done", now)
        rec.fallback = tr.fallback
        rec.late = tr.late
        rec.waited = tr.buffered
        if "paused" in ev:
            rec.paused_s = ev.get("cutover", now) - ev["paused"]
        kept = {w.id for w in self._target[1].workers}
        self.kernel.retire([w.id for w in self.placement.workers if w.id not in kept])
        self.kernel.rebind()  # (the switching scheduler's fast path between switches)
        self.plan, self.placement, self.planned_rps = self._target
        self.holding.append((now, held_gpus(self.placement)))
        self.version += 1
        self._log(rec)
        self.busy = False

    def _log(self, rec: SwitchRecord) -> None:
        self.records.append(rec)
        if self.listener is not None:
            self.listener(rec)
        LOG.info(
            "re-plan at %.1f s (%s): %s%s", rec.asked_s, rec.reason, rec.decision,
            f"; switched to plan version {rec.version} in {rec.done_s - rec.decided_s:.3f} s "
            f"(predicted {rec.predicted_switch_s:.3f} s; {rec.steps}; {rec.waited} requests "
            f"waited; {rec.gpus} GPUs"
            + (f"; loaded late on {', '.join(rec.late)}" if rec.late else "") + ")"
            if rec.switched else "",
        )  # fmt: skip

    # ------------------------------------------------------------------ the estimate
    def estimate(
        self, steps: SwitchSteps, plan: Plan, placement: Placement, rates: dict[str, float]
    ) -> tuple[SwitchEstimate, str]:
        """What switching to ``plan`` by ``steps`` would cost, computed (and, second,
        why it cannot be made at all: a worker whose new blocks alone exceed its memory;
        empty where it can):

        - each load takes its blocks' parameter bytes over the worker's host path at the
          path's narrowest link; a wave lasts as long as its longest load, and the waves
          run one after another (``load_s``); ``load_gpu_s`` sums every worker's;
        - the old plan drains within its largest SLO (``drain_s``): a request still
          held then has been dropped at its deadline;
        - ``mbb``: the requests that reach a changing worker while it serves both plans
          (its share of each model's rate, over ``drain_s``) may wait behind the other
          plan's batches: they count as delayed;
        - ``mbb`` where a worker cannot hold both plans' blocks: it loads late (after the
          old plan drains, ``control.switching``): the requests the new plan routes
          through it (its share of each model's rate) over the drain and its load wait,
          beside the above for the other changing workers; the switch lasts that load
          longer;
        - ``flush``: every request that arrives during the pause (drain, then the loads
          that did not fit beside the old blocks) waits;
        - workers the run does not have are started first (``Executor.start_s``: Ray's
          actors), while the current plan serves: the switch takes that much longer.
        """
        res = self._residency
        cat = self.cluster.catalog
        slots = {w.id: w for w in self.placement.workers}
        slots.update({w.id: w for w in placement.workers})
        old_need = needs(self.plan, self.placement)
        new_need = needs(plan, placement)

        def nbytes(need: dict[str, int]) -> float:
            return sum(res.bytes_of(m, mask) for m, mask in need.items())

        def cap_b(wid: str) -> float:
            s = slots[wid]
            return cat.get(s.gpu).memory_gb * 1e9 / s.share

        def load_s(wid: str, b: float) -> float:
            path = tuple(self.cluster.host_path(slots[wid].gpu_id))
            bw = min(self.cluster.links[x].bw_gbps for x in path)
            return b * 8 / (bw * 1e9)

        changes = {c.worker: c for c in steps.changes}
        why_not = ""
        beside_fits = True
        late: set[str] = set()
        per_worker: dict[str, float] = {}
        for wid, c in changes.items():
            if not c.load:
                continue
            add = {m: 0 for m, _ in c.load}
            for m, b in c.load:
                add[m] |= block_mask(b)
            b_new = nbytes(add)
            per_worker[wid] = load_s(wid, b_new)
            if nbytes(new_need.get(wid, {})) > cap_b(wid) * (1 + 1e-9):
                why_not = f"worker {wid} cannot hold the new plan's blocks"
            elif nbytes(old_need.get(wid, {})) + b_new > cap_b(wid) * (1 + 1e-9):
                beside_fits = False
                late.add(wid)
        mbb = self.config.switch == "mbb"
        waves_s = sum(  # (a late load fails at once in its wave: it loads after the drain)
            max((per_worker.get(w, 0.0) for w in wave if not (mbb and w in late)), default=0.0)
            for wave in steps.waves
        )
        load_gpu_s = sum(per_worker.values())
        drain_s = max((m.slo_s for m in self.plan.models.values()), default=0.0)
        total = sum(rates.values())

        def through(p: Plan, pl: Placement, which: Callable[[str], bool]) -> float:
            """Requests/s that plan ``p`` routes through the workers ``which`` picks."""
            out = 0.0
            for (m, pi, _), ws in pl.stages.items():
                mp = p.models[m]
                tp = mp.throughput_rps or 1.0
                part = rates.get(m, 0.0) * (mp.pipelines[pi].throughput_rps or tp) / tp
                out += part * sum(which(w) for w in ws) / len(ws)
            return out

        if mbb:
            changing = through(self.plan, self.placement,
                               lambda w: changes[w].kind == "change" and w not in late)  # fmt: skip
            reload_s = max((per_worker[w] for w in late), default=0.0)
            waiting = through(plan, placement, lambda w: w in late)
            delayed = changing * drain_s + waiting * (drain_s + reload_s)
            switch_s = waves_s + drain_s + reload_s
        else:
            reload_s = 0.0 if beside_fits else max(per_worker.values(), default=0.0)
            delayed = total * (drain_s + reload_s)
            switch_s = waves_s + drain_s + reload_s
        gpus = sum(gpus_needed(plan, cat).values())
        k = self.kernel
        joining = [w.id for w in placement.workers if w.id not in k.workers or w.id in k.retired]
        ready_s = k.executor.start_s(len(joining)) if joining else 0.0
        est = SwitchEstimate(
            capacity(plan), gpus, steps.moved, waves_s, load_gpu_s, delayed,
            switch_s + ready_s, ready_s,
        )  # fmt: skip
        return est, why_not


def held_gpus(*placements: Placement) -> dict[str, int]:
    """Physical GPUs per type that the placements hold together (a GPU in several, once)."""
    seen = {w.gpu_id: w.gpu for p in placements for w in p.workers}
    out: dict[str, int] = {}
    for t in seen.values():
        out[t] = out.get(t, 0) + 1
    return dict(sorted(out.items()))


def gpu_seconds(holding: list[tuple[float, dict[str, int]]], end_s: float) -> dict[str, float]:
    """GPU-seconds per type of a run that held ``holding[k][1]`` from ``holding[k][0]``
    until the next entry (the last until ``end_s``)."""
    out: dict[str, float] = {}
    for k, (t0, gpus) in enumerate(holding):
        t1 = holding[k + 1][0] if k + 1 < len(holding) else end_s
        for t, n in gpus.items():
            out[t] = out.get(t, 0.0) + n * max(0.0, t1 - t0)
    return dict(sorted(out.items()))


def capacity(plan: Plan) -> dict[str, float]:
    """Per model, the plan's planned throughput (its pipelines' together)."""
    return {m: mp.throughput_rps for m, mp in plan.models.items()}
