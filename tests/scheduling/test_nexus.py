"""nexus: provisioning, epochs, fixed schedules."""

import numpy as np
import pytest

from hetserve.core.outcome import OK
from hetserve.core.requests import Request, Stream
from hetserve.experiments.setup import simulate
from hetserve.experiments.shepherd.scenarios import V100, group_setup
from hetserve.scheduling import ClusterView, Drop, SetTimer, make_scheduler
from hetserve.scheduling.nexus import peak_rates
from hetserve.workload.trace import Trace

MODELS = {"resnet18": 0.25, "resnet50": 0.25, "rs200": 0.25}


def _started(n_gpus, **params):
    s = group_setup(n_gpus, MODELS)
    sched = make_scheduler("nexus", params)
    acts = sched.start(ClusterView.build(s.cluster, s.latency, s.placement), s.plan, 0.0)
    return s, sched, acts


def test_squishy_packing_whole_gpus_then_shared_duty_cycles():
    lat = group_setup(1, MODELS).latency
    t50 = 0  # resnet50's goodput per GPU at its batch
    for b in range(128, 0, -1):
        if 2 * lat.latency("resnet50", V100, 1, b) <= 0.25:
            t50 = b / lat.latency("resnet50", V100, 1, b)
            break
    rates = {"resnet50": [2.5 * t50], "resnet18": [50.0], "rs200": [5.0]}
    _s, sched, acts = _started(6, rates=rates, epoch_s=30.0)
    assert acts == [SetTimer(30.0, ("nexus", 1))]
    serves = {w: [m.name for m in ms] for w, ms in sched.serves.items()}
    own = [w for w, ms in serves.items() if ms == ["resnet50"]]
    assert len(own) >= 2  # the integer part of its load, scaled up to fill the cluster
    # the light models share a GPU, each with the batch its rate fills in a duty cycle
    shared = [ms for ms in serves.values() if len(ms) > 1]
    assert shared and all(ms for ms in serves.values())
    for w, ms in serves.items():
        for m in ms:
            cap = sched.cap[(w, m)]
            assert 1 <= cap <= sched.batch[m]
            if len(ms) > 1:
                assert cap < sched.batch[m]  # a shared GPU runs smaller batches


def test_models_without_a_worker_are_dropped_not_queued():
    _s, sched, _ = _started(1, rates={"resnet18": [100.0], "resnet50": [0.0], "rs200": [0.0]})
    assert [m.name for m in next(iter(sched.serves.values()))] == ["resnet18"]
    out = sched.on_arrival(Request(0, "resnet50", "s", 0.0, 0.25), 0.0)
    assert out == [Drop((Request(0, "resnet50", "s", 0.0, 0.25),), "not_provisioned")]


def test_epochs_follow_the_rates_and_peak_rates_are_per_window():
    times = np.concatenate([np.linspace(0, 9.99, 300), np.linspace(10, 19.99, 3000)])
    tr = Trace(times, np.zeros(len(times), np.int32), (Stream("a", "resnet18", 0.25),), 20.0)
    pr = peak_rates(tr, epoch_s=10.0)
    assert pr["resnet18"] == [pytest.approx(30, abs=2), pytest.approx(300, abs=2)]
    s = group_setup(2, {"resnet18": 0.25})
    res = simulate(s, "nexus", tr, {"rates": pr, "epoch_s": 10.0})
    assert (res.outcome == OK).mean() > 0.99


def test_without_rates_it_provisions_from_the_last_epoch():
    _s, sched, _ = _started(3, epoch_s=1.0)
    # the first epoch splits the GPUs by weight: everyone is served somewhere
    assert {m.name for ms in sched.serves.values() for m in ms} == set(MODELS)
    for i in range(200):
        sched.on_arrival(Request(i, "resnet18", "s", i / 200, i / 200 + 0.25), i / 200)
    sched.on_timer(("nexus", 1), 1.0)
    # only resnet18 arrived in epoch 0: it gets every GPU now
    assert all([m.name for m in ms] == ["resnet18"] for ms in sched.serves.values())
