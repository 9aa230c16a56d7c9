"""Built-in cluster presets, selectable by name wherever a cluster is taken.

Every preset is written as the same mapping a user's YAML file holds and goes through the
same validation.

PPipe (paper Table 1; network bandwidths as in the issue's reading of the PPipe artifact's
simulator settings — the paper uses 1/5 of the instance bandwidth as effective bandwidth):

=========  ===============================  ===============================  ========
preset     high class                       low class                        NIC Gbps
=========  ===============================  ===============================  ========
hc1-l      25 L4, 1 per node                75 P4, 1 per node                6
hc2-l      25 L4, 4 per node (6x4 + 1x1)    75 T4, 2 per node (37x2 + 1x1)   10
hc3-l      25 V100, 2 per node (12x2 + 1x1) 75 P4, 1 per node                6
hc4-l      25 V100, 4 per node (6x4 + 1x1)  75 T4, 2 per node (37x2 + 1x1)   10
hcN-s      4 high + 12 low GPUs with the same per-node packing as in Table 1's
           small setups (e.g. hc2-s: one 4xL4 node + six 2xT4 nodes)
=========  ===============================  ===============================  ========

When a count does not divide by the GPUs per node, the remainder sits on one smaller node.

Others: ``shepherd-12xv100`` (Shepherd section 7: 12 p3.2xlarge, one V100-16GB each, up to
10 Gbps); ``p3-8xlarge`` (DeepPlan section 5: 4 V100-16GB, two PCIe 3.0 switches serving two
GPUs each, NVLink between every pair); ``magicbatch-edge`` (MagicBatch section 5: one GTX
1080 Ti, one RTX 2080 Ti, one RTX 3090 in one edge server); ``local-cpu`` (this machine's
CPU as one device, for the runtime).

RAMPA (paper section V-A, Table III): racks of five 8-GPU servers; the GPUs of one type in
one rack hang off one optical circuit switch, so each switch is one (rack, type) group and
each GPU has its own link to it (0.05 us, 10 Gbps; 100 Gbps in ``rampa-high-bw``).
Switches form a 2-D torus, 4x4 (``rampa-large``: 6x6); each neighbouring pair is joined by
four fibres (4 lanes, 0.1 us each); switching adds 30 ns. Types GPU_A..D = L4, V100-32GB,
A30, T4 are laid out so that switch (i, j) holds type (i + j) mod 4 — each type on a
quarter of the switches; ``rampa-high-perf`` keeps only GPU_A and GPU_B ((i + j) mod 2,
eight racks each, as in the paper).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from hetserve.core.cluster import Cluster, load_cluster_file, parse_cluster
from hetserve.core.errors import unknown
from hetserve.core.gpus import DEFAULT_CATALOG, GpuCatalog


def _pack(
    gpu: str, total: int, per_node: int, nic_gbps: float, prefix: str
) -> list[dict[str, Any]]:
    full, rest = divmod(total, per_node)
    out: list[dict[str, Any]] = []
    if full:
        out.append({"count": full, "name": prefix, "gpus": {gpu: per_node}, "nic_gbps": nic_gbps})
    if rest:
        out.append({"count": 1, "name": f"{prefix}r", "gpus": {gpu: rest}, "nic_gbps": nic_gbps})
    return out


# (high type, high per node, low type, low per node, NIC Gbps)
_PPIPE = {
    "hc1": ("L4", 1, "P4", 1, 6.0),
    "hc2": ("L4", 4, "T4", 2, 10.0),
    "hc3": ("V100", 2, "P4", 1, 6.0),
    "hc4": ("V100", 4, "T4", 2, 10.0),
}


def _ppipe(hc: str, n_high: int, n_low: int) -> Callable[[], dict[str, Any]]:
    hi, hi_per, lo, lo_per, gbps = _PPIPE[hc]
    size = "l" if n_high + n_low == 100 else "s"

    def spec() -> dict[str, Any]:
        return {
            "name": f"{hc}-{size}",
            "description": f"PPipe {hc.upper()}-{size.upper()}: {n_high}x {hi} + {n_low}x {lo}"
            f", {gbps:g} Gbps NIC (PPipe Table 1)",
            "nodes": _pack(hi, n_high, hi_per, gbps, f"{hi.lower()}-")
            + _pack(lo, n_low, lo_per, gbps, f"{lo.lower()}-"),
        }

    return spec


def _shepherd() -> dict[str, Any]:
    return {
        "name": "shepherd-12xv100",
        "description": "Shepherd testbed: 12 p3.2xlarge, one V100-16GB each",
        "nodes": [{"count": 12, "name": "p3-", "gpus": {"V100-16GB": 1}, "nic_gbps": 10}],
    }


def _p3_8xlarge() -> dict[str, Any]:
    return {
        "name": "p3-8xlarge",
        "description": "DeepPlan server: AWS p3.8xlarge, 4 V100-16GB, two PCIe "
        "switches of two GPUs, NVLink between all pairs",
        "nodes": [
            {
                "name": "p3-8xlarge",
                "gpus": {"V100-16GB": 4},
                "nic_gbps": 10,
                "pcie_switches": [[0, 1], [2, 3]],
                "pcie_switch_gbps": 15.75,
                "nvlink": [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]],
            }
        ],
    }


def _magicbatch() -> dict[str, Any]:
    return {
        "name": "magicbatch-edge",
        "description": "MagicBatch edge server: GTX 1080 Ti, RTX 2080 Ti, RTX 3090",
        "nodes": [
            {
                "name": "edge",
                "nic_gbps": 10,
                "gpus": {"GTX-1080-Ti": 1, "RTX-2080-Ti": 1, "RTX-3090": 1},
            }
        ],
    }


def _local_cpu() -> dict[str, Any]:
    cores = os.cpu_count() or 1
    try:
        mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError, AttributeError):
        mem_gb = 8.0
    # Nominal figures for a CPU "device" (AVX2 FMA at ~2.5 GHz: ~40 GFLOP/s per core);
    # the runtime issue replaces them with measured profiles.
    return {
        "name": "local-cpu",
        "description": f"this machine's CPU ({cores} cores) as a single device",
        "gpu_types": [
            {
                "name": "CPU",
                "fp32_tflops": round(0.04 * cores, 3),
                "fp16_tflops": round(0.04 * cores, 3),
                "tensor_cores": False,
                "memory_gb": round(mem_gb, 1),
                "mem_bw_gbps": 20.0,
                "pcie_gen": 4,
                "host_gbps": 20.0,
                "tdp_w": 65.0,
                "idle_w": 10.0,
                "mps": False,
                "year": 2020,
            }
        ],
        "nodes": [{"name": "localhost", "gpus": {"CPU": 1}, "nic_gbps": 10}],
    }


_RAMPA_TYPES = ("L4", "V100-32GB", "A30", "T4")


def _rampa(variant: str) -> Callable[[], dict[str, Any]]:
    side = 6 if variant == "large" else 4
    bw = 100.0 if variant == "high-bw" else 10.0
    n_types = 2 if variant == "high-perf" else 4

    def spec() -> dict[str, Any]:
        switches, nodes, links = [], [], []
        for i in range(side):
            for j in range(side):
                sw = f"ocs-{i}-{j}"
                gpu = _RAMPA_TYPES[(i + j) % n_types]
                switches.append({"name": sw, "latency_us": 0.03})
                nodes.append(
                    {
                        "count": 5,
                        "name": f"r{i}{j}-s",
                        "gpus": {gpu: 8},
                        "nic_gbps": bw,
                        "rack": f"rack-{i}-{j}",
                        "switch": sw,
                        "attach": "gpu",
                        "link_gbps": bw,
                        "link_delay_us": 0.05,
                    }
                )
                for di, dj in ((0, 1), (1, 0)):
                    nb = f"ocs-{(i + di) % side}-{(j + dj) % side}"
                    links.append({"a": sw, "b": nb, "bw_gbps": bw, "delay_us": 0.1, "lanes": 4})
        return {
            "name": f"rampa-{variant}",
            "description": f"RAMPA {variant} cluster: {side}x{side} torus of optical "
            f"switches, racks of five 8-GPU servers, {bw:g} Gbps links "
            f"(RAMPA Table III)",
            "nodes": nodes,
            "topology": {"switches": switches, "links": links},
        }

    return spec


PRESETS: dict[str, Callable[[], dict[str, Any]]] = {
    **{f"{hc}-l": _ppipe(hc, 25, 75) for hc in _PPIPE},
    **{f"{hc}-s": _ppipe(hc, 4, 12) for hc in _PPIPE},
    "shepherd-12xv100": _shepherd,
    "p3-8xlarge": _p3_8xlarge,
    "magicbatch-edge": _magicbatch,
    "rampa-base": _rampa("base"),
    "rampa-high-bw": _rampa("high-bw"),
    "rampa-high-perf": _rampa("high-perf"),
    "rampa-large": _rampa("large"),
    "local-cpu": _local_cpu,
}


def preset_spec(name: str) -> dict[str, Any]:
    try:
        return PRESETS[name.lower()]()
    except KeyError:
        raise unknown("cluster preset", name, PRESETS) from None


def preset(name: str) -> Cluster:
    """A built-in cluster by name (case-insensitive)."""
    return parse_cluster(preset_spec(name), f"preset {name}")


def load_cluster(name_or_path: str, catalog: GpuCatalog = DEFAULT_CATALOG) -> Cluster:
    """A preset by name, or a cluster YAML file by path."""
    if name_or_path.lower() in PRESETS:
        return preset(name_or_path)
    if os.path.exists(name_or_path) or name_or_path.endswith((".yaml", ".yml")):
        return load_cluster_file(name_or_path, catalog)
    return preset(name_or_path)  # raises with suggestions
