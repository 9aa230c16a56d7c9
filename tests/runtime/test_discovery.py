"""Discovery without a cluster: GPU names to catalog types (exactly), what a node reports
(NVML through a recorded fake, Ray's accelerator_type convention), the cluster YAML it
writes, and the checks that stop a wrong deployment before anything starts."""

import pickle
import subprocess
import sys
from types import SimpleNamespace

import pytest

from hetserve.core.cluster import parse_cluster
from hetserve.core.errors import HetserveError
from hetserve.core.gpus import DEFAULT_CATALOG
from hetserve.runtime import discovery as dsc
from hetserve.runtime import ray_session
from hetserve.runtime.discovery import Discovered, FoundGpu, FoundNode

BUS = "PCI_BUS_ID"  # what every GPU actor hetserve starts reports (ACTOR_ENV)


@pytest.mark.parametrize(
    "driver, catalog_type",
    [
        ("Tesla V100-SXM2-16GB", "V100-16GB"),
        ("Tesla V100-SXM2-32GB", "V100-32GB"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA H100 PCIe", "H100-PCIe"),
        ("NVIDIA L4", "L4"),
        ("Tesla T4", "T4"),
        ("Tesla P4", "P4"),
        ("T4", "T4"),  # Ray's accelerator type
    ],
)
def test_driver_names_map_to_catalog_types_exactly(driver, catalog_type):
    assert dsc.gpu_type(driver, DEFAULT_CATALOG, "node n").name == catalog_type


def test_a_name_is_never_matched_by_substring():
    # "NVIDIA A100" contains "A10" (and "A100"): neither is a match, it is unknown
    for name in ("NVIDIA A100", "NVIDIA A100-PCIE-40GB", "Tesla T4 Custom"):
        with pytest.raises(HetserveError) as e:
            dsc.gpu_type(name, DEFAULT_CATALOG, "node n1")
        msg = str(e.value)
        assert "\n" not in msg and f"unknown GPU {name!r}" in msg and "gpu_types" in msg
        assert msg.startswith("node n1:")


def test_a_name_whose_memory_is_far_from_its_type_is_refused():
    with pytest.raises(HetserveError, match="81920 MiB, but the catalog's A100-40GB"):
        dsc.gpu_type("a100", DEFAULT_CATALOG, "node n", memory_mb=81920)
    assert dsc.gpu_type("Tesla T4", DEFAULT_CATALOG, "n", memory_mb=15360).name == "T4"


class FakeNvml:
    """NVML as a p3.8xlarge-like node answers it: four V100s, NVLink 0-1 and 2-3, two PCIe
    switches (0, 1) and (2, 3)."""

    def __init__(self, names=None, mem_mb=16384):
        self.names = names or ["Tesla V100-SXM2-16GB"] * 4
        self.mem = mem_mb if isinstance(mem_mb, list) else [mem_mb] * len(self.names)
        self.calls = []

    def nvmlInit(self):
        self.calls.append("init")

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self):
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return self.names[h].encode()

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=self.mem[h] * 2**20)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return 3

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=f"00000000:0{h}:00.0".encode())

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= 2:
            raise RuntimeError("NVML_ERROR_INVALID_ARGUMENT")
        return 1 if link == 0 else 0

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        peer = h ^ 1
        return SimpleNamespace(busId=f"00000000:0{peer}:00.0")

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return 10 if a // 2 == b // 2 else 40  # SINGLE switch, else NODE


def test_nvml_gives_names_memory_links_nvlink_and_pcie_switches():
    fake = FakeNvml()
    got, why = dsc.nvml_gpus(fake)
    assert why == "" and fake.calls == ["init", "shutdown"]
    assert [g["name"] for g in got["gpus"]] == ["Tesla V100-SXM2-16GB"] * 4
    assert got["gpus"][0]["pcie_gen"] == 3 and got["gpus"][0]["pcie_width"] == 16
    assert got["nvlink"] == [(0, 1), (2, 3)]
    assert got["pcie_switches"] == [[0, 1], [2, 3]]
    node = dsc._node_from("ab" * 28, "10.0.0.5", 32, {"GPU": 4.0}, {},
                          {"nvml": got, "nic_gbps": 10.0}, DEFAULT_CATALOG, "p3")  # fmt: skip
    assert node.gpu_counts() == {"V100-16GB": 4} and node.source == "nvml"
    spec = Discovered("h:1", [node]).spec()
    assert spec["nodes"][0]["nvlink"] == [[0, 1], [2, 3]]
    assert spec["nodes"][0]["pcie_switches"] == [[0, 1], [2, 3]]
    cluster = parse_cluster(spec, "<test>")
    assert cluster.gpu_counts() == {"V100-16GB": 4}
    assert cluster.transfer_path("p3/gpu0", "p3/gpu1") == ["p3/gpu0->p3/gpu1:nvlink"]


def test_real_nvml_without_a_driver_says_why():
    pytest.importorskip("pynvml")
    got, why = dsc.nvml_gpus()
    if got is not None:
        pytest.skip("this machine has an NVIDIA driver")
    assert why.startswith("NVML:")


def test_gpus_of_one_type_that_differ_in_memory_are_refused():
    got, _ = dsc.nvml_gpus(FakeNvml(["Tesla V100-SXM2-16GB"] * 2, [16384, 15360]))
    with pytest.raises(HetserveError, match="differ in memory"):
        dsc._node_from("n" * 56, "a", 8, {"GPU": 2.0}, {}, {"nvml": got}, DEFAULT_CATALOG, "n")


def test_ray_gpu_count_must_agree_with_nvml():
    got, _ = dsc.nvml_gpus(FakeNvml())
    with pytest.raises(HetserveError, match="Ray offers 2 GPUs but NVML sees 4"):
        dsc._node_from("n" * 56, "a", 8, {"GPU": 2.0}, {}, {"nvml": got}, DEFAULT_CATALOG, "n")


def test_rays_convention_resource_label_and_mistakes():
    def node(resources, labels=None):
        return dsc._node_from("c" * 56, "10.0.0.7", 4, resources, labels or {}, {},
                              DEFAULT_CATALOG, "n7")  # fmt: skip

    by_res = node({"GPU": 2.0, "accelerator_type:T4": 1.0})
    assert by_res.gpu_counts() == {"T4": 2} and by_res.source == "resource accelerator_type:T4"
    by_label = node({"GPU": 1.0}, {"ray.io/accelerator-type": "L4"})
    assert by_label.gpu_counts() == {"L4": 1} and "label" in by_label.source
    assert node({"CPU": 4.0}).gpus == ()  # a GPU-less node: not a worker node
    with pytest.raises(HetserveError, match="none accelerator type"):
        node({"GPU": 2.0})
    with pytest.raises(HetserveError, match="expected a whole number"):
        node({"GPU": 1.5, "accelerator_type:T4": 1.0})
    with pytest.raises(HetserveError, match=r"unknown GPU 'A10G'"):
        node({"GPU": 1.0, "accelerator_type:A10G": 1.0})


def _found(*shapes):
    nodes = []
    for i, (t, n) in enumerate(shapes):
        gpus = tuple(FoundGpu(k, t) for k in range(n))
        nodes.append(FoundNode(f"{i:056x}", "10.0.0.1", f"n{i}", 4, gpus, "test"))
    return Discovered("10.0.0.1:6379", nodes)


def test_the_written_yaml_is_a_cluster_every_command_takes(tmp_path):
    from hetserve.core.presets import load_cluster

    f = tmp_path / "c.yaml"
    f.write_text(_found(("T4", 2), ("L4", 1)).yaml("mine"))
    c = load_cluster(str(f))
    assert c.name == "mine" and c.gpu_counts() == {"T4": 2, "L4": 1}
    assert "10 assumed" in f.read_text()  # the NIC speed it could not read is said


def test_a_cluster_file_that_disagrees_names_the_nodes():
    found = _found(("T4", 2), ("L4", 1))
    same = parse_cluster({"name": "x", "nodes": [
        {"name": "a", "gpus": {"L4": 1}, "nic_gbps": 1},
        {"name": "b", "gpus": {"T4": 2}, "nic_gbps": 1}]}, "x.yaml")  # fmt: skip
    dsc.compare(same, found, "x.yaml")
    other = parse_cluster({"name": "x", "nodes": [
        {"name": "big", "gpus": {"T4": 4}, "nic_gbps": 1},
        {"name": "b", "gpus": {"L4": 1}, "nic_gbps": 1}]}, "x.yaml")  # fmt: skip
    with pytest.raises(HetserveError) as e:
        dsc.compare(other, found, "x.yaml")
    msg = str(e.value)
    assert "x.yaml disagrees" in msg and "big" in msg and "n0 (2x T4)" in msg


def test_a_plan_that_needs_more_than_the_cluster_has():
    found = _found(("T4", 2), ("L4", 1))
    dsc.check_plan_fits({"T4": 2, "L4": 1}, found, "p.json")
    with pytest.raises(HetserveError) as e:
        dsc.check_plan_fits({"T4": 3, "V100-16GB": 1}, found, "p.json")
    assert str(e.value) == (
        "p.json needs 3x T4, 1x V100-16GB, but the cluster at 10.0.0.1:6379 has 1x L4, 2x T4 "
        "(short: 1x T4, 1x V100-16GB)"
    )


def test_gpus_needed_counts_what_bind_takes():
    from hetserve.core.placement import bind, gpus_needed
    from hetserve.core.presets import preset
    from hetserve.engine.setup import build_setup, latency_source
    from hetserve.planning.registry import PlanRequest, make_plan

    for name, models, planner in (
        ("hc1-s", ["resnet50", "vgg16"], "ppipe"),
        ("shepherd-12xv100", ["resnet50"], "ppipe"),
        ("hc1-s", ["resnet50"], None),  # the default plan: shared pools
    ):
        cluster = preset(name)
        if planner is None:
            plan = build_setup(cluster, models).plan
        else:
            lat = latency_source(cluster, models, None, 10)
            req = PlanRequest(cluster, models, None, None, lambda lat=lat: lat)
            plan = make_plan(planner, req, {}).plan
        need = gpus_needed(plan, cluster.catalog)
        bound = {}
        for w in bind(plan, cluster).workers:
            bound.setdefault(w.gpu, set()).add(w.gpu_id)
        if plan.shared_pools:  # a shared pool takes every GPU of its type: one will do
            assert need == dict.fromkeys(bound, 1)
        else:
            assert need == {t: len(ids) for t, ids in bound.items()}


def test_every_node_must_run_this_hetserve():
    from hetserve import __version__

    found = _found(("T4", 1))
    ok = FoundNode("1" * 56, "a", "ok", 1, (), "t", versions={"hetserve": __version__})
    dsc.check_versions(Discovered("a:1", found.nodes, [ok]))
    for theirs, said in (("missing", "does not have hetserve"), ("0.0.1", "has hetserve 0.0.1")):
        bad = FoundNode("2" * 56, "a", "old", 1, (), "t", versions={"hetserve": theirs})
        with pytest.raises(HetserveError, match=said):
            dsc.check_versions(Discovered("a:1", found.nodes, [bad]))


def test_the_probe_runs_where_hetserve_is_not_installed():
    """Ray pickles the probe by value: a node without hetserve still answers, saying so."""
    from ray import cloudpickle

    blob = cloudpickle.dumps(dsc.by_value(dsc.probe_node, nvml_gpus=dsc.nvml_gpus))
    code = (
        "import pickle, sys; sys.modules['hetserve'] = None; "
        "print(pickle.loads(sys.stdin.buffer.read())()['versions']['hetserve'])"
    )
    run = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True,
                         timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    assert run.stdout.decode().strip() == "missing"
    assert b"hetserve.runtime" not in blob  # nothing of hetserve's is imported to run it
    assert pickle.loads(blob)()["versions"]["hetserve"] != "missing"  # here it is


def test_the_probe_cloned_by_value_reads_gpus():
    """The clone Ray runs has no module globals: NVML's path through it (GPUs found, then
    shut down) must need none. It once did, and the probe failed on the first GPU node."""
    clone = dsc.by_value(dsc.nvml_gpus)
    got, why = clone(FakeNvml(["Tesla V100-SXM2-16GB"] * 2, [16384, 15360]))
    assert why == "" and [g["name"] for g in got["gpus"]] == ["Tesla V100-SXM2-16GB"] * 2


def test_an_address_nobody_answers_is_one_line_at_once():
    from hetserve.experiments.live import free_port

    port = free_port()
    with pytest.raises(HetserveError) as e:
        ray_session.check_address(f"127.0.0.1:{port}")
    assert "nothing answers there" in str(e.value) and f"--port {port}" in str(e.value)
    with pytest.raises(HetserveError, match="expected HOST:PORT"):
        ray_session.check_address("my-head")


def test_slices_may_not_take_more_than_one_gpu():
    from hetserve.runtime.ray_placement import check_shares

    def w(i, share, gpu="n/gpu0"):
        return SimpleNamespace(id=f"w{i}", share=share, gpu_id=gpu)

    check_shares([w(0, 2), w(1, 2), w(2, 3, "n/gpu1"), w(3, 3, "n/gpu1"), w(4, 3, "n/gpu1")])
    with pytest.raises(HetserveError, match="n/gpu0 take 1.5 GPUs"):
        check_shares([w(0, 2), w(1, 2), w(2, 2)])
    with pytest.raises(HetserveError, match="share 0 does not divide a GPU"):
        check_shares([w(0, 0)])


def test_verify_refuses_a_worker_that_is_not_where_the_plan_wants_it():
    from hetserve.runtime.ray_placement import WorkerPlace, verify

    found = _found(("T4", 2), ("L4", 1))
    t4, l4 = found.nodes[0].node_id, found.nodes[1].node_id
    t4_type, l4_type = DEFAULT_CATALOG.get("T4"), DEFAULT_CATALOG.get("L4")
    view = SimpleNamespace(workers={
        "a": SimpleNamespace(gpu=l4_type, share=2, gpu_id="x/gpu0"),
        "b": SimpleNamespace(gpu=l4_type, share=2, gpu_id="x/gpu0"),
        "c": SimpleNamespace(gpu=t4_type, share=1, gpu_id="y/gpu0"),
        "d": SimpleNamespace(gpu=t4_type, share=1, gpu_id="y/gpu1"),
    })  # fmt: skip

    def place(node, idx, name=None):
        return WorkerPlace(node, "10.0.0.1", idx, name, 1, device_order=BUS)

    good = {"a": place(l4, 0), "b": place(l4, 0), "c": place(t4, 0), "d": place(t4, 1)}
    verify(view, found, good)
    for bad, msg in (
        ({"c": place(l4, 0)}, r"worker c \(planned on T4\) runs on node .* \(n1\), GPU 0: a L4"),
        ({"b": place(t4, 1)}, "a T4"),
        ({"d": place(t4, 0)}, "run on one physical GPU"),
        ({"c": place(t4, 0, "NVIDIA L4")}, "the driver says 'NVIDIA L4'"),
        ({"c": place("f" * 56, 0)}, "not a GPU node discovery found"),
    ):
        with pytest.raises(HetserveError, match=msg):
            verify(view, found, {**good, **bad})


def test_verify_refuses_slices_of_one_planned_gpu_on_two_gpus():
    from hetserve.runtime.ray_placement import WorkerPlace, verify

    found = _found(("L4", 2))
    l4, t = found.nodes[0].node_id, DEFAULT_CATALOG.get("L4")
    view = SimpleNamespace(workers={
        "a": SimpleNamespace(gpu=t, share=2, gpu_id="x/gpu0"),
        "b": SimpleNamespace(gpu=t, share=2, gpu_id="x/gpu0"),
    })  # fmt: skip
    with pytest.raises(HetserveError, match="the slices of the plan's x/gpu0 run on two GPUs"):
        verify(view, found, {"a": WorkerPlace(l4, "h", 0, None, 1, device_order=BUS),
                             "b": WorkerPlace(l4, "h", 1, None, 2, device_order=BUS)})  # fmt: skip


def test_on_a_node_of_two_gpu_types_a_worker_is_found_by_its_gpus_uuid():
    """A node with an L4 (NVML index 0) and a T4 (NVML index 1). CUDA, ordering devices
    fastest first, can give Ray's GPU id 0 to the T4: the index says L4 while the worker
    computes on the T4. By UUID the check sees where it really runs."""
    from hetserve.runtime.ray_placement import WorkerPlace, verify

    gpus = (FoundGpu(0, "L4", "NVIDIA L4", uuid="GPU-aaaa"),
            FoundGpu(1, "T4", "Tesla T4", uuid="GPU-bbbb"))  # fmt: skip
    found = Discovered("h:1", [FoundNode("1" * 56, "h", "n0", 8, gpus, "nvml")])
    node = found.nodes[0].node_id
    l4, t4 = DEFAULT_CATALOG.get("L4"), DEFAULT_CATALOG.get("T4")
    view = SimpleNamespace(workers={
        "a": SimpleNamespace(gpu=l4, share=1, gpu_id="n0/gpu0"),
        "b": SimpleNamespace(gpu=t4, share=1, gpu_id="n0/gpu1"),
    })  # fmt: skip
    # Ray's ids swapped against NVML's indices, the UUIDs right: where they really are
    right = {
        "a": WorkerPlace(node, "h", 1, "NVIDIA L4", 1, "GPU-aaaa", device_order=BUS),
        "b": WorkerPlace(node, "h", 0, "Tesla T4", 2, "GPU-bbbb", device_order=BUS),
    }
    verify(view, found, right)
    # the L4's worker computing on the T4, though Ray's id 0 is the L4's NVML index
    wrong = {**right, "a": WorkerPlace(node, "h", 0, None, 1, "GPU-bbbb", device_order=BUS)}
    with pytest.raises(HetserveError, match=r"worker a \(planned on L4\).*GPU-bbbb: a T4"):
        verify(view, found, wrong)
    with pytest.raises(HetserveError, match="no such GPU"):
        cccc = WorkerPlace(node, "h", 0, None, 1, "GPU-cccc", device_order=BUS)
        verify(view, found, {**right, "a": cccc})


def test_discovery_reads_each_gpus_uuid_and_actors_order_devices_by_bus():
    from hetserve.runtime.ray_placement import ACTOR_ENV

    class WithUuids(FakeNvml):
        def nvmlDeviceGetUUID(self, h):
            return f"GPU-{h:04d}".encode()

    got, _ = dsc.nvml_gpus(WithUuids())
    assert [g["uuid"] for g in got["gpus"]] == ["GPU-0000", "GPU-0001", "GPU-0002", "GPU-0003"]
    got, _ = dsc.nvml_gpus(FakeNvml())  # a driver without the call: no UUID, still GPUs
    assert [g["uuid"] for g in got["gpus"]] == [None] * 4
    assert ACTOR_ENV == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def test_each_planned_gpu_is_pinned_to_its_physical_gpu_by_uuid():
    """A discovered node of T4 (NVML 0), L4 (1), T4 (2): its YAML counts 2 T4 and 1 L4,
    so the plan's n0/gpu0 and n0/gpu1 are the T4s and n0/gpu2 the L4. Each actor is
    started with CUDA_VISIBLE_DEVICES set to its planned GPU's UUID (Ray told to leave
    it), whichever GPU id Ray's bundle got; without UUIDs (emulated nodes) nothing is
    pinned."""
    from hetserve.runtime.ray_placement import ACTOR_ENV, NOSET_VISIBLE, RayPlacement, planned_uuid

    gpus = (FoundGpu(0, "T4", uuid="GPU-t4a"), FoundGpu(1, "L4", uuid="GPU-l4"),
            FoundGpu(2, "T4", uuid="GPU-t4b"))  # fmt: skip
    found = Discovered("h:1", [FoundNode("1" * 56, "h", "n0", 8, gpus, "nvml")])
    cluster = found.cluster()
    assert {g.id: g.type.name for g in cluster.gpus} == {
        "n0/gpu0": "T4", "n0/gpu1": "T4", "n0/gpu2": "L4"}  # fmt: skip
    assert [planned_uuid(cluster, found, f"n0/gpu{k}") for k in range(3)] == [
        "GPU-t4a", "GPU-t4b", "GPU-l4"]  # fmt: skip
    bare = Discovered("h:1", [FoundNode("1" * 56, "h", "n0", 8, tuple(
        FoundGpu(g.index, g.type) for g in gpus), "resource")])  # fmt: skip
    assert planned_uuid(bare.cluster(), bare, "n0/gpu0") is None
    assert planned_uuid(cluster, None, "n0/gpu0") is None

    rp = RayPlacement.__new__(RayPlacement)  # (its options alone: no Ray here)
    rp.found, rp.cluster, rp._strategy, rp._typed = found, cluster, {"w": "strategy"}, {}
    w = SimpleNamespace(id="w", gpu=DEFAULT_CATALOG.get("L4"), share=2, gpu_id="n0/gpu2")
    opts = rp.options(w)
    assert opts["num_gpus"] == 0.25 and opts["scheduling_strategy"] == "strategy"
    assert opts["runtime_env"]["env_vars"] == {
        **ACTOR_ENV, "CUDA_VISIBLE_DEVICES": "GPU-l4", NOSET_VISIBLE: "1"}  # fmt: skip


def test_profile_measure_names_a_cuda_device_exactly(monkeypatch):
    torch = pytest.importorskip("torch")
    from hetserve.profiling.measure import device_name

    def fake(name, mib):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda d: name)
        monkeypatch.setattr(torch.cuda, "get_device_properties",
                            lambda d: SimpleNamespace(total_memory=mib * 2**20))  # fmt: skip

    fake("NVIDIA A100-SXM4-80GB", 81920)
    assert device_name("cuda:0") == "A100-80GB"  # not "A10", as by substring
    fake("Tesla V100-SXM2-16GB", 16160)
    assert device_name("cuda") == "V100-16GB"
    fake("NVIDIA A100-PCIE-40GB", 40960)
    with pytest.raises(HetserveError, match="--device cuda: unknown GPU 'NVIDIA A100-PCIE-40GB'"):
        device_name("cuda")


def test_cluster_discover_on_this_machine_and_at_a_dead_address(tmp_path, capsys):
    from hetserve.cli.main import main
    from hetserve.core.presets import load_cluster
    from hetserve.experiments.live import free_port

    out = tmp_path / "here.yaml"
    assert main(["cluster", "discover", "--output", str(out), "--name", "here"]) == 0
    c = load_cluster(str(out))
    assert c.name == "here" and sum(c.gpu_counts().values()) >= 1
    capsys.readouterr()
    assert main(["cluster", "discover", "--address", f"127.0.0.1:{free_port()}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nothing answers there" in err, err


def test_a_node_of_several_types_declares_one_resource_per_type():
    """``hetserve_gpu:<T>`` with each type's count names a node's GPUs where Ray's
    ``accelerator_type`` holds one type; with NVML it must agree with NVML; mistakes are
    one line each."""

    def node(resources, probe=None):
        return dsc._node_from("c" * 56, "10.0.0.7", 4, resources, {}, probe or {},
                              DEFAULT_CATALOG, "n7")  # fmt: skip

    mixed = node({"GPU": 3.0, "hetserve_gpu:L4": 1.0, "hetserve_gpu:T4": 2.0})
    assert mixed.gpu_counts() == {"L4": 1, "T4": 2} and mixed.typed
    assert mixed.source == "resources hetserve_gpu:L4=1, hetserve_gpu:T4=2"
    assert Discovered("h:1", [mixed]).cluster().gpu_counts() == {"L4": 1, "T4": 2}
    # (the accelerator_type convention alone cannot say it)
    with pytest.raises(HetserveError, match="several"):
        node({"GPU": 2.0, "accelerator_type:T4": 1.0, "accelerator_type:L4": 1.0})
    for resources, msg in (
        ({"GPU": 2.0, "hetserve_gpu:L4": 1.0}, r"Ray offers 2 GPUs but its hetserve_gpu:<T> "
         r"resources count 1 \(1x L4\)"),
        ({"GPU": 2.0, "hetserve_gpu:L4": 1.5, "hetserve_gpu:T4": 0.5}, "whole GPU count"),
        ({"hetserve_gpu:L4": 1.0}, "no GPU resource; start it with --num-gpus 1"),
        ({"GPU": 1.0, "hetserve_gpu:Z9": 1.0}, "unknown GPU 'Z9'"),
    ):  # fmt: skip
        with pytest.raises(HetserveError, match=msg) as e:
            node(resources)
        assert "\n" not in str(e.value)
    got, _ = dsc.nvml_gpus(FakeNvml(["NVIDIA L4", "Tesla T4"], [23034, 15360]))
    ok = node({"GPU": 2.0, "hetserve_gpu:L4": 1.0, "hetserve_gpu:T4": 1.0}, {"nvml": got})
    assert ok.source == "nvml" and ok.typed and ok.gpu_counts() == {"L4": 1, "T4": 1}
    assert not node({"GPU": 2.0}, {"nvml": got}).typed
    with pytest.raises(HetserveError, match="resources say 2x T4 but NVML sees 1x L4, 1x T4"):
        node({"GPU": 2.0, "hetserve_gpu:T4": 2.0}, {"nvml": got})


def test_verify_reads_the_type_ray_gave_on_a_typed_node_without_a_driver():
    """On a node that declares per-type resources and has no driver, no GPU index is any
    card's: the check reads the type from the ``hetserve_gpu:<T>`` resource Ray gave the
    actor. Every GPU actor must order devices by PCI bus."""
    from hetserve.runtime.ray_placement import WorkerPlace, verify

    gpus = (FoundGpu(0, "L4"), FoundGpu(1, "T4"))
    found = Discovered("h:1", [FoundNode("1" * 56, "h", "n0", 8, gpus, "resources", typed=True)])
    node = found.nodes[0].node_id
    l4, t4 = DEFAULT_CATALOG.get("L4"), DEFAULT_CATALOG.get("T4")
    view = SimpleNamespace(workers={
        "a": SimpleNamespace(gpu=l4, share=1, gpu_id="n0/gpu0"),
        "b": SimpleNamespace(gpu=t4, share=1, gpu_id="n0/gpu1"),
    })  # fmt: skip
    # Ray's GPU ids the other way round from the types' order: what counts is the resource
    right = {"a": WorkerPlace(node, "h", 1, None, 1, typed_as="L4", device_order=BUS),
             "b": WorkerPlace(node, "h", 0, None, 2, typed_as="T4", device_order=BUS)}  # fmt: skip
    verify(view, found, right)
    for bad, msg in (
        (WorkerPlace(node, "h", 1, None, 1, typed_as="T4", device_order=BUS),
         r"worker a \(planned on L4\).*Ray gave it hetserve_gpu:T4, not hetserve_gpu:L4"),
        (WorkerPlace(node, "h", 1, None, 1, device_order=BUS), "holds none of them"),
        (WorkerPlace(node, "h", 1, None, 1, typed_as="L4", device_order=None),
         "CUDA_DEVICE_ORDER is None, not PCI_BUS_ID"),
        (WorkerPlace(node, "h", 0, None, 1, typed_as="L4", device_order=BUS),
         "run on one physical GPU"),
    ):  # fmt: skip
        with pytest.raises(HetserveError, match=msg):
            verify(view, found, {**right, "a": bad})


def test_a_typed_gpus_actor_asks_ray_for_its_type():
    from hetserve.runtime.ray_placement import RayPlacement

    found = _found(("L4", 1))
    rp = RayPlacement.__new__(RayPlacement)  # (its options alone: no Ray here)
    rp.found, rp.cluster = found, found.cluster()
    rp._strategy, rp._typed = {"w": "s", "v": "s"}, {"n0/gpu0": "hetserve_gpu:L4"}
    w = SimpleNamespace(id="w", gpu=DEFAULT_CATALOG.get("L4"), gpu_id="n0/gpu0", share=2)
    assert rp.options(w)["resources"] == {"hetserve_gpu:L4": 0.25}
    v = SimpleNamespace(id="v", gpu=DEFAULT_CATALOG.get("L4"), gpu_id="n0/gpu1", share=1)
    assert "resources" not in rp.options(v)


def test_a_ray_that_does_not_start_is_a_one_line_error(monkeypatch):
    """``ray.init`` failing (a GCS or raylet that did not come up in time) is one line
    naming which Ray, with the first line of Ray's reason; what it started is shut down."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("Ray runs in this process already")
    shut = []

    def init(**kwargs):
        raise Exception("The current node timed out during startup. This could happen\nmore")

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: shut.append(1))
    with pytest.raises(HetserveError) as e:
        ray_session.connect(None)
    assert str(e.value) == (
        "a local Ray instance did not start: The current node timed out during startup. "
        "This could happen"
    )
    assert shut == [1]
