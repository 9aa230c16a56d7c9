"""edf-adaptive, fixed-batch and the group schedulers (flex, flex-np, clockwork) skip
the tries that cannot change anything where workers serve many models (issue 41: the
simulator's speed at 1,000 GPUs and 100 models); edf-adaptive does not even look at the
models that wait for a timer unless their wait may have ended (``_Group``'s index), and
an arrival in a group scheduler looks only at idle workers when it cannot preempt, and a
freed worker only at the models with requests waiting (the waiting sets). Skipping
must be exact: every run gives the same outcomes, batches and times as the same scheduler
trying every model (every worker), as it did before."""

from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.engine.setup import build_setup
from hetserve.experiments.setup import build_trace
from hetserve.scheduling.edf_adaptive import EdfAdaptive
from hetserve.scheduling.fixed_batch import FixedBatch
from hetserve.scheduling.flex import Clockwork, Flex, FlexNP
from hetserve.sim.engine import SimConfig, Simulator

MODELS = ["resnet18", "resnet50", "efficientnet-b0", "vgg16", "bert-base", "vit-b16"]


class _CountedEdf(EdfAdaptive):
    tries = 0

    def _try(self, st, now, out):  # type: ignore[override]
        self.tries += 1
        return super()._try(st, now, out)


class _IndexedEdf(_CountedEdf):
    index_from = 1  # the index of waiting models, kept however few models share workers


class _EveryEdf(_CountedEdf):
    spare = False  # no index of the waiting models: every one is looked at,
    _still_waits = staticmethod(lambda st, now: False)  # and tried, as before


class _CountedFixed(FixedBatch):
    spared = 0

    def _needs_try(self, model, now):
        out = FixedBatch._needs_try(self, model, now)
        self.spared += bool(self.queues[model]) and not out
        return out


class _EveryFixed(FixedBatch):
    spare = False

    def _needs_try(self, model, now):
        return bool(self.queues[model])  # every model with requests waiting, as before


class _EveryModel:
    """A freed worker looks at every model it serves (no waiting sets), as before."""

    def start(self, view, plan, now):
        out = super().start(view, plan, now)  # type: ignore[misc]
        for w in self.workers.values():  # type: ignore[attr-defined]
            w.waiting = None
        return out


class _PlainFlex(_EveryModel, Flex):
    spare = False  # every worker of the model looked at on each arrival (Algorithm 1)


class _PlainFlexNP(_EveryModel, FlexNP):
    spare = False


class _PlainClockwork(_EveryModel, Clockwork):
    spare = False


class _LazyFlex(Flex):
    waiting_from = 1  # a waiting set however few models a worker serves


class _LazyFlexNP(FlexNP):
    waiting_from = 1


class _LazyClockwork(Clockwork):
    waiting_from = 1


def _waiting_holds(sched):
    """A group scheduler's waiting sets: every model with requests queued
    is in the set of each worker that serves it, in order (one that is not is empty)."""
    for w in sched.workers.values():
        order = w.waiting.order
        assert order == sorted(set(order))  # in the worker's order, once each
        assert [i for i, h in enumerate(w.waiting.has) if h] == order
        for i, q in enumerate(w.models):
            assert not q.queue or w.waiting.has[i], (w.id, q.name)


def _run(setup, sched, trace, cfg, lose):
    sim = Simulator(setup.cluster, setup.latency, setup.plan, setup.placement, sched, trace, cfg)
    if lose is not None:
        sim.fail_worker(setup.placement.workers[lose[0]].id, lose[1])
    res = sim.run()
    times = [[None if t != t else t for t in a.tolist()] for a in (res.start_s, res.finish_s)]
    return res.outcome.tolist(), res.batch.tolist(), times, [list(r) for r in res.stage_rows]


@settings(max_examples=40, deadline=None)
@given(
    n_models=st.integers(2, 6),
    load=st.floats(0.2, 1.3),
    seed=st.integers(0, 10_000),
    lose=st.none() | st.tuples(st.integers(0, 15), st.floats(0.05, 0.9)),
    jitter=st.booleans(),
)
def test_sparing_tries_changes_nothing(n_models, load, seed, lose, jitter):
    setup = build_setup("hc1-s", MODELS[:n_models], max_batch=8)  # 4 L4 + 12 P4, shared
    trace = build_trace(setup, "gamma:cv=2", setup.plan.rates_at(load), 1.0, seed=seed)
    cfg = SimConfig(seed=seed, jitter="lognormal" if jitter else "none", jitter_cv=0.2)
    fixed = {"max_batch": 8, "max_queue_delay_s": 0.004}
    every = _run(setup, _EveryEdf(max_batch=8), trace, cfg, lose)
    for edf in (_CountedEdf(max_batch=8), _IndexedEdf(max_batch=8)):
        assert _run(setup, edf, trace, cfg, lose) == every
    every = _run(setup, _EveryFixed(**fixed), trace, cfg, lose)
    assert _run(setup, _CountedFixed(**fixed), trace, cfg, lose) == every
    for plain, spared, lazy in ((_PlainFlex, Flex, _LazyFlex), (_PlainFlexNP, FlexNP, _LazyFlexNP),
                                (_PlainClockwork, Clockwork, _LazyClockwork)):  # fmt: skip
        every = _run(setup, plain(max_batch=8), trace, cfg, lose)
        for cls in (spared, lazy):
            sched = cls(max_batch=8)
            assert _run(setup, sched, trace, cfg, lose) == every
            _waiting_holds(sched)


def test_tries_are_spared_where_workers_serve_many_models():
    """Not vacuous: on a shared plan both schedulers do skip tries."""
    setup = build_setup("hc1-s", MODELS, max_batch=8)
    assert len(setup.plan.models) == 6
    trace = build_trace(setup, "poisson", setup.plan.rates_at(0.5), 1.0, seed=1)
    edf, indexed, every = (_CountedEdf(max_batch=8), _IndexedEdf(max_batch=8),
                           _EveryEdf(max_batch=8))  # fmt: skip
    fixed = _CountedFixed(max_batch=8)
    for sched in (edf, indexed, every, fixed):
        _run(setup, sched, trace, SimConfig(), None)
    assert every.tries > edf.tries + 100 and fixed.spared > 100
    assert indexed.tries == edf.tries  # (the same tries; the index only finds them sooner)


def test_a_freed_worker_looks_only_at_the_models_with_requests_waiting():
    """The waiting sets are shared by the workers that serve the same models; models found
    empty leave them, and every model that waits is in them, mid-run."""
    setup = build_setup("hc1-s", MODELS, max_batch=8)
    trace = build_trace(setup, "gamma:cv=2", setup.plan.rates_at(1.2), 1.0, seed=3)
    for cls in (_LazyFlex, _LazyFlexNP, _LazyClockwork):
        sched = cls(max_batch=8)
        sim = Simulator(setup.cluster, setup.latency, setup.plan, setup.placement, sched,
                        trace, SimConfig())  # fmt: skip
        seen = []  # (queued models, bits) at each stage's end, mid-run
        done = sched.on_stage_done

        def on_stage_done(report, now, sched=sched, done=done, seen=seen):
            out = done(report, now)
            _waiting_holds(sched)
            w = sched.workers[report.worker]
            seen.append((sum(1 for st in w.models if st.queue), len(w.waiting.order)))
            return out

        sched.on_stage_done = on_stage_done
        sim.run()
        assert all(w.waiting.lazy for w in sched.workers.values())
        sets = {id(w.waiting) for w in sched.workers.values()}
        assert len(sets) < len(sched.workers)  # shared
        assert any(b < len(MODELS) for _, b in seen)  # models skipped
        assert any(q > 0 for q, _ in seen)  # with requests waiting
