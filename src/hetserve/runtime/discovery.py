"""Discovery: the GPUs of the Ray cluster hetserve runs on (or of this machine), as the
cluster YAML that ``plan``, ``simulate`` and ``serve`` take.

Per node: its address, CPUs and GPUs. Where NVML answers (``nvidia-ml-py``, the ``nvml``
extra; a probe task on each node), each GPU's name as the driver says it, its memory, its
host link (PCIe generation and width), NVLink peers and the GPUs that share a PCIe switch.
Elsewhere Ray's own conventions: the ``accelerator_type:<T>`` resource Ray sets on GPU
nodes (or the ``ray.io/accelerator-type`` node label) with the node's GPU count — so a
GPU-less node started with ``ray start --num-gpus 2 --resources
'{"accelerator_type:T4": 1}'`` is a node with two T4s.

A node with GPUs of several types declares one *per-type resource* per type at its start,
``hetserve_gpu:<T>`` with that type's GPU count (``ray start --num-gpus 2 --resources
'{"hetserve_gpu:L4": 1, "hetserve_gpu:T4": 1}'``): without NVML it is what names the node's
GPUs (Ray's ``accelerator_type`` holds one type); with NVML it must agree with NVML's
counts. Placement then asks each bundle for its type's resource
(``runtime.ray_placement``), so Ray reserves a GPU of the planned type there.

GPU names map to catalog types exactly (``GpuCatalog.get``: the name or an alias, case and
``_``/space insensitive; the catalog carries the drivers' strings such as
``NVIDIA A100-SXM4-80GB`` as aliases), never by substring. The probe also reports the
versions of hetserve, torch, Ray and Python on each node: workers on another node import
hetserve there, so a node without it, or with another version, is a one-line error here
rather than a failure at the first request (docs/deployment.md).
"""

from __future__ import annotations

import socket
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hetserve.core.errors import HetserveError
from hetserve.core.gpus import DEFAULT_CATALOG, GpuCatalog, GpuType, gpu_type
from hetserve.runtime.probe import by_value, nvml_gpus, probe_node

ACCEL_RESOURCE = "accelerator_type:"
TYPE_RESOURCE = "hetserve_gpu:"  # per GPU type, its count: a node with several types
ACCEL_LABEL = "ray.io/accelerator-type"
NODE_ID_LABEL = "ray.io/node-id"
# what a cluster YAML needs and discovery cannot read where /sys gives no NIC speed
DEFAULT_NIC_GBPS = 10.0


@dataclass(frozen=True)
class FoundGpu:
    index: int  # the GPU's index on its node (NVML's, or Ray's 0..n-1)
    type: str  # the catalog's name
    driver_name: str | None = None  # as the driver says it (None: Ray's convention only)
    memory_mb: float | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    uuid: str | None = None  # NVML's (``GPU-...``): what identifies a GPU, not its index


@dataclass(frozen=True)
class FoundNode:
    node_id: str  # Ray's node id (hex); "" for this machine read without Ray
    address: str
    name: str  # its name in the cluster YAML
    cpus: float
    gpus: tuple[FoundGpu, ...]
    source: str  # where the GPU types came from: "nvml", "resource accelerator_type:T4", ...
    nvlink: tuple[tuple[int, int], ...] = ()
    pcie_switches: tuple[tuple[int, ...], ...] = ()
    nic_gbps: float | None = None
    versions: dict[str, str] = field(default_factory=dict)
    # the node declares ``hetserve_gpu:<T>`` resources: Ray can be asked for a type there
    typed: bool = False

    def gpu_counts(self) -> dict[str, int]:
        return dict(Counter(g.type for g in self.gpus))

    @property
    def shape(self) -> str:
        """``2x T4`` or ``1x T4 + 1x L4``: what a node holds, for messages and tables."""
        return " + ".join(f"{n}x {t}" for t, n in self.gpu_counts().items()) or "no GPUs"


@dataclass
class Discovered:
    """What discovery found (module docstring)."""

    address: str | None  # the Ray cluster's address; None: this machine, without Ray
    nodes: list[FoundNode]  # nodes with GPUs (or, on a CPU-only machine, its CPU)
    skipped: list[FoundNode] = field(default_factory=list)  # GPU-less Ray nodes
    catalog: GpuCatalog = DEFAULT_CATALOG
    extra_types: list[GpuType] = field(default_factory=list)  # the user's, written out too

    def spec(self, name: str = "discovered") -> dict[str, Any]:
        """The cluster YAML (docs/formats.md#clusters) as a mapping."""
        nodes = []
        for n in self.nodes:
            entry: dict[str, Any] = {"name": n.name, "gpus": n.gpu_counts()}
            entry["nic_gbps"] = n.nic_gbps if n.nic_gbps is not None else DEFAULT_NIC_GBPS
            if n.pcie_switches:
                entry["pcie_switches"] = [list(g) for g in n.pcie_switches]
            if n.nvlink:
                entry["nvlink"] = [list(p) for p in n.nvlink]
            nodes.append(entry)
        out: dict[str, Any] = {"name": name, "description": self.describe(), "nodes": nodes}
        extra = list(self.extra_types)
        if any(g.type == "CPU" for n in self.nodes for g in n.gpus):
            from hetserve.core.presets import preset  # this machine's CPU, as local-cpu has it

            extra += preset("local-cpu").gpu_types()
        used = {g.type for n in self.nodes for g in n.gpus}
        types = [t.model_dump(exclude_defaults=True) for t in extra if t.name in used]
        for t in types:
            if "aliases" in t:
                t["aliases"] = list(t["aliases"])
        if types:
            out["gpu_types"] = types
        return out

    def describe(self) -> str:
        where = f"the Ray cluster at {self.address}" if self.address else "this machine"
        return f"discovered from {where} by hetserve cluster discover"

    def yaml(self, name: str = "discovered") -> str:
        """The cluster YAML text, with what discovery read per GPU as comments."""
        import yaml

        lines = [f"# {self.describe()}"]
        for n in self.nodes:
            nid = f" (Ray node {n.node_id})" if n.node_id else ""
            lines.append(f"# {n.name}{nid}: {n.cpus:g} CPUs, GPUs from {n.source}")
            for g in n.gpus:
                lines.append(f"#   gpu{g.index}: {_gpu_text(g)}")
            if n.nic_gbps is None:
                lines.append(
                    f"#   nic_gbps: not readable on the node; {DEFAULT_NIC_GBPS:g} assumed "
                    f"(edit it: the planner times transfers with it)"
                )
        for n in self.skipped:
            lines.append(f"# {n.name} (Ray node {n.node_id}): no GPUs; not a worker node here")
        body = yaml.safe_dump(self.spec(name), sort_keys=False, default_flow_style=None)
        return "\n".join(lines) + "\n" + body

    def cluster(self, name: str = "discovered") -> Any:
        from hetserve.core.cluster import parse_cluster

        return parse_cluster(self.spec(name), "<discovered cluster>", self.catalog)

    def gpu_counts(self) -> dict[str, int]:
        c: Counter[str] = Counter()
        for n in self.nodes:
            c.update(n.gpu_counts())
        return dict(sorted(c.items()))

    def node(self, name: str) -> FoundNode | None:
        return next((n for n in self.nodes if n.name == name), None)

    def node_ids_with(self, gpu_type: str) -> list[str]:
        return [n.node_id for n in self.nodes if any(g.type == gpu_type for g in n.gpus)]

    def by_id(self, node_id: str) -> FoundNode | None:
        return next((n for n in self.nodes if n.node_id == node_id), None)


def _gpu_text(g: FoundGpu) -> str:
    parts = [g.type]
    if g.driver_name:
        parts.append(f"driver {g.driver_name!r}")
    if g.memory_mb:
        parts.append(f"{g.memory_mb:.0f} MiB")
    if g.pcie_gen:
        parts.append(f"PCIe gen{g.pcie_gen} x{g.pcie_width}")
    if g.uuid:
        parts.append(g.uuid)
    return ", ".join(parts)


# ------------------------------------------------------------------ Ray


def discover(
    address: str | None = None,
    catalog: GpuCatalog = DEFAULT_CATALOG,
    timeout_s: float = 60.0,
) -> Discovered:
    """The Ray cluster Ray is connected to (``connect`` first), or with ``address=None``
    and Ray not running, this machine alone (NVML in this process, no Ray)."""
    import ray

    if not ray.is_initialized():
        probe = probe_node()
        return Discovered(None, [_node_from("", "127.0.0.1", _cpus(), {}, {}, probe, catalog,
                                            socket.gethostname())], catalog=catalog)  # fmt: skip
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    alive = sorted(
        (n for n in ray.nodes() if n.get("Alive")),
        key=lambda n: (n["NodeManagerAddress"], n["NodeID"]),
    )
    task = ray.remote(num_cpus=0)(by_value(probe_node, nvml_gpus=nvml_gpus))
    refs = [
        task.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
        ).remote()
        for n in alive
    ]
    try:
        probes = ray.get(refs, timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise HetserveError(
            f"discovery: a node did not answer the probe within {timeout_s:.0f} s"
        ) from None
    addresses = Counter(n["NodeManagerAddress"] for n in alive)
    found, skipped = [], []
    for n, probe in zip(alive, probes, strict=True):
        addr = n["NodeManagerAddress"]
        name = addr if addresses[addr] == 1 else f"{addr}-{n['NodeID'][:6]}"
        node = _node_from(
            n["NodeID"], addr, n["Resources"].get("CPU", 0.0), n["Resources"],
            n.get("Labels") or {}, probe, catalog, name,
        )  # fmt: skip
        (found if node.gpus else skipped).append(node)
    if not found:
        raise HetserveError(
            f"the Ray cluster at {ray.get_runtime_context().gcs_address} has no GPU nodes "
            f"({len(skipped)} node(s), none with a GPU resource); start GPU nodes with ray "
            f"start --num-gpus N (and --resources '{{\"accelerator_type:T4\": 1}}' where Ray "
            f"cannot read the GPU's type)"
        )
    return Discovered(ray.get_runtime_context().gcs_address, found, skipped, catalog)


def _cpus() -> float:
    import os

    return float(len(os.sched_getaffinity(0)))


def _node_from(
    node_id: str,
    address: str,
    cpus: float,
    resources: dict[str, float],
    labels: dict[str, str],
    probe: dict[str, Any],
    catalog: GpuCatalog,
    name: str,
) -> FoundNode:
    """One node's GPUs: NVML's where it answers, else Ray's accelerator-type convention."""
    where = f"node {name}" + (f" (Ray node {node_id[:8]})" if node_id else "")
    n_ray = resources.get("GPU", 0.0)
    nvml = probe.get("nvml")
    common = {
        "node_id": node_id, "address": address, "name": name, "cpus": cpus,
        "nic_gbps": probe.get("nic_gbps"), "versions": dict(probe.get("versions", {})),
    }  # fmt: skip
    declared = _type_resources(resources, catalog, where)
    if nvml is not None and nvml["gpus"]:
        if node_id and int(n_ray) != len(nvml["gpus"]):
            raise HetserveError(
                f"{where}: Ray offers {n_ray:g} GPUs but NVML sees {len(nvml['gpus'])}; start "
                f"the node's raylet with every GPU (ray start without --num-gpus, or with "
                f"--num-gpus {len(nvml['gpus'])}) so that GPU indices agree"
            )
        gpus = []
        for g in nvml["gpus"]:
            t = gpu_type(g["name"], catalog, where, g.get("memory_mb"))
            gpus.append(FoundGpu(g["index"], t.name, g["name"], g.get("memory_mb"),
                                 g.get("pcie_gen"), g.get("pcie_width"),
                                 g.get("uuid")))  # fmt: skip
        _same_memory(gpus, where)
        if declared and declared != dict(Counter(g.type for g in gpus)):
            raise HetserveError(
                f"{where}: its {TYPE_RESOURCE}<T> resources say {_counts(declared)} but NVML "
                f"sees {_counts(Counter(g.type for g in gpus))}; start it with one resource per "
                f"type and that type's GPU count"
            )
        return FoundNode(
            gpus=tuple(gpus), source="nvml", typed=bool(declared),
            nvlink=tuple(tuple(p) for p in nvml["nvlink"]),  # type: ignore[misc]
            pcie_switches=tuple(tuple(s) for s in nvml["pcie_switches"]), **common,
        )  # fmt: skip
    if not node_id:  # this machine, without Ray: no NVML GPU, so its CPU as one device
        return FoundNode(gpus=(FoundGpu(0, "CPU"),), source="CPU (no NVIDIA GPU: "
                         f"{probe.get('nvml_error') or 'NVML found none'})", **common)  # fmt: skip
    if n_ray <= 0:
        if declared:
            raise HetserveError(
                f"{where}: {TYPE_RESOURCE}<T> resources ({_counts(declared)}) but no GPU "
                f"resource; start it with --num-gpus {sum(declared.values())}"
            )
        return FoundNode(gpus=(), source="no GPU resource", **common)
    if n_ray != int(n_ray):
        raise HetserveError(f"{where}: Ray offers {n_ray:g} GPUs; expected a whole number")
    if declared:
        if sum(declared.values()) != int(n_ray):
            raise HetserveError(
                f"{where}: Ray offers {n_ray:g} GPUs but its {TYPE_RESOURCE}<T> resources "
                f"count {sum(declared.values())} ({_counts(declared)}); give each type its "
                f"GPU count, e.g. --num-gpus 2 --resources "
                f'\'{{"{TYPE_RESOURCE}L4": 1, "{TYPE_RESOURCE}T4": 1}}\''
            )
        # (indices in the types' order: without a driver no index is any card's; the
        # placement asks Ray for the type, the check reads it from the actor's resources)
        gpus = tuple(
            FoundGpu(i, t)
            for i, t in enumerate(t for t in sorted(declared) for _ in range(declared[t]))
        )
        src = ", ".join(f"{TYPE_RESOURCE}{t}={n}" for t, n in sorted(declared.items()))
        return FoundNode(gpus=gpus, source=f"resources {src}", typed=True, **common)
    names = sorted(k[len(ACCEL_RESOURCE) :] for k in resources if k.startswith(ACCEL_RESOURCE))
    source = f"resource {ACCEL_RESOURCE}{names[0]}" if len(names) == 1 else ""
    if not names and labels.get(ACCEL_LABEL):
        names, source = [labels[ACCEL_LABEL]], f"label {ACCEL_LABEL}={labels[ACCEL_LABEL]}"
    if len(names) != 1:
        got = f"several ({', '.join(names)})" if names else "none"
        raise HetserveError(
            f"{where}: {n_ray:g} GPUs but {got} accelerator type(s): start it with one, e.g. "
            f"ray start --num-gpus {n_ray:g} --resources '{{\"accelerator_type:T4\": 1}}', or "
            f"install nvidia-ml-py on it (the nvml extra) so NVML names its GPUs"
        )
    t = gpu_type(names[0], catalog, where)
    gpus = tuple(FoundGpu(i, t.name) for i in range(int(n_ray)))
    return FoundNode(gpus=gpus, source=source, **common)


def _type_resources(resources: dict[str, float], catalog: GpuCatalog, where: str) -> dict[str, int]:
    """The node's ``hetserve_gpu:<T>`` resources as catalog type -> GPU count."""
    out: dict[str, int] = {}
    for k, v in resources.items():
        if not k.startswith(TYPE_RESOURCE):
            continue
        if v != int(v) or v < 1:
            raise HetserveError(f"{where}: resource {k} is {v:g}; expected a whole GPU count")
        t = gpu_type(k[len(TYPE_RESOURCE) :], catalog, where)
        out[t.name] = out.get(t.name, 0) + int(v)
    return out


def _counts(c: Any) -> str:
    return ", ".join(f"{n}x {t}" for t, n in sorted(dict(c).items()))


def _same_memory(gpus: list[FoundGpu], where: str) -> None:
    """GPUs of one type on one node have one memory size (else they are not one type)."""
    by_type: dict[str, set[int]] = {}
    for g in gpus:
        if g.memory_mb is not None:
            by_type.setdefault(g.type, set()).add(round(g.memory_mb))
    for t, sizes in by_type.items():
        if len(sizes) > 1:
            raise HetserveError(
                f"{where}: its {t} GPUs differ in memory "
                f"({', '.join(f'{s} MiB' for s in sorted(sizes))}); "
                f"GPUs of one type must be alike: give the others a type of their own "
                f"(gpu_types in the cluster YAML)"
            )


# ------------------------------------------------------------------ checks


def check_versions(found: Discovered) -> None:
    """Every node runs this hetserve (workers import it there): a node without it, or
    with another version, is a one-line error saying what to do (docs/deployment.md)."""
    from hetserve import __version__

    for n in [*found.nodes, *found.skipped]:
        theirs = n.versions.get("hetserve")
        if theirs is not None and theirs != __version__:
            what = "does not have hetserve" if theirs == "missing" else f"has hetserve {theirs}"
            raise HetserveError(
                f"node {n.name} {what}, this is {__version__}: install hetserve=={__version__} "
                f"(and its torch) on every node, or pass --runtime-env with a pip or py_modules "
                f"entry (docs/deployment.md)"
            )


def compare(cluster: Any, found: Discovered, source: str) -> None:
    """A cluster YAML given with ``--address`` must describe the discovered cluster: the
    same nodes (by what each holds). A one-line error names the nodes that differ."""
    have = Counter(
        tuple(sorted(Counter(g.type.name for g in n.gpus).items())) for n in cluster.nodes
    )
    want = Counter(tuple(sorted(n.gpu_counts().items())) for n in found.nodes)
    if have == want:
        return

    extra = [
        n.name
        for n in cluster.nodes
        if (have - want)[tuple(sorted(Counter(g.type.name for g in n.gpus).items()))]
    ]
    missing = [n for n in found.nodes if (want - have)[tuple(sorted(n.gpu_counts().items()))]]
    said = []
    if extra:
        said.append(f"the file's nodes {', '.join(extra[:6])} are not in the cluster")
    if missing:
        said.append(
            "the cluster's nodes "
            + ", ".join(f"{n.name} ({n.shape})" for n in missing[:6])
            + " are not in the file"
        )
    raise HetserveError(
        f"{source} disagrees with the cluster discovered at {found.address}: "
        f"{'; '.join(said)} (hetserve cluster discover --address {found.address} writes the "
        f"cluster's YAML)"
    )


def check_plan_fits(needs: dict[str, int], found: Discovered, plan_file: str) -> None:
    """The plan's GPUs by type against the discovered cluster's: a one-line error naming
    what the plan needs and what the cluster has."""
    has = found.gpu_counts()
    short = {t: n for t, n in needs.items() if has.get(t, 0) < n}
    if short:

        def fmt(c: dict[str, int]) -> str:
            return ", ".join(f"{n}x {t}" for t, n in c.items()) or "no GPUs"

        raise HetserveError(
            f"{plan_file} needs {fmt(needs)}, but the cluster at {found.address} has "
            f"{fmt(has)} (short: {fmt({t: n - has.get(t, 0) for t, n in short.items()})})"
        )
