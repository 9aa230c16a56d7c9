"""The emulated executor (``--emulate``): a stage takes the latency model's time for its
blocks at the batch's size, as in Shepherd's and Clockwork's emulated workers, so one
machine can stand in for a large cluster. One timer per stage; a ``Preempt`` schedules the
stop at the stage's next block boundary (the simulator's rule).

With a latency model that follows load plans (``core.layerlatency``), a ``Load`` follows
the cold-start timeline as the simulator does (the same host-link sharing,
``sim.loader.HostLinks``), and a batch that starts while its model loads takes what the
timeline says for it; other latency models load at once. A run with DHA layers shares its
GPU's host links with loads and other DHA runs, as in the simulator."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hetserve.core.latency import cold_start_model

if TYPE_CHECKING:
    from hetserve.runtime.engine import RuntimeEngine, _Task
    from hetserve.scheduling.protocol import Load


def block_times(
    engine: RuntimeEngine, model: str, step: Any, batch: int, cache: dict[Any, list[float]]
) -> list[float]:
    """The latency model's time at each block boundary of a stage (cumulative, s)."""
    key = (model, step.worker, batch, step.blocks)
    cum = cache.get(key)
    if cum is None:
        w = engine.view.workers[step.worker]
        lat = engine.view.latency
        cum, acc = [], 0.0
        for k in range(*step.blocks):
            acc += lat.latency(model, w.gpu, w.share, batch, range(k, k + 1))
            cum.append(acc)
        cache[key] = cum
    return cum


class EmulatedExecutor:
    """A stage takes the latency model's time for its blocks at the batch's size."""

    def __init__(self) -> None:
        # (model, worker, batch, blocks) -> cumulative time at each block boundary
        self._cum: dict[tuple[str, str, int, tuple[int, int]], list[float]] = {}
        # (worker, model) -> (load start, timeline, host links held): planned loads under way
        self._cold: dict[tuple[str, str], tuple[float, Any, tuple[str, ...]]] = {}
        self._links: Any = None

    def load(self, engine: RuntimeEngine, a: Load, now: float) -> None:
        lat = cold_start_model(engine.view.latency)
        if lat is None:
            engine.clock.call_at(now, lambda: engine.load_finished(a, now))
            return
        from hetserve.engine.links import HostLinks

        if self._links is None:
            self._links = HostLinks(engine.view.cluster)
        w = engine.view.workers[a.worker]
        lp = lat.model_load_plan(a.model)
        scale, held = self._links.take(w.gpu_id, lp.plan.n_parts, a.model, now)
        tl = lat.load_timeline(a.model, w.gpu, scale)
        self._cold[(a.worker, a.model)] = (now, tl, held)

        def done() -> None:
            self._cold.pop((a.worker, a.model), None)
            self._links.release(held)
            engine.load_finished(a, now)

        engine.clock.call_at(now + tl.load_done_s, done)

    def start(self, engine: RuntimeEngine, task: _Task, now: float) -> None:
        d = task.batch.d
        step = d.route[task.index]
        cold = self._cold.get((step.worker, d.model))
        if cold is not None:  # a planned cold start under way: layer by layer
            w = engine.view.workers[step.worker]
            cm = cold_start_model(engine.view.latency)
            assert cm is not None  # a planned load is under way
            dur = cm.cold_run_s(d.model, w.gpu, w.share, len(d.requests), cold[1], now - cold[0])
            dur = self._dha_contention(engine, w, d.model, len(d.requests), dur, now, cold[2])
            task.emu = [dur]

            def finish_cold() -> None:
                if not task.dead and not task.stop_blocks:
                    engine.stage_finished(task, 1, None)

            engine.clock.call_at(now + dur, finish_cold)
            return
        cum = block_times(engine, d.model, step, len(d.requests), self._cum)

        if cold_start_model(engine.view.latency) is not None:
            w = engine.view.workers[step.worker]
            end = self._dha_contention(engine, w, d.model, len(d.requests), cum[-1], now, ())
            if end != cum[-1]:
                cum = [c * end / cum[-1] for c in cum]
        task.emu = cum

        def finish() -> None:
            if not task.dead and not task.stop_blocks:
                engine.stage_finished(task, len(cum), None)

        engine.clock.call_at(now + cum[-1], finish)

    def _dha_contention(
        self,
        engine: RuntimeEngine,
        w: Any,
        model: str,
        batch: int,
        dur: float,
        now: float,
        own: tuple[str, ...],
    ) -> float:
        """A run with DHA layers shares its host path, as in the simulator
        (``sim.loader``): its duration, and the path held until it ends."""
        lat = cold_start_model(engine.view.latency)
        assert lat is not None
        dha = lat.dha_s(model, w.gpu, w.share, batch)
        if dha <= 0:
            return dur
        from hetserve.engine.links import HostLinks

        if self._links is None:
            self._links = HostLinks(engine.view.cluster)
        f = self._links.dha_run(w.gpu_id, now, dha, own)
        return dur + (f - 1) * dha if f > 1 else dur

    def stop(self, engine: RuntimeEngine, task: _Task) -> None:
        """A preemption: the stage stops at its next block boundary, as in the simulator
        (a boundary at this very moment counts; the model's last block is no exit point,
        the end of a non-last stage is). One timer per stage, none per block."""
        cum = task.emu
        if cum is None or task.stop_blocks:
            return  # not started here, or already stopping (the earlier boundary wins)
        elapsed = engine.clock.now() - task.start_s
        k = 0
        while k < len(cum) - 1 and cum[k] < elapsed - 1e-12:
            k += 1
        if k == len(cum) - 1 and task.index == len(task.batch.d.route) - 1:
            return  # the next exit point is the end: the batch simply completes
        task.stop_blocks = k + 1

        def stop_here() -> None:
            if not task.dead and engine.running.get(task.worker) is task:
                engine.stage_finished(task, k + 1, None, preempted=True)

        engine.clock.call_at(task.start_s + cum[k], stop_here)
