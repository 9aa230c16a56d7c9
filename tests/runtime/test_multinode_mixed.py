"""Nodes with two GPU types each, on a real multi-node Ray cluster on this machine
(``tests/runtime/raycluster.py``): two nodes started with ``--num-gpus 2 --resources
'{"hetserve_gpu:L4": 1, "hetserve_gpu:P4": 1}'`` (GPU-less in fact), started and stopped by
this module alone.

What a platform engineer with mixed nodes does: ``hetserve cluster discover --address``
reads each node as one L4 and one P4, ``hetserve plan`` plans on the YAML, ``hetserve serve
--emulate`` serves it; Ray's own state shows every bundle asking for its planned type's
resource on its planned node, and the server's start-up check read each actor's type from
the resource Ray gave it."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter

import pytest
import yaml

pytest.importorskip("ray")
httpx = pytest.importorskip("httpx")

from tests.runtime.raycluster import ENV, LocalRayCluster, ray_cli  # noqa: E402
from tests.runtime.serving import start_serve  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]
TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TYPES = {"L4": 1, "P4": 1}


@pytest.fixture(scope="module")
def cluster():
    if ray_cli() is None:
        pytest.skip("the ray command is not installed")
    c = LocalRayCluster()
    try:
        c.start_head()
        c.add_node(2, None, TYPES)
        c.add_node(2, None, TYPES)
        yield c
    finally:
        left = c.stop()
    assert not left, f"processes of the test's Ray cluster outlived it: {left}"


def _hetserve(*args, timeout=300):
    run = subprocess.run([sys.executable, "-m", "hetserve", *args], capture_output=True,
                         text=True, env=ENV, timeout=timeout)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return run


STATE = textwrap.dedent(
    """
    import json, sys, ray
    ray.init(address=sys.argv[1], log_to_driver=False)
    print(json.dumps(ray.util.placement_group_table()))
    """
)


def test_mixed_nodes_are_discovered_planned_and_served_by_type(cluster, tmp_path):
    c_yaml, plan = tmp_path / "c.yaml", tmp_path / "p.json"
    _hetserve("cluster", "discover", "--address", cluster.address, "--output", str(c_yaml))
    text = c_yaml.read_text()
    spec = yaml.safe_load(text)
    assert [n["gpus"] for n in spec["nodes"]] == [TYPES, TYPES], text
    assert text.count("GPUs from resources hetserve_gpu:L4=1, hetserve_gpu:P4=1") == 2, text
    slo = "resnet50=1000,vgg16=1000"
    _hetserve("plan", "--planner", "ppipe", "--cluster", str(c_yaml), "--models",
              "resnet50,vgg16", "--slo", slo, "--output", str(plan))  # fmt: skip
    env = {**ENV, "PYTHONUNBUFFERED": "1", "HETSERVE_TOKEN": TOKEN}
    proc, url, out = start_serve(tmp_path, ["--address", cluster.address, "--cluster",
                                            str(c_yaml), "--plan", str(plan), "--emulate"],
                                 env, timeout_s=180)  # fmt: skip
    try:
        workers = httpx.get(f"{url}/v2/cluster/workers", headers=AUTH, timeout=10).json()
        planned = {}  # planned GPU -> (node id, type)
        for w in workers:
            assert w["state"] in ("ready", "busy"), w
            # the plan was made on the discovered YAML: each worker on its very node
            assert w["planned_gpu"].split("/")[0].endswith(w["node_id"][:6]), w
            planned[w["planned_gpu"]] = (w["node_id"], w["gpu_type"])
        assert {t for _, t in planned.values()} == {"L4", "P4"}, workers
        # Ray's own state: each bundle asks for one GPU and its planned type's resource, on
        # the node its GPU is planned on
        groups = json.loads(subprocess.run(
            [sys.executable, "-c", STATE, cluster.address], capture_output=True, text=True,
            env=ENV, timeout=120, check=True).stdout.splitlines()[-1])  # fmt: skip
        held = Counter()
        for g in groups.values():
            if g["state"] != "CREATED":
                continue
            for i, res in g["bundles"].items():
                typed = [k for k in res if k.startswith("hetserve_gpu:")]
                assert res.get("GPU") == 1.0 and len(typed) == 1 and res[typed[0]] == 1.0, g
                held[(g["bundles_to_node_id"][i], typed[0].split(":", 1)[1])] += 1
        assert held == Counter(planned.values()), (held, planned)
        from hetserve.experiments.live import binary_body

        body, hdr = binary_body(__import__("numpy").zeros((1, 3, 224, 224), dtype="float32"))
        for model in ("resnet50", "vgg16"):
            r = httpx.post(f"{url}/v2/models/{model}/infer", content=body,
                           headers={**hdr, **AUTH}, timeout=60)  # fmt: skip
            assert r.status_code == 200, r.text
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        rc = proc.wait(timeout=60)
    log = out.read()
    assert rc == 0 and "Traceback" not in log, log
    assert "placed and checked against the plan" in log, log
