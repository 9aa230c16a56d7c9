"""The kernel holds its observer as an ``ObserverCore`` (issue 41: the compiled kernel
calls the simulator's ledger as C methods): the ledger is one, any other observer goes
behind an ``ObserverCall``, and a Python override of a method, in a subclass or set on
an instance after the kernel was made, is still the one called, in both builds."""

from hetserve.engine import entities
from hetserve.engine.executor import Observer
from hetserve.engine.setup import build_setup
from hetserve.experiments.setup import build_trace
from hetserve.scheduling import make_scheduler
from hetserve.sim.engine import SimConfig, Simulator
from hetserve.sim.result import Recorder


def _sim(recorder_cls=Recorder):
    setup = build_setup("hc1-s", ["resnet50", "efficientnet-b0"], max_batch=8)
    trace = build_trace(setup, "poisson", setup.plan.rates_at(0.6), 0.5, seed=7)
    sched = make_scheduler("fixed-batch", {"max_batch": 8})
    sim = Simulator(setup.cluster, setup.latency, setup.plan, setup.placement, sched, trace,
                    SimConfig())  # fmt: skip
    if recorder_cls is not Recorder:  # (the same recorder, of a subclass)
        sim.recorder.__class__ = recorder_cls
    return sim, trace


class _Counted(Recorder):
    dispatches = 0

    def dispatched(self, batch, first_block, now):
        self.dispatches += 1
        super().dispatched(batch, first_block, now)


class _Plain(Observer):
    def __init__(self):
        self.calls = {"dispatched": 0, "stage_ended": 0, "ended": 0}

    def dispatched(self, batch, first_block, now):
        self.calls["dispatched"] += 1

    def stage_ended(self, task, now, status, blocks_done):
        self.calls["stage_ended"] += 1

    def ended(self, requests, outcomes, reason, now, outputs):
        self.calls["ended"] += len(requests)


def test_the_recorder_is_held_as_itself_and_others_behind_a_call():
    sim, trace = _sim()
    assert isinstance(sim.recorder, entities.ObserverCore)
    assert sim.kernel._obs is sim.recorder and sim.kernel.observer is sim.recorder
    plain = _Plain()
    sim.kernel.observer = plain
    assert sim.kernel.observer is plain
    assert isinstance(sim.kernel._obs, entities.ObserverCall) and sim.kernel._obs.observer is plain
    sim.run()
    assert plain.calls["ended"] == len(trace)  # every request ended through the call
    assert plain.calls["dispatched"] > 0 and plain.calls["stage_ended"] >= plain.calls["dispatched"]


def test_an_override_in_a_subclass_is_called():
    sim, _ = _sim(_Counted)
    res = sim.run()
    batches = {b for b in res.batch.tolist() if b >= 0}
    assert sim.recorder.dispatches == len(batches) > 0


def test_a_method_set_on_the_instance_after_the_kernel_was_made_is_called():
    sim, trace = _sim()
    seen = []
    inner = sim.recorder.ended

    def ended(requests, outcomes, reason, now, outputs):
        seen.extend(r.id for r in requests)
        inner(requests, outcomes, reason, now, outputs)

    sim.recorder.ended = ended
    res = sim.run()
    assert sorted(seen) == list(range(len(trace)))
    assert (res.outcome > 0).all()  # and the ledger still recorded every ending (none pending)
