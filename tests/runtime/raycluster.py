"""A real multi-node Ray cluster on this machine, started and stopped by a test.

``ray start --head`` and one ``ray start --address ...`` per worker node, each node with
``--num-gpus N`` and the ``accelerator_type:<T>`` resource (Ray's own convention for a
node's GPU type), GPU-less in fact. Every ``ray start`` runs in a process group of its
own: every Ray process of that node inherits it, so the test stops exactly what it started
(never the ray CLI's ``stop``, which ends every Ray cluster of the user on this machine), and
``kill_raylet`` kills one node's raylet the way a node dies.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from hetserve.experiments.live import free_port

# No token for these test clusters (a deployment sets RAY_AUTH_MODE and RAY_AUTH_TOKEN in
# the environment of every node and of `hetserve serve` alike); a small object store each
ENV = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
STORE_BYTES = 150_000_000


def ray_cli() -> str | None:
    exe = Path(sys.executable).with_name("ray")
    return str(exe) if exe.exists() else shutil.which("ray")


@dataclass
class TestNode:
    pgid: int  # the process group of its ``ray start`` (every process of the node)
    gpus: int
    accelerator: str | None
    node_id: str = ""  # Ray's node id (hex), read from the raylet's command line


class LocalRayCluster:
    """Head plus worker nodes, all on this machine (module docstring)."""

    def __init__(self) -> None:
        cli = ray_cli()
        if cli is None:
            raise RuntimeError("the ray command is not installed")
        self.cli = cli
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        # a short folder: Ray's socket paths must fit in 107 characters
        self.tmp = tempfile.mkdtemp(prefix="hsray", dir="/tmp")
        self.nodes: list[TestNode] = []
        self.head: TestNode | None = None

    def _start(self, args: list[str], gpus: int, accelerator: str | None) -> TestNode:
        before = set(_raylets())
        p = subprocess.Popen(
            [self.cli, "start", *args, "--num-cpus=1", f"--num-gpus={gpus}",
             f"--object-store-memory={STORE_BYTES}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, text=True,
            start_new_session=True,
        )  # fmt: skip
        node = TestNode(p.pid, gpus, accelerator)
        self.nodes.append(node)  # stopped by stop() even if it fails to start
        _, err = p.communicate(timeout=120)
        if p.returncode != 0:
            raise RuntimeError(f"ray start failed: {err[-2000:]}")
        new = [pid for pid in _raylets() if pid not in before and _pgid(pid) == node.pgid]
        if len(new) != 1:
            raise RuntimeError(f"expected one new raylet in group {node.pgid}, found {new}")
        node.node_id = _node_id(new[0])
        return node

    def start_head(self) -> str:
        self.head = self._start(
            ["--head", f"--port={self.port}", "--include-dashboard=false",
             f"--temp-dir={self.tmp}"], 0, None,
        )  # fmt: skip
        return self.address

    def add_node(
        self, gpus: int, accelerator: str | None, types: dict[str, int] | None = None
    ) -> TestNode:
        """A node with ``gpus`` GPUs of type ``accelerator`` (``accelerator_type:<T>``),
        or of several types: ``types`` (``hetserve_gpu:<T>`` with each type's count)."""
        args = [f"--address={self.address}"]
        res = {f"hetserve_gpu:{t}": n for t, n in (types or {}).items()}
        if accelerator is not None:
            res[f"accelerator_type:{accelerator}"] = 1
        if res:
            args += ["--resources", json.dumps(res)]
        return self._start(args, gpus, accelerator)

    def kill_raylet(self, node: TestNode) -> None:
        """The node dies: its raylet is killed (SIGKILL); its workers follow it."""
        for pid in _raylets():
            if _pgid(pid) == node.pgid:
                os.kill(pid, signal.SIGKILL)

    def stop(self) -> list[int]:
        """Stop every process this cluster started; the pids still alive after (none)."""
        for node in reversed(self.nodes):
            stop_group(node.pgid)
        shutil.rmtree(self.tmp, ignore_errors=True)
        return [p for n in self.nodes for p in members(n.pgid)]


def _raylets() -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                exe = (d / "cmdline").read_bytes().split(b"\0", 1)[0]
            except OSError:
                continue
            if exe.endswith(b"/raylet"):
                out.append(int(d.name))
    return out


def _node_id(pid: int) -> str:
    args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    for a in args:
        if a.startswith("--node_id=") or a.startswith("--node-id="):
            return a.split("=", 1)[1]
    raise RuntimeError(f"raylet {pid}: no --node_id in its command line")


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _pgid(pid: int) -> int:
    try:
        return int(_stat(pid)[2])
    except OSError:
        return -1


def members(pgid: int) -> list[int]:
    """Live processes of the process group."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = _stat(int(d.name))
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(d.name))
    return out


def stop_group(pgid: int, grace_s: float = 15.0) -> None:
    """SIGTERM to the group, then SIGKILL to whatever is left after ``grace_s``."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        end = time.monotonic() + wait_s
        while members(pgid) and time.monotonic() < end:
            time.sleep(0.2)
        if not members(pgid):
            return
