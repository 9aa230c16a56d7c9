"""The engine kernel (``engine/kernel_core.py``: the kernel, rule 4's check), its entities
and link models (``engine/entities_core.py``), the modelled executor with its residency
and stage start (``engine/modelled_core.py``), the ``coldstart`` scheduler
(``scheduling/coldstart_core.py``), the group schedulers (``flex``, ``flex-np``,
``clockwork``, and ``nexus`` on their classes: ``scheduling/flex_core.py``),
``edf-adaptive`` (``scheduling/edf_adaptive_core.py``), ``fixed-batch``
(``scheduling/fixed_batch_core.py``) and the simulator's recorder
(``sim/recorder_core.py``), with the keyed heaps they share (``core/heaps_core.py``),
compiled by Cython and run as plain Python give the same
results: the same simulations, request by request and stage by stage, in two processes
that differ only in ``HETSERVE_PURE_PYTHON``; and the builds take the C types of their
``.pxd`` files."""

import pytest

from hetserve.core import heaps
from hetserve.core.compiled import python_asked
from hetserve.engine import (
    deadlines,
    deadlines_core,
    entities,
    entities_core,
    kernel,
    kernel_core,
    modelled,
    modelled_core,
)
from hetserve.scheduling import (
    coldstart,
    coldstart_core,
    edf_adaptive,
    edf_adaptive_core,
    fixed_batch,
    fixed_batch_core,
    flex,
    flex_core,
)
from hetserve.sim import recorder_core, result
from tests.helpers import run_python_json

try:
    from hetserve.engine import entities_core_c as compiled_entities
    from hetserve.engine import kernel_core_c as compiled
    from hetserve.engine import modelled_core_c as compiled_modelled
except ImportError:  # (no compiled build: nothing to compare with)
    compiled = compiled_entities = compiled_modelled = None

needs_build = pytest.mark.skipif(
    compiled is None, reason="hetserve was installed without its compiled part (setup.py)"
)
# (a test that the builds are taken: not where HETSERVE_PURE_PYTHON asks for the Python)
needs_build_taken = pytest.mark.skipif(
    compiled is None or python_asked(),
    reason="the compiled part is not built, or HETSERVE_PURE_PYTHON asks for the Python",
)

# Every path of the per-request code that a run can take: whole models under edf-adaptive,
# flex (preemption at block boundaries) and fixed-batch, with jitter, a per-request
# overhead, clients that give up (cancellations) and a lost worker; a two-stage pipeline
# across links (transfers over lanes); DeepPlan's cold starts (loads, stages deferred until
# their weights arrive or run layer by layer, DHA over shared host links).
CODE = """
import hashlib, json
from collections import Counter
from hetserve.core.layerlatency import LayerLatency
from hetserve.core.plan import ModelPlan, Pipeline, Plan, Stage, bind
from hetserve.core.presets import preset
from hetserve.core.requests import Stream
from hetserve.core import heaps
from hetserve.engine import deadlines, kernel, modelled
from hetserve.engine.setup import Setup, build_setup
from hetserve.experiments.setup import build_trace
from hetserve.planning.deepplan import plan_cold_starts
from hetserve.scheduling import coldstart, edf_adaptive, fixed_batch, flex, make_scheduler
from hetserve.sim import result
from hetserve.sim.engine import SimConfig, Simulator
from hetserve.workload import Poisson, generate


def digest(res):
    h = hashlib.sha256()
    for a in (res.outcome, res.reason, res.batch, res.dispatch_s, res.start_s, res.finish_s):
        h.update(a.tobytes())
    h.update(repr((res.stage_rows, res.reasons, sorted(res.worker_busy_s.items()),
                   sorted(res.worker_energy_j.items()), res.events, res.end_s)).encode())
    return {"hash": h.hexdigest(), "status": Counter(r[8] for r in res.stage_rows),
            "reasons": res.reasons}


out = {"kernel": kernel.COMPILED, "ledger": result.LEDGER_COMPILED,
       "modelled": modelled.COMPILED, "coldstart": coldstart.COMPILED, "heaps": heaps.COMPILED,
       "flex_core": flex.COMPILED, "edf_adaptive_core": edf_adaptive.COMPILED,
       "fixed_batch_core": fixed_batch.COMPILED, "deadlines_core": deadlines.COMPILED}
s = build_setup("hc1-s", ["resnet50", "efficientnet-b0"])
for name in ("edf-adaptive", "flex", "fixed-batch", "flex-np", "clockwork", "nexus"):
    tr = build_trace(s, "gamma:cv=3", s.plan.rates_at(1.3), 3.0, seed=3)
    sim = Simulator(s.cluster, s.latency, s.plan, s.placement, make_scheduler(name), tr,
                    SimConfig(seed=5, jitter="exponential", request_overhead_s=0.0002,
                              patience_s=0.05, record_links=True))
    sim.fail_worker(s.placement.workers[1].id, 1.1)
    out[name] = digest(sim.run())
base = build_setup("hc1-s", ["resnet50"])
st = (Stage((0, 5), "P4", 1, 12), Stage((5, 10), "L4", 1, 4))
plan = Plan({"resnet50": ModelPlan(base.slos_s["resnet50"], 1.0,
                                   (Pipeline(st, 4, 0.0, 2000.0),))})
p = Setup(base.cluster, base.latency, ["resnet50"], base.slos_s, plan, bind(plan, base.cluster))
tr = build_trace(p, "poisson", {"resnet50": 1800.0}, 3.0, seed=2)
sim = Simulator(p.cluster, p.latency, p.plan, p.placement, make_scheduler("fixed-batch"), tr,
                SimConfig(seed=1, jitter="lognormal", jitter_cv=0.2, record_links=True))
res = sim.run()
out["two-stage"] = digest(res)
out["two-stage"]["links"] = repr(sorted(res.link_log.items()))
c = preset("p3-8xlarge")
names = [f"bert-base@{i}" for i in range(24)]
tr = generate([Stream(m, m, 0.1, Poisson(40 / 24)) for m in names], 20.0, 1)
for kind in ("pipeswitch", "pt+dha"):
    cp, _ = plan_cold_starts(c, names, None, kind, dict.fromkeys(names, 0.1))
    sched = make_scheduler("coldstart", {})
    sim = Simulator(c, LayerLatency(cp.load_plans), cp, bind(cp, c), sched, tr,
                    SimConfig(warm=False))
    out[kind] = digest(sim.run())
    out[kind]["cold"] = sched.stats["cold_requests"]
print(json.dumps(out))
"""


def _run(pure_python: bool) -> dict:
    return run_python_json(CODE, pure_python)


@needs_build
def test_simulations_are_the_same_compiled_and_in_python():
    a, b = _run(pure_python=False), _run(pure_python=True)
    parts = (
        "kernel", "ledger", "modelled", "coldstart", "heaps", "flex_core", "edf_adaptive_core",
        "fixed_batch_core", "deadlines_core",
    )  # fmt: skip
    for part in parts:
        assert a[part] is True and b[part] is False, part
    # (the paths were taken: preemptions, cancellations, a lost worker's batch, cold starts)
    assert a["flex"]["status"]["preempted"] > 100
    assert "cancelled: the client gave up" in a["fixed-batch"]["reasons"]
    assert a["fixed-batch"]["status"]["failed"] == 1
    assert a["pt+dha"]["cold"] > 0
    assert a == {**b, **dict.fromkeys(parts, True)}


@needs_build_taken
def test_the_builds_take_the_c_types_of_their_pxd():
    """The entities, the link models, the kernel, the residency and the stage start are
    extension types with typed attributes (a ``.pxd``
    left out of a build, as once happened to the reservation core, would leave Python
    classes run by compiled code: instance dicts, boxed floats)."""
    assert entities.COMPILED and kernel.COMPILED and kernel.Kernel is compiled.Kernel
    assert modelled.COMPILED and modelled.ModelledExecutor is compiled_modelled.ModelledExecutor
    assert coldstart.COMPILED and coldstart.ColdStart.__module__.endswith("coldstart_core_c")
    assert flex.COMPILED and flex.Flex.__module__.endswith("flex_core_c")
    assert edf_adaptive.COMPILED
    assert edf_adaptive.EdfAdaptive.__module__.endswith("edf_adaptive_core_c")
    assert fixed_batch.COMPILED and deadlines.COMPILED
    assert fixed_batch.FixedBatch.__module__.endswith("fixed_batch_core_c")
    f, ea = flex.core, edf_adaptive.core
    e = compiled_entities
    for cls, attr in ((e.Slot, "running"), (e.Batch, "rows"), (e.Task, "start_s"),
                      (e.LinkTable, "log"), (e.HostLinks, "busy"), (compiled.Kernel, "held"),
                      (compiled_modelled.ModelledStart, "runs"),
                      (compiled_modelled.Held, "mem_cap"),
                      (compiled_modelled.Residency, "host_links"),
                      (f.ModelQueue, "fastest_1"), (f.GroupWorker, "lat"),
                      (ea._ModelState, "timer_at"), (ea._Group, "unsettled"),
                      (deadlines.Deadlines, "heads")):  # fmt: skip
        # (an extension type's attribute, not a Python class's slot or dict entry)
        assert cls.__dictoffset__ == 0
        assert type(cls.__dict__[attr]).__name__ == "getset_descriptor", cls
    task = e.Task.__new__(e.Task)
    with pytest.raises(TypeError):
        task.start_s = "soon"  # (a C double)
    with pytest.raises(TypeError):
        task.worker = object()  # (a Slot)
    task.start_s = 1
    assert task.start_s == 1.0 and isinstance(task.start_s, float)
    # the recorder's ledger reads the entities as C structs: the compiled one
    assert result.LEDGER_COMPILED and result.Recorder.__mro__[1].__module__.endswith("_c")


def test_beside_python_entities_the_kernel_and_recorder_are_python(monkeypatch):
    """The compiled kernel and ledger read the compiled entities' C layout: beside the
    Python entities (not built, or older than their source) they are the Python files'."""
    monkeypatch.setattr(entities, "COMPILED", False)
    assert kernel._core() == (kernel_core, False)
    assert modelled._core() == (modelled_core, False)
    assert result._ledger() == (recorder_core.Ledger, False)


@needs_build_taken
def test_beside_a_python_deadline_watch_the_kernel_is_python(monkeypatch):
    """The compiled kernel holds its deadline watch typed (the compiled class's C
    methods): beside the Python one (not built, or older than its source) it is the
    Python file, and it takes no other watch."""
    monkeypatch.setattr(deadlines, "COMPILED", False)
    assert kernel._core() == (kernel_core, False)
    monkeypatch.undo()
    k = compiled.Kernel.__new__(compiled.Kernel)
    with pytest.raises(TypeError):
        k.deadlines = deadlines_core.Deadlines()  # (the Python class: not the C one)
    k.deadlines = deadlines.Deadlines()


def test_beside_python_heaps_their_users_are_python(monkeypatch):
    """The compiled entities (and so the kernel, the modelled executor and the ledger) and
    the reservation core call the keyed heaps' compiled functions: beside the Python ones
    (not built, or older than their source) they are the Python files'."""
    from hetserve.scheduling import reservation_core

    monkeypatch.setattr(heaps, "COMPILED", False)
    assert heaps.build_beside(entities_core) == (entities_core, False)
    assert heaps.build_beside(reservation_core) == (reservation_core, False)


def test_one_build_throughout():
    """``engine.kernel``, ``engine.entities``, ``engine.links``, ``engine.modelled`` and
    ``engine.residency`` export the compiled builds' classes or the Python files', all of
    one kind (a Task of one build is not a Task of the other), and the ``coldstart``
    scheduler registered is the build taken."""
    from hetserve.engine import links, residency
    from hetserve.scheduling.protocol import scheduler_factory

    e = entities.core
    assert e is (compiled_entities if entities.COMPILED else entities_core)
    assert kernel.core is (compiled if kernel.COMPILED else kernel_core)
    assert kernel.COMPILED == entities.COMPILED == result.LEDGER_COMPILED
    assert (entities.Batch, entities.Slot, entities.Task) == (e.Batch, e.Slot, e.Task)
    assert links.LinkTable is e.LinkTable and links.HostLinks is e.HostLinks
    m = modelled.core
    assert m is (compiled_modelled if modelled.COMPILED else modelled_core)
    assert modelled.COMPILED == kernel.COMPILED
    assert (residency.Held, residency.Residency) == (m.Held, m.Residency)
    assert modelled.ModelledExecutor is m.ModelledExecutor
    assert scheduler_factory("coldstart") is coldstart.ColdStart is coldstart.core.ColdStart
    assert (coldstart.core is coldstart_core) == (not coldstart.COMPILED)
    for name, cls in (("flex", "Flex"), ("flex-np", "FlexNP"), ("clockwork", "Clockwork")):
        assert scheduler_factory(name) is getattr(flex, cls) is getattr(flex.core, cls)
    assert (flex.core is flex_core) == (not flex.COMPILED)
    assert scheduler_factory("edf-adaptive") is edf_adaptive.EdfAdaptive
    assert edf_adaptive.EdfAdaptive is edf_adaptive.core.EdfAdaptive
    assert (edf_adaptive.core is edf_adaptive_core) == (not edf_adaptive.COMPILED)
    assert scheduler_factory("fixed-batch") is fixed_batch.FixedBatch
    assert fixed_batch.FixedBatch is fixed_batch.core.FixedBatch
    assert (fixed_batch.core is fixed_batch_core) == (not fixed_batch.COMPILED)
    assert (deadlines.core is deadlines_core) == (not deadlines.COMPILED)
    from hetserve.scheduling import nexus

    assert issubclass(nexus.Nexus, flex.GroupScheduler)  # (nexus builds on the build taken)


def test_beside_python_heaps_the_group_and_edf_schedulers_are_python(monkeypatch):
    """The group schedulers' and edf-adaptive's builds cimport the keyed heaps: beside the
    Python heaps they are the Python files."""
    monkeypatch.setattr(heaps, "COMPILED", False)
    assert heaps.build_beside(flex_core) == (flex_core, False)
    assert heaps.build_beside(edf_adaptive_core) == (edf_adaptive_core, False)
    assert heaps.build_beside(deadlines_core) == (deadlines_core, False)
