"""What one node can tell about itself, run on the node as a Ray task: the versions of
hetserve, torch, Ray and Python, NVML's GPUs (names, memory, PCIe links, NVLink peers,
PCIe switches) and its NIC speed. The probe is pickled by value (:func:`by_value`), so a
node without hetserve, or with another version of it, still answers."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any


def probe_node() -> dict[str, Any]:
    """What one node can tell about itself: versions, NVML's GPUs, NIC speed. Runs on the
    node (a Ray task), by value: it imports nothing of hetserve's at module level, so a
    node without hetserve still answers (with ``hetserve: missing``)."""
    import os
    import platform

    out: dict[str, Any] = {"versions": {"python": platform.python_version()}}
    for mod in ("hetserve", "torch", "ray"):
        try:
            out["versions"][mod] = __import__(mod).__version__
        except Exception:
            out["versions"][mod] = "missing"
    speeds = []
    try:
        for nic in os.listdir("/sys/class/net"):
            if nic == "lo":
                continue
            try:
                with open(f"/sys/class/net/{nic}/speed") as f:
                    mbps = int(f.read().strip())
            except (OSError, ValueError):
                continue
            if mbps > 0:
                speeds.append(mbps)
    except OSError:
        pass
    out["nic_gbps"] = max(speeds) / 1000 if speeds else None
    out["nvml"], out["nvml_error"] = nvml_gpus()
    return out


def nvml_gpus(nvml: Any = None) -> tuple[dict[str, Any] | None, str]:
    """NVML's view of this node's GPUs: per GPU name, memory, PCIe link, bus id; NVLink
    pairs; PCIe switch groups. ``(None, why)`` where NVML does not answer. Imports what it
    uses inside: it runs cloned by value (:func:`by_value`), without this module's globals
    (a module-level ``contextlib`` failed the probe on the first GPU node it met)."""
    import contextlib

    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return None, "nvidia-ml-py is not installed (the nvml extra)"
    try:
        nvml.nvmlInit()
    except Exception as e:
        return None, f"NVML: {e}"
    try:
        gpus, handles, bus = [], [], {}
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            handles.append(h)
            name = nvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else str(name)
            g: dict[str, Any] = {"index": i, "name": name}
            g["memory_mb"] = nvml.nvmlDeviceGetMemoryInfo(h).total / 2**20
            try:  # the GPU's identity: indices differ between NVML and CUDA's order
                u = nvml.nvmlDeviceGetUUID(h)
                g["uuid"] = u.decode() if isinstance(u, bytes) else str(u)
            except Exception:
                g["uuid"] = None
            for key, fn in (("pcie_gen", "nvmlDeviceGetMaxPcieLinkGeneration"),
                            ("pcie_width", "nvmlDeviceGetMaxPcieLinkWidth")):  # fmt: skip
                try:
                    g[key] = int(getattr(nvml, fn)(h))
                except Exception:
                    g[key] = None
            try:
                b = nvml.nvmlDeviceGetPciInfo(h).busId
                bus[(b.decode() if isinstance(b, bytes) else str(b)).lower()] = i
            except Exception:
                pass
            gpus.append(g)
        nvlink: set[tuple[int, int]] = set()
        for i, h in enumerate(handles):
            for link in range(18):  # NVML_NVLINK_MAX_LINKS
                try:
                    if not nvml.nvmlDeviceGetNvLinkState(h, link):
                        continue
                    b = nvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId
                except Exception:
                    break
                j = bus.get((b.decode() if isinstance(b, bytes) else str(b)).lower())
                if j is not None and j != i:
                    nvlink.add((min(i, j), max(i, j)))
        # GPUs whose closest common ancestor is a PCIe switch (one or several levels)
        parent = list(range(len(handles)))

        def root(i: int) -> int:
            while parent[i] != i:
                i = parent[i]
            return i

        switched = False
        for i in range(len(handles)):
            for j in range(i + 1, len(handles)):
                try:
                    level = int(nvml.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j]))
                except Exception:
                    continue
                if level <= 20:  # NVML_TOPOLOGY_SINGLE (10) or _MULTIPLE (20)
                    parent[root(j)] = root(i)
                    switched = True
        groups: dict[int, list[int]] = {}
        for i in range(len(handles)):
            groups.setdefault(root(i), []).append(i)
        switches = [g for g in groups.values()] if switched else []
        return {"gpus": gpus, "nvlink": sorted(nvlink), "pcie_switches": switches}, ""
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def by_value(fn: Callable[..., Any], **helpers: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as a function Ray pickles by value (its module is not importable on the
    node), so it runs on a node that lacks hetserve or has another version of it;
    ``helpers``: the module-level functions it calls, cloned the same way."""
    env = {"__builtins__": __builtins__, **{k: by_value(h) for k, h in helpers.items()}}
    clone = types.FunctionType(fn.__code__, env, fn.__name__, fn.__defaults__, fn.__closure__)
    clone.__module__ = "hetserve_probe"
    clone.__qualname__ = fn.__name__
    return clone
