"""The CUDA cold-start loader's ordering, checked on the CPU with the recording backend
(``runtime.streams.RecordingOps``), and for real behind ``skipif(no CUDA)``.

First the recorder itself: each defect of the loader's first version, written as the
operations it made, is a hazard (so the checks below can fail). Then the loader, the same
code as on a GPU, for every plan kind: no hazard (the order), outputs equal to the warm
model's bit for bit (every weight landed where the model reads it: the recorder moves data
at once, so this says nothing of the order), copies on the streams the design names; an
eviction while the evicted model's kernels are still queued; ``cuda`` alone meaning the
current device; the baseline starting only when every row is in; PT over the GPUs the
planner counted."""

import threading

import pytest

torch = pytest.importorskip("torch")

from hetserve.core.errors import HetserveError  # noqa: E402
from hetserve.core.presets import preset  # noqa: E402
from hetserve.runtime.coldload import ColdModel, CudaBackend, ThreadBackend  # noqa: E402
from hetserve.runtime.streams import RecordingOps  # noqa: E402

P3 = preset("p3-8xlarge")
KINDS = ["baseline", "pipeswitch", "dha", "pt", "pt+dha"]


# ---------------------------------------------------------------- the recorder itself
def _weights(ops, dev=0):
    w = ops.empty(torch.ones(4), dev)
    return w


def test_recorder_sees_a_load_overwriting_blocks_an_evicted_models_kernels_read():
    for fixed in (False, True):
        ops = RecordingOps()
        exec_ = ops.current(0)
        load = ops.stream(0)
        old = _weights(ops)
        ops.copy(old, torch.ones(4))  # (on the execution stream: ordered)
        ops.kernels([old], "evicted model")  # queued, not finished
        ops.drop(old)  # evicted: the block goes back to the execution stream at once
        new = _weights(ops)  # the new model's weights get the same block
        if fixed:
            ops.wait_stream(load, exec_)
        with ops.use(load):
            ops.copy(new, torch.full((4,), 2.0))
        assert bool(ops.hazards) is not fixed, ops.hazards


def test_recorder_sees_a_staging_buffer_freed_while_another_stream_reads_it():
    for fixed in (False, True):
        ops = RecordingOps(n_devices=2)
        copy, migrate = ops.stream(1), ops.stream(1)
        dst = _weights(ops, 0)
        with ops.use(copy):
            tmp = ops.empty(torch.ones(4), 1)
            ops.copy(tmp, torch.ones(4))
            arrived = ops.event()
            ops.record(arrived, copy)
        ops.wait_event(migrate, arrived)
        with ops.use(migrate):
            ops.copy(dst, tmp)
        if fixed:
            ops.record_stream(tmp, migrate)
        ops.drop(tmp)
        with ops.use(copy):  # the next row's staging buffer: the same block
            again = ops.empty(torch.ones(4), 1)
            ops.copy(again, torch.ones(4))
        assert bool(ops.hazards) is not fixed, ops.hazards


def test_recorder_runs_a_cross_device_copy_on_the_source_devices_current_stream():
    """The first loader made a stream of the *primary* current and copied from the
    secondary there: PyTorch runs such a copy on the secondary's current stream, its
    default one, behind whatever that GPU is running for its own models."""
    ops = RecordingOps(n_devices=2)
    copy, named = ops.stream(1), ops.stream(0)
    dst = _weights(ops, 0)
    with ops.use(copy):
        tmp = ops.empty(torch.ones(4), 1)
        ops.copy(tmp, torch.ones(4))
    with ops.use(named):
        ops.copy(dst, tmp)
    assert ops.log[-1][:2] == ("copy", "default:1")  # not the stream it named
    migrate = ops.stream(1)
    with ops.use(named, migrate):
        ops.copy(dst, tmp)
    assert ops.log[-1][:2] == ("copy", migrate.name)


# ---------------------------------------------------------------- the loader
@pytest.fixture(scope="module")
def resnet18():
    from hetserve.core.gpus import DEFAULT_CATALOG
    from hetserve.core.layertable import estimate_layer_rows, get_layer_table
    from hetserve.profiling.layers import leaf_rows
    from hetserve.zoo.registry import build

    rows = estimate_layer_rows(get_layer_table("resnet18"), DEFAULT_CATALOG.get("V100"))
    ref = build("resnet18").eval()
    x = ref.input_spec.example(2, seed=3)
    with torch.inference_mode():
        want = ref(x)
    return rows, x, want, build, leaf_rows


def _plan(kind, rows):
    from hetserve.planning.deepplan import make_load_plan

    return make_load_plan(kind, rows, 2, 300.0)


def _cold(resnet18, ops, secondaries=(1,), aliases=None, backend=None):
    """A cold ResNet-18 on ``backend`` (shared between models, as the executor shares one
    per device), else on a new one."""
    _, _, _, build, leaf_rows = resnet18

    def alias(host, dev):
        if aliases is not None:
            aliases.append(dev)
        return host

    net = build("resnet18")
    if backend is None:
        backend = CudaBackend(alias, "cuda:0", secondaries, ops=ops)
    return ColdModel(net, backend, leaf_rows(net))


@pytest.mark.parametrize("kind", KINDS)
def test_every_plan_kind_loads_without_an_ordering_hazard(resnet18, kind):
    rows, x, want, *_ = resnet18
    plan = _plan(kind, rows)
    ops = RecordingOps(n_devices=2)
    cm = _cold(resnet18, ops)
    cm.load(plan)
    got = cm.run(x)  # the kernels are queued while rows are on their way
    ops.settle()
    assert cm.loaded
    assert ops.hazards == []
    assert torch.equal(got, want)
    copies = [(stream, what) for op, stream, what in ops.log if op == "copy"]
    if kind in ("pt", "pt+dha"):
        assert plan.n_parts == 2
        forwards = {s for s, what in copies if what.split()[-1] == "1->0"}
        staged = {s for s, what in copies if what.split()[-1] == "-1->1"}
        # forwarded on the secondary's migration stream, staged on its copy stream
        assert len(forwards) == 1 and len(staged) == 1 and forwards != staged
        assert all(s.endswith(":1") and not s.startswith("default") for s in forwards | staged)
    else:
        assert {s for s, _ in copies} == {"s2:0"}  # the load stream, only
    if kind == "baseline":  # every row waited for before the first kernel
        first_kernel = next(k for k, op in enumerate(ops.log) if op[0] == "kernels")
        waits = [k for k, op in enumerate(ops.log) if op[0] == "wait_event"]
        assert waits and max(waits) < first_kernel


def test_an_eviction_while_the_batch_still_runs_is_ordered(resnet18, monkeypatch):
    rows, x, want, *_ = resnet18
    for fixed in (True, False):
        ops = RecordingOps(n_devices=2)
        if not fixed:  # destinations not recorded to the execution stream that reads them
            monkeypatch.setattr(ops, "record_stream", lambda *a: None)
        a = _cold(resnet18, ops)
        b = _cold(resnet18, ops, backend=a.backend)  # one load stream: b may get a's blocks
        a.load(_plan("pipeswitch", rows))
        a.run(x)  # queued, never waited for (no finish)
        ops.settle()
        a.evict()  # its blocks go back to the execution stream
        b.load(_plan("pipeswitch", rows))
        got = b.run(x)
        ops.settle()
        assert torch.equal(got, want)
        if fixed:
            assert ops.hazards == []
        else:
            assert any("write by" in h and "read by row" in h for h in ops.hazards)
        monkeypatch.undo()


def test_a_load_runs_beside_another_models_queued_kernels(resnet18):
    """The load stream never waits for the execution stream (measured on an H200: a cold
    start behind 50 ms of another model's queued work began its copies only after it)."""
    rows, x, want, *_ = resnet18
    ops = RecordingOps(n_devices=1)
    a = _cold(resnet18, ops, secondaries=())
    b = _cold(resnet18, ops, backend=a.backend)
    a.load(_plan("pipeswitch", rows))
    ops.settle()
    a.run(x)  # a's kernels queued, not waited for
    exec_ = ops.current(0)
    queued = exec_.clock[exec_.sid]
    b.load(_plan("pipeswitch", rows))
    loads = {s for op, s, _ in ops.log if op == "copy"}
    assert not any(op == "wait_stream" for op, *_ in ops.log)
    load = b.backend._load
    assert load.name in loads and load.clock.get(exec_.sid, 0) < queued
    got = b.run(x)
    ops.settle()
    assert torch.equal(got, want) and ops.hazards == []


def test_cuda_alone_is_the_current_device_for_host_aliases(resnet18):
    rows, x, want, *_ = resnet18
    ops = RecordingOps(n_devices=2, current_device=1)
    seen: list[int] = []
    _, _, _, build, leaf_rows = resnet18
    net = build("resnet18")

    def alias(host, dev):
        seen.append(dev)
        return host

    cm = ColdModel(net, CudaBackend(alias, "cuda", (), ops=ops), leaf_rows(net))
    cm.load(_plan("dha", rows))
    got = cm.run(x)
    ops.settle()
    assert seen and set(seen) == {1}
    assert torch.equal(got, want) and ops.hazards == []


def test_the_baseline_runs_only_once_every_row_is_in(resnet18):
    """On the CPU backend too: a plan that is not pipelined starts no layer before the
    last row has arrived (the first loader executed it pipelined)."""
    rows, x, want, build, leaf_rows = resnet18
    for kind in ("baseline", "pipeswitch"):
        net = build("resnet18")
        cm = ColdModel(net, ThreadBackend(delay_s_per_byte=1e-8), leaf_rows(net))
        done = threading.Event()
        cm.load(_plan(kind, rows), done.set)
        got = cm.run(x)
        done.wait(30)
        assert torch.equal(got, want)
        loaded = [i for what, i in cm.log if what == "loaded"]
        started = cm.log.index(("started", 0))
        last_load = cm.log.index(("loaded", loaded[-1]))
        assert (started > last_load) is (kind == "baseline")


def test_pt_goes_over_the_gpus_the_planner_counted():
    from hetserve.planning.deepplan import pt_gpus, pt_parallelism

    node = P3.nodes[0]
    assert pt_parallelism(P3)[0] == 2
    # GPUs 0 and 1 share a PCIe switch, 2 and 3 the other: 0 pairs with 2, not 1
    assert pt_gpus(node, 0, 2) == [0, 2]
    assert pt_gpus(node, 3, 2) == [3, 0]
    with pytest.raises(HetserveError, match="needs 2 GPU"):
        pt_gpus(node, 0, 3)


def test_the_executor_gives_a_pt_load_the_planned_secondary():
    from hetserve.core.layerlatency import LayerLatency
    from hetserve.core.plan import bind
    from hetserve.planning.deepplan import plan_cold_starts
    from hetserve.runtime.torch_executor import TorchExecutor
    from hetserve.scheduling import ClusterView

    names = ["resnet18@0"]
    plan, _ = plan_cold_starts(P3, names, None, "pt", {"resnet18@0": 0.2})
    pl = bind(plan, P3)
    view = ClusterView.build(P3, LayerLatency(plan.load_plans), pl)
    by_gpu = {view.cluster.gpu(w.gpu_id).index: wid for wid, w in view.workers.items()}
    assert TorchExecutor.pt_secondaries(view, by_gpu[0], 2) == [2]
    assert TorchExecutor.pt_secondaries(view, by_gpu[1], 2) == [2]
    assert TorchExecutor.pt_secondaries(view, by_gpu[2], 2) == [0]
    assert TorchExecutor.pt_secondaries(view, by_gpu[0], 1) == []


# ---------------------------------------------------------------- on a real GPU
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@cuda
@pytest.mark.parametrize("kind", KINDS)
def test_on_cuda_every_plan_kind_equals_the_warm_model(resnet18, kind):
    from hetserve.profiling.layers import host_alias

    rows, x, _, build, leaf_rows = resnet18
    n = torch.cuda.device_count()
    if kind.startswith("pt") and n < 2:
        pytest.skip("PT needs two GPUs")
    warm = build("resnet18").eval().cuda()
    with torch.inference_mode():
        want = warm(x.cuda())
    net = build("resnet18")
    cm = ColdModel(net, CudaBackend(host_alias, "cuda:0", [1] if n > 1 else []), leaf_rows(net))
    done = threading.Event()
    cm.load(_plan(kind, rows), done.set)
    got = cm.run(x.cuda())
    cm.finish()
    assert done.wait(60)
    assert torch.equal(got, want)


@cuda
def test_on_cuda_an_eviction_while_the_batch_runs_leaves_the_next_model_right(resnet18):
    from hetserve.profiling.layers import host_alias

    rows, x, _, build, leaf_rows = resnet18
    warm = build("resnet18").eval().cuda()
    xs = x.cuda().repeat(32, 1, 1, 1)  # a batch long enough to still run at the eviction
    with torch.inference_mode():
        want = warm(xs)
    a_net, b_net = build("resnet18"), build("resnet18")
    backend = CudaBackend(host_alias, "cuda:0")  # shared, as the executor shares it
    a = ColdModel(a_net, backend, leaf_rows(a_net))
    b = ColdModel(b_net, backend, leaf_rows(b_net))
    a_in, b_in = threading.Event(), threading.Event()
    a.load(_plan("pipeswitch", rows), a_in.set)
    assert a_in.wait(60)
    a.run(xs)  # queued, not waited for: evicted while its kernels may still run
    a.evict()
    b.load(_plan("pipeswitch", rows), b_in.set)  # may get a's blocks
    got = b.run(xs)
    b.finish()
    assert b_in.wait(60)
    assert torch.equal(got, want)
