"""The control loop on a server, and an operator's changes (``serve --replan``;
``docs/control.md``): the loop started on the engine's kernel with the live traffic as its
sensor and its planner on a thread (``runtime.control``); an operator's plan, Triton's
repository load and unload, each a live switch that the caller awaits; the server follows
each switch's new plan (``Server.follow``)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import Any, Protocol

from hetserve.control.switching import Switching
from hetserve.core.errors import HetserveError
from hetserve.core.plan import Placement, Plan
from hetserve.engine.control import ControlLoop, ControlSpec, SwitchRecord
from hetserve.engine.setup import Setup
from hetserve.runtime.control import LiveSensor, ThreadSolver
from hetserve.runtime.metrics import Metrics
from hetserve.runtime.serverconfig import ServerConfig

#: why an unloaded model is UNAVAILABLE
UNLOADED = "unloaded (POST /v2/repository/models/M/unload)"


class Served(Protocol):
    """What the operator reads and tells of its server (``runtime.server.Server``)."""

    setup: Setup
    cfg: ServerConfig
    metrics: Metrics
    engine: Any  # the runtime engine (None until started)
    sensor: LiveSensor | None

    @property
    def models(self) -> list[str]:
        """The models served now (those unloaded left out)."""
        ...

    def follow(self, plan: Plan, placement: Placement) -> None:
        """A switch has ended: the server's view of the plan becomes ``plan``'s."""
        ...


class Busy(HetserveError):
    """A re-plan or switch is under way: an operator's change must wait (HTTP 409)."""


class Operator:
    """A server's control loop and the operator's changes (module docstring)."""

    def __init__(self, server: Served, spec: ControlSpec | None) -> None:
        self.server = server
        self.spec = spec
        self.loop: ControlLoop | None = None
        self.sensor: LiveSensor | None = None
        self.solver: ThreadSolver | None = None
        # models an operator unloaded (or is unloading, or loading back): why, per model
        self.unloaded: dict[str, str] = {}
        self._settle: dict[int, Callable[[SwitchRecord], None]] = {}  # by record index

    def start(self, sched: Switching) -> None:
        """The control loop on the engine's kernel: its planner on a thread of its own,
        the live traffic as its sensor (``runtime.control``)."""
        srv = self.server
        spec, eng = self.spec, srv.engine
        assert spec is not None and eng is not None
        cfg = spec.config
        self.sensor = srv.sensor = LiveSensor(
            srv.models, max(cfg.long_window_s, cfg.window_s), cfg.burst_bin_s
        )
        clock = eng.clock
        self.solver = ThreadSolver(clock.call_soon, clock.now)
        st = srv.setup
        self.loop = ControlLoop(
            eng.kernel, sched, spec.controller, spec.replanner, self.sensor, st.cluster,
            st.model_catalog.graph, dict(spec.planned_rps),
            dataclasses.replace(cfg, solve_s=None), solver=self.solver,
            listener=self._switched,
        )  # fmt: skip
        srv.metrics.plan_version.set(0)
        self.loop.start(clock.now())

    def _switched(self, rec: SwitchRecord) -> None:
        """A decision of the control loop, and where it switched, the switch's end: the
        metrics, and the server follows the new plan (``Server.follow``)."""
        srv = self.server
        m = srv.metrics
        m.of(m.replans, "switch" if rec.switched else "stay").inc()
        ctl = self.loop
        assert ctl is not None
        settle = self._settle.pop(len(ctl.records) - 1, None)
        if rec.switched:
            m.of(m.switches, rec.mode).inc()
            m.switch_seconds.observe(max(0.0, rec.done_s - rec.decided_s))
            m.switch_waited.inc(rec.waited)
            m.plan_version.set(ctl.version)
            srv.follow(ctl.plan, ctl.placement)
        if settle is not None:
            settle(rec)

    def _operator_loop(self) -> ControlLoop:
        ctl = self.loop
        if ctl is None or self.server.engine is None:
            raise HetserveError(
                "this server does not switch plans: start it with --replan (manual, auto "
                "or every=SECONDS)"
            )
        if ctl.busy:
            raise Busy(
                f"a re-plan or switch is under way (plan version {ctl.version}): try again "
                f"when it ends"
            )
        return ctl

    async def _switched_by(self, ctl: ControlLoop, n: int, timeout_s: float) -> SwitchRecord:
        """The record of the decision after the first ``n``, once the loop is idle
        again (a switch has ended, or the plan stayed)."""
        t_end = time.monotonic() + timeout_s
        while ctl.busy or len(ctl.records) <= n:
            if time.monotonic() > t_end:
                raise HetserveError(
                    f"the switch is still under way after {timeout_s:g} s (GET /v2/control "
                    f"follows it)"
                )
            await asyncio.sleep(0.02)
        return ctl.records[n]

    def _rates_for(self, models: list[str]) -> dict[str, float]:
        """Rates for an operator's re-plan of ``models``: the rates the current plan was
        made for; a model loaded back, the rate it was first planned for (else the mean
        of the others)."""
        ctl, spec = self.loop, self.spec
        assert ctl is not None and spec is not None
        known = {**spec.planned_rps, **ctl.planned_rps}
        fill = sum(known.values()) / len(known) if known else 1.0
        return {m: known.get(m, fill) for m in models}

    def _operate(
        self, rates: dict[str, float], reason: str, settle: Callable[[SwitchRecord], None]
    ) -> tuple[ControlLoop, int]:
        """Start an operator's re-plan for ``rates``; ``settle(record)`` runs when it has
        ended (switched or not), whether or not anyone still awaits it. Returns the loop
        and the index its record will have."""
        ctl = self._operator_loop()
        n = len(ctl.records)
        self._settle[n] = settle
        try:
            ctl.replan_now(rates, self.server.engine.clock.now(), reason)  # type: ignore[union-attr]
        except BaseException:
            del self._settle[n]
            raise
        return ctl, n

    async def load_model(self, model: str, timeout_s: float = 300.0) -> SwitchRecord:
        """Triton's ``POST /v2/repository/models/{m}/load``: a model unloaded before comes
        back (re-planned with the models served, at the rates they were planned for); a
        served one is re-planned with the others (a reload: it keeps serving on the
        current plan until the new one has loaded, make-before-break). Returns when the
        switch has ended; ``HetserveError`` where it could not (the reason)."""
        if model not in self.server.setup.models:
            raise HetserveError(
                f"failed to load {model!r}: this server was started with "
                f"{', '.join(self.server.setup.models)} only"
            )
        back = model in self.unloaded

        def settle(rec: SwitchRecord) -> None:
            if rec.switched:
                self.unloaded.pop(model, None)
            elif back:
                self.unloaded[model] = UNLOADED

        ctl, n = self._operate(
            self._rates_for([*self.server.models, model]), f"operator: load {model}", settle
        )
        if back:
            self.unloaded[model] = "loading (POST .../load)"
        rec = await self._switched_by(ctl, n, timeout_s)
        if not rec.switched:
            raise HetserveError(f"failed to load {model!r}: {rec.decision}")
        return rec

    async def unload_model(self, model: str, timeout_s: float = 300.0) -> SwitchRecord | None:
        """Triton's ``POST /v2/repository/models/{m}/unload``: the model is refused from
        now on (404, UNAVAILABLE), its requests in flight end on the current plan, and
        the others are re-planned without it (its GPUs go to them). Returns when the
        switch has ended (None: the model was unloaded already); ``HetserveError`` where
        it could not (the model is served again)."""
        if model not in self.server.setup.models:
            raise HetserveError(
                f"failed to unload {model!r}: this server was started with "
                f"{', '.join(self.server.setup.models)} only"
            )
        if model in self.unloaded:
            return None
        others = [m for m in self.server.models if m != model]
        if not others:
            raise HetserveError(
                f"failed to unload {model!r}: it is the last model served (a plan serves "
                f"at least one)"
            )

        def settle(rec: SwitchRecord) -> None:
            if rec.switched:
                self.unloaded[model] = UNLOADED
            else:
                self.unloaded.pop(model, None)

        ctl, n = self._operate(self._rates_for(others), f"operator: unload {model}", settle)
        self.unloaded[model] = "unloading (POST .../unload)"
        rec = await self._switched_by(ctl, n, timeout_s)
        if not rec.switched:
            raise HetserveError(f"failed to unload {model!r}: {rec.decision}")
        return rec

    async def apply_plan(self, plan: Plan, timeout_s: float = 300.0) -> SwitchRecord:
        """An operator's plan (``POST /v2/control/plan``): switched to through the
        control loop's reconciler (``ControlLoop.switch_to``); returns when the switch
        has ended. ``HetserveError``: no control loop (``--replan``), a plan of other
        models, or one that cannot be placed; :class:`Busy` while a re-plan or switch
        is under way."""
        ctl = self._operator_loop()
        served = self.server.models
        if sorted(plan.models) != sorted(served):
            raise HetserveError(
                f"the plan serves {', '.join(sorted(plan.models)) or 'no model'}; this server "
                f"serves {', '.join(sorted(served))}"
            )
        n = len(ctl.records)
        ctl.switch_to(plan, self.server.engine.clock.now(), "operator: a plan")  # type: ignore[union-attr]
        rec = await self._switched_by(ctl, n, timeout_s)
        if not rec.switched:
            raise HetserveError(f"the plan was not switched to: {rec.decision}")
        return rec

    def state(self) -> dict[str, Any]:
        """The control loop's state: plan version, whether a re-plan or switch is under
        way, and every decision so far (``SwitchRecord``; what ``GET /v2/control``
        answers)."""
        ctl = self.loop
        if ctl is None:
            return {"replan": "off", "version": 0, "busy": False, "records": []}
        spec = self.spec
        assert spec is not None
        return {
            "replan": self.server.cfg.replan,
            "switch": spec.config.switch,
            "version": ctl.version,
            "busy": ctl.busy,
            "records": [r.to_json() for r in ctl.records],
        }

    def switching(self) -> bool:
        """A switch is under way (from its first load until the old plan has drained)."""
        return self.loop is not None and self.loop.switching.switch is not None

    def close(self) -> None:
        """The server stops: no new solve (one under way is left to end by itself)."""
        if self.solver is not None:
            self.solver.close()
