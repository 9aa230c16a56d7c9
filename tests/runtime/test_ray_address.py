"""Joining an existing Ray cluster (``--address``): a head started with ``ray start``, a
server in a fresh interpreter connecting to it as a driver, serving, and leaving the
cluster running when it stops."""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("ray")

from hetserve.experiments.live import free_port
from tests.runtime.raycluster import members, stop_group

# one Ray at a time under pytest-xdist: the module shares a worker with test_ray.py
pytestmark = [pytest.mark.torch, pytest.mark.slow, pytest.mark.xdist_group("ray")]

# the server's side, in a fresh interpreter (one that has been a driver of another Ray
# cluster before cannot reliably become one of this)
SERVE = textwrap.dedent(
    """
    import asyncio, sys
    import ray, torch
    from hetserve.engine.setup import build_setup
    from hetserve.runtime.server import Server, ServerConfig
    from hetserve.zoo.registry import build

    address = sys.argv[1]
    s = build_setup("local-cpu", ["resnet18"], slo_ms={"resnet18": 60000.0}, max_batch=2)
    cfg = ServerConfig(scheduler="flex", build=build, engine="ray", ray_address=address)
    srv = Server(s, cfg)
    model = build("resnet18")
    x = model.input_spec.example(2)

    async def scenario():
        srv.start()
        joined = ray.get_runtime_context().gcs_address
        try:
            return joined, await asyncio.gather(*(srv.infer("resnet18", x[i]) for i in range(2)))
        finally:
            await srv.stop()

    joined, results = asyncio.run(scenario())
    assert joined.endswith(address.rsplit(":", 1)[1]), joined
    assert [r.outcome for r in results] == ["ok", "ok"], results
    with torch.inference_mode():
        ref = model(x)
    assert torch.allclose(torch.stack([r.output for r in results]), ref, atol=1e-4)
    print("served on", joined)
    """
)


def _ray_cli() -> str:
    exe = Path(sys.executable).with_name("ray")
    found = str(exe) if exe.exists() else shutil.which("ray")
    if found is None:
        pytest.skip("the ray command is not installed")
    return found


def test_the_server_joins_a_running_cluster_and_leaves_it_running():
    cli = _ray_cli()
    port = free_port()
    address = f"127.0.0.1:{port}"
    # a short temporary folder: Ray's socket paths must fit in 107 characters. No token
    # for this test cluster (a deployment sets RAY_AUTH_MODE and RAY_AUTH_TOKEN in the
    # environment of every node and of `hetserve serve` alike)
    tmp = tempfile.mkdtemp(prefix="hsray", dir="/tmp")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    start = [cli, "start", "--head", f"--port={port}", "--num-cpus=2",
             "--include-dashboard=false", f"--temp-dir={tmp}"]  # fmt: skip
    # in a process group of its own: every Ray process of this head inherits it, so the
    # test stops exactly what it started (never the ray CLI's stop, which ends every Ray cluster of
    # the user on this machine)
    head = subprocess.Popen(start, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            text=True, start_new_session=True)  # fmt: skip
    group = head.pid  # the leader of the new group
    try:
        _, err = head.communicate(timeout=120)
        assert head.returncode == 0, err[-3000:]
        run = subprocess.run([sys.executable, "-c", SERVE, address], capture_output=True,
                             text=True, env=env, timeout=300)  # fmt: skip
        assert run.returncode == 0, run.stderr[-3000:]
        assert run.stdout.strip().endswith(f":{port}")  # the GCS it joined
        # the server has gone; the cluster it joined is still up
        status = subprocess.run([cli, "status", f"--address={address}"], capture_output=True,
                                env=env, timeout=60)  # fmt: skip
        assert status.returncode == 0, status.stderr
    finally:
        stop_group(group)
        shutil.rmtree(tmp, ignore_errors=True)
    assert not members(group), "a process of the test's Ray head outlived the test"
