"""Clusters: nodes with GPUs, NICs, PCIe switches, NVLink pairs, racks, and an optional
switched network topology. One link model serves them all (docs/design.md): a transfer crosses
a *path of directed links*, each with a bandwidth (Gbit/s), a propagation delay and a
number of parallel lanes.

- Flat cluster: GPU -> GPU on another node crosses ``[sender uplink, receiver downlink]``.
- Switched topology (RAMPA): nodes (or single GPUs) attach to switches; the path is the
  sender's attachment link, the switch-to-switch links of a shortest path, and the
  receiver's attachment link; each switch on the way adds its switching latency.
- Host -> GPU loads (DeepPlan) cross the GPU's PCIe link and, where GPUs share a PCIe
  switch, the switch's uplink.

The YAML format is documented in ``docs/formats.md``; presets are in
:mod:`hetserve.core.presets`.
"""

from __future__ import annotations

import itertools
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from hetserve.core.errors import ConfigError, HetserveError
from hetserve.core.files import read_yaml
from hetserve.core.gpus import (
    CATALOG_PRICE_PER_HOUR,
    DEFAULT_CATALOG,
    GpuCatalog,
    GpuType,
    parse_gpu_types,
    pydantic_message,
)

# ---------------------------------------------------------------- YAML schema (validated)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NodeSpec(_Strict):
    """One entry of ``nodes:``; ``count`` identical nodes."""

    count: int = Field(default=1, ge=1)
    name: str | None = Field(default=None, description="name prefix of the nodes")
    gpus: dict[str, int] = Field(min_length=1)
    nic_gbps: float | None = Field(default=None, gt=0)
    uplink_gbps: float | None = Field(default=None, gt=0)
    downlink_gbps: float | None = Field(default=None, gt=0)
    rack: str | None = None
    pcie_switches: list[list[int]] = Field(default_factory=list)
    pcie_switch_gbps: float | None = Field(
        default=None, gt=0, description="PCIe switch uplink, GB/s"
    )
    nvlink: list[tuple[int, int]] = Field(default_factory=list)
    switch: str | None = Field(default=None, description="topology switch it attaches to")
    attach: Literal["node", "gpu"] = "node"
    link_gbps: float | None = Field(default=None, gt=0)
    link_delay_us: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _check(self) -> NodeSpec:
        for t, n in self.gpus.items():
            if n < 1:
                raise ValueError(f"gpus.{t}: count must be >= 1, got {n}")
        if self.nic_gbps is None and (self.uplink_gbps is None or self.downlink_gbps is None):
            raise ValueError("give nic_gbps (both directions) or uplink_gbps and downlink_gbps")
        n_gpus = sum(self.gpus.values())
        seen: set[int] = set()
        for group in self.pcie_switches:
            for g in group:
                if not 0 <= g < n_gpus:
                    raise ValueError(f"pcie_switches: GPU index {g} not in 0..{n_gpus - 1}")
                if g in seen:
                    raise ValueError(f"pcie_switches: GPU {g} is under two switches")
                seen.add(g)
        for a, b in self.nvlink:
            if not (0 <= a < n_gpus and 0 <= b < n_gpus) or a == b:
                raise ValueError(
                    f"nvlink: pair ({a}, {b}) must be two GPU indices in 0..{n_gpus - 1}"
                )
        if self.switch is not None and self.link_gbps is None:
            raise ValueError("a node attached to a switch needs link_gbps")
        return self


class SwitchSpec(_Strict):
    name: str = Field(min_length=1)
    latency_us: float = Field(default=0.0, ge=0)


class LinkSpec(_Strict):
    a: str
    b: str
    bw_gbps: float = Field(gt=0)
    delay_us: float = Field(default=0.0, ge=0)
    lanes: int = Field(default=1, ge=1)


class TopologySpec(_Strict):
    switches: list[SwitchSpec] = Field(min_length=1)
    links: list[LinkSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> TopologySpec:
        names = [s.name for s in self.switches]
        dup = [n for n, c in Counter(names).items() if c > 1]
        if dup:
            raise ValueError(f"switch {dup[0]!r} is defined twice")
        known = set(names)
        for i, link in enumerate(self.links):
            for end in (link.a, link.b):
                if end not in known:
                    raise ValueError(f"links[{i}]: unknown switch {end!r}")
        return self


class PricingSpec(_Strict):
    """What one GPU type costs and how many of it a plan may take (``docs/control.md``)."""

    price_per_hour: float | None = Field(
        default=None, gt=0, description="per GPU-hour (default: the catalog's price)"
    )
    cap: int | None = Field(default=None, ge=0, description="at most this many GPUs")


class ClusterSpec(_Strict):
    name: str = Field(min_length=1)
    description: str = ""
    gpu_types: list[dict[str, Any]] = Field(default_factory=list)
    nodes: list[NodeSpec] = Field(min_length=1)
    topology: TopologySpec | None = None
    park_idle_gpus: bool = False  # GPUs without work can be powered down (draw nothing)
    # per GPU type: its price per hour and a cap on how many a plan takes (cost objective)
    pricing: dict[str, PricingSpec] = Field(default_factory=dict)
    # GPU types in order of preference: among plans of equal cost, the earlier types
    preference: list[str] = Field(default_factory=list)


# ---------------------------------------------------------------- expanded cluster


@dataclass(frozen=True)
class Link:
    """A directed link: ``bw_gbps`` Gbit/s per lane, ``delay_s`` propagation (+switching)."""

    name: str
    bw_gbps: float
    delay_s: float = 0.0
    lanes: int = 1
    kind: str = "nic"  # nic | switch | pcie | nvlink

    def transfer_s(self, n_bytes: float) -> float:
        """Time for ``n_bytes`` on one lane, propagation included."""
        return n_bytes * 8 / (self.bw_gbps * 1e9) + self.delay_s


@dataclass(frozen=True)
class Gpu:
    id: str  # "<node>/gpu<i>"
    node: str
    index: int
    type: GpuType


@dataclass(frozen=True)
class Node:
    name: str
    gpus: tuple[Gpu, ...]
    uplink_gbps: float
    downlink_gbps: float
    rack: str | None = None
    pcie_switch_of: tuple[int | None, ...] = ()  # per GPU: index of its PCIe switch
    pcie_switch_gbps: float | None = None
    nvlink_pairs: tuple[tuple[int, int], ...] = ()
    switch: str | None = None
    attach: str = "node"
    link_gbps: float | None = None
    link_delay_s: float = 0.0


@dataclass
class Cluster:
    name: str
    nodes: tuple[Node, ...]
    catalog: GpuCatalog
    switches: dict[str, float] = field(default_factory=dict)  # name -> latency_s
    switch_links: tuple[tuple[str, str, float, float, int], ...] = ()  # a, b, gbps, s, lanes
    description: str = ""
    source: str = "<memory>"
    park_idle_gpus: bool = False  # GPUs that serve nothing are parked: they draw no power
    # per GPU type (catalog name): (price per GPU-hour or None: the catalog's, cap or None)
    pricing: dict[str, tuple[float | None, int | None]] = field(default_factory=dict)
    preference: tuple[str, ...] = ()  # GPU types (catalog names), most preferred first

    def price_per_hour(self, gpu_type: str) -> float:
        """A GPU type's price per GPU-hour (:meth:`prices`)."""
        return self.prices()[self.catalog.get(gpu_type).name]

    def prices(self) -> dict[str, float]:
        """Per GPU type of the cluster its price per GPU-hour: the cluster file's, else the
        catalog's (``core.gpus.CATALOG_PRICE_PER_HOUR``, US dollars). Where no type has
        either, every price is 1.0: the cost objective then counts GPU-hours. Prices for
        some types and none for others would add dollars to GPU-hours: a one-line error."""
        have = sorted({g.type.name for n in self.nodes for g in n.gpus})
        own = {t: p for t, (p, _) in self.pricing.items() if p is not None}
        got = {t: own.get(t, CATALOG_PRICE_PER_HOUR.get(t)) for t in have}
        missing = [t for t, p in got.items() if p is None]
        if len(missing) == len(have):
            return dict.fromkeys(have, 1.0)
        if missing:
            raise ConfigError(
                f"{self.source}: no price for {', '.join(missing)} (the catalog prices "
                f"{', '.join(CATALOG_PRICE_PER_HOUR)}): give pricing.{missing[0]}."
                f"price_per_hour in the cluster file (docs/control.md)"
            )
        return {t: float(p) for t, p in got.items() if p is not None}

    @property
    def priced(self) -> bool:
        """Whether :meth:`prices` are money (US dollars per GPU-hour), not GPU-hours."""
        own = any(p is not None for p, _ in self.pricing.values())
        return own or any(g.type.name in CATALOG_PRICE_PER_HOUR for n in self.nodes for g in n.gpus)

    def usable(self) -> dict[str, int]:
        """GPUs per type a plan may take: the cluster's, at most each type's cap."""
        out = {}
        for t, n in self.gpu_counts().items():
            cap = self.pricing.get(t, (None, None))[1]
            out[t] = n if cap is None else min(n, cap)
        return out

    # ---- inventory
    @cached_property
    def gpus(self) -> tuple[Gpu, ...]:
        return tuple(g for n in self.nodes for g in n.gpus)

    @cached_property
    def _gpu_by_id(self) -> dict[str, Gpu]:
        return {g.id: g for g in self.gpus}

    @cached_property
    def _node_by_name(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    def gpu(self, gpu_id: str) -> Gpu:
        try:
            return self._gpu_by_id[gpu_id]
        except KeyError:
            raise HetserveError(f"cluster {self.name}: no GPU {gpu_id!r}") from None

    def node(self, name: str) -> Node:
        try:
            return self._node_by_name[name]
        except KeyError:
            raise HetserveError(f"cluster {self.name}: no node {name!r}") from None

    def gpu_counts(self) -> dict[str, int]:
        """GPUs per type name, in order of first appearance."""
        return dict(Counter(g.type.name for g in self.gpus))

    def gpu_types(self) -> list[GpuType]:
        seen: dict[str, GpuType] = {}
        for g in self.gpus:
            seen.setdefault(g.type.name, g.type)
        return list(seen.values())

    @property
    def is_switched(self) -> bool:
        return bool(self.switches)

    # ---- links
    @cached_property
    def links(self) -> dict[str, Link]:
        """Every directed link by name."""
        out: dict[str, Link] = {}
        for n in self.nodes:
            out[f"{n.name}:up"] = Link(f"{n.name}:up", n.uplink_gbps)
            out[f"{n.name}:down"] = Link(f"{n.name}:down", n.downlink_gbps)
            for g in n.gpus:
                pcie = g.type.host_gbps * 8
                out[f"{g.id}:pcie"] = Link(f"{g.id}:pcie", pcie, kind="pcie")
            if n.pcie_switch_gbps is not None:
                for s in sorted({s for s in n.pcie_switch_of if s is not None}):
                    nm = f"{n.name}:pcie-switch{s}"
                    out[nm] = Link(nm, n.pcie_switch_gbps * 8, kind="pcie")
            for a, b in n.nvlink_pairs:
                bw = min(n.gpus[a].type.nvlink_gbps or 0, n.gpus[b].type.nvlink_gbps or 0)
                if bw > 0:
                    for x, y in ((a, b), (b, a)):
                        nm = f"{n.name}/gpu{x}->{n.name}/gpu{y}:nvlink"
                        out[nm] = Link(nm, bw * 8, kind="nvlink")
            if n.switch is not None:
                ends = [g.id for g in n.gpus] if n.attach == "gpu" else [n.name]
                for e in ends:
                    for x, y in ((e, n.switch), (n.switch, e)):
                        nm = f"{x}->{y}"
                        # entering a switch adds its switching latency
                        delay = n.link_delay_s + (self.switches[y] if y == n.switch else 0.0)
                        out[nm] = Link(nm, n.link_gbps or 0.0, delay, kind="switch")
        for a, b, gbps, delay_s, lanes in self.switch_links:
            for x, y in ((a, b), (b, a)):
                nm = f"{x}->{y}"
                out[nm] = Link(nm, gbps, delay_s + self.switches[y], lanes, kind="switch")
        return out

    @cached_property
    def _switch_adjacency(self) -> dict[str, list[str]]:
        adj: dict[str, list[str]] = {s: [] for s in self.switches}
        for a, b, *_ in self.switch_links:
            adj[a].append(b)
            adj[b].append(a)
        return {s: sorted(set(v)) for s, v in adj.items()}

    def _switch_route(self, src: str, dst: str) -> list[str]:
        """Shortest switch path by hops; ties broken by switch name (deterministic)."""
        if src == dst:
            return [src]
        prev: dict[str, str] = {src: src}
        queue = deque([src])
        while queue:
            s = queue.popleft()
            for t in self._switch_adjacency[s]:
                if t not in prev:
                    prev[t] = s
                    if t == dst:
                        route = [dst]
                        while route[-1] != src:
                            route.append(prev[route[-1]])
                        return route[::-1]
                    queue.append(t)
        raise HetserveError(f"cluster {self.name}: switches {src!r} and {dst!r} are not connected")

    def transfer_path(self, src_gpu: str, dst_gpu: str) -> list[str]:
        """Names of the directed links a GPU-to-GPU transfer crosses (empty: same device)."""
        a, b = self.gpu(src_gpu), self.gpu(dst_gpu)
        if a.id == b.id:
            return []
        na, nb = self.node(a.node), self.node(b.node)
        if na.switch is None or nb.switch is None:
            if na.name == nb.name:
                nv = f"{a.id}->{b.id}:nvlink"
                return [nv] if nv in self.links else []
            return [f"{na.name}:up", f"{nb.name}:down"]
        if na.name == nb.name and na.attach == "node":
            return []
        ea = a.id if na.attach == "gpu" else na.name
        eb = b.id if nb.attach == "gpu" else nb.name
        route = self._switch_route(na.switch, nb.switch)
        path = [f"{ea}->{route[0]}"]
        path += [f"{x}->{y}" for x, y in itertools.pairwise(route)]
        path.append(f"{route[-1]}->{eb}")
        return path

    def host_path(self, gpu_id: str) -> list[str]:
        """Links a host-to-GPU weight load crosses: the PCIe switch uplink (if any), the GPU's
        own PCIe link."""
        g = self.gpu(gpu_id)
        n = self.node(g.node)
        path = []
        sw = n.pcie_switch_of[g.index] if n.pcie_switch_of else None
        if sw is not None and n.pcie_switch_gbps is not None:
            path.append(f"{n.name}:pcie-switch{sw}")
        path.append(f"{g.id}:pcie")
        return path

    def path_delay_s(self, path: list[str]) -> float:
        return sum(self.links[p].delay_s for p in path)

    def path_bw_gbps(self, path: list[str]) -> float:
        """Bottleneck bandwidth of a path (one lane per link), Gbit/s."""
        return min((self.links[p].bw_gbps for p in path), default=float("inf"))

    def summary(self) -> dict[str, Any]:
        counts = self.gpu_counts()
        return {
            "name": self.name,
            "nodes": len(self.nodes),
            "gpus": sum(counts.values()),
            "gpu_counts": counts,
            "racks": len({n.rack for n in self.nodes if n.rack is not None}),
            "switches": len(self.switches),
            "switch_links": len(self.switch_links),
        }


# ---------------------------------------------------------------- building


def build_cluster(
    spec: ClusterSpec, catalog: GpuCatalog = DEFAULT_CATALOG, source: str = "<memory>"
) -> Cluster:
    """Expand a validated spec into nodes and GPUs; unknown GPU names are errors."""
    if spec.gpu_types:
        catalog = catalog.with_types(parse_gpu_types(spec.gpu_types, source))
    nodes: list[Node] = []
    used: set[str] = set()
    for i, ns in enumerate(spec.nodes):
        types: list[GpuType] = []
        for tname, n in ns.gpus.items():
            try:
                t = catalog.get(tname)
            except HetserveError as e:
                raise ConfigError(f"{source}: nodes[{i}].gpus: {e}") from None
            types += [t] * n
        if ns.switch is not None and ns.switch not in {
            s.name for s in (spec.topology.switches if spec.topology else [])
        }:
            raise ConfigError(
                f"{source}: nodes[{i}].switch: unknown switch {ns.switch!r} "
                f"(define it under topology.switches)"
            )
        prefix = ns.name or f"node{i}-"
        sw_of: list[int | None] = [None] * len(types)
        for s, group in enumerate(ns.pcie_switches):
            for g in group:
                sw_of[g] = s
        for c in range(ns.count):
            name = prefix if (ns.count == 1 and ns.name) else f"{prefix}{c}"
            if name in used:
                raise ConfigError(f"{source}: nodes[{i}]: node name {name!r} is used twice")
            used.add(name)
            # a device is named by what it is: local-cpu's one device is "cpu0", not "gpu0"
            gpus = tuple(
                Gpu(f"{name}/{'cpu' if t.name == 'CPU' else 'gpu'}{k}", name, k, t)
                for k, t in enumerate(types)
            )
            nodes.append(
                Node(
                    name=name,
                    gpus=gpus,
                    uplink_gbps=ns.uplink_gbps or ns.nic_gbps or 0.0,
                    downlink_gbps=ns.downlink_gbps or ns.nic_gbps or 0.0,
                    rack=ns.rack,
                    pcie_switch_of=tuple(sw_of),
                    pcie_switch_gbps=ns.pcie_switch_gbps,
                    nvlink_pairs=tuple(ns.nvlink),
                    switch=ns.switch,
                    attach=ns.attach,
                    link_gbps=ns.link_gbps,
                    link_delay_s=ns.link_delay_us * 1e-6,
                )
            )
    switches: dict[str, float] = {}
    links: list[tuple[str, str, float, float, int]] = []
    if spec.topology is not None:
        switches = {s.name: s.latency_us * 1e-6 for s in spec.topology.switches}
        links = [
            (lk.a, lk.b, lk.bw_gbps, lk.delay_us * 1e-6, lk.lanes) for lk in spec.topology.links
        ]
    pricing: dict[str, tuple[float | None, int | None]] = {}
    have = {g.type.name for n in nodes for g in n.gpus}
    for tname, ps in spec.pricing.items():
        try:
            t = catalog.get(tname).name
        except HetserveError as e:
            raise ConfigError(f"{source}: pricing.{tname}: {e}") from None
        if t not in have:
            raise ConfigError(
                f"{source}: pricing.{tname}: the cluster has no {t} GPUs (it has "
                f"{', '.join(sorted(have))})"
            )
        pricing[t] = (ps.price_per_hour, ps.cap)
    preference = []
    for k, tname in enumerate(spec.preference):
        try:
            preference.append(catalog.get(tname).name)
        except HetserveError as e:
            raise ConfigError(f"{source}: preference[{k}]: {e}") from None
    return Cluster(
        spec.name, tuple(nodes), catalog, switches, tuple(links), spec.description, source,
        spec.park_idle_gpus, pricing, tuple(preference),
    )  # fmt: skip


def parse_cluster(data: Any, source: str, catalog: GpuCatalog = DEFAULT_CATALOG) -> Cluster:
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{source}: expected a mapping with 'name' and 'nodes', got {type(data).__name__}"
        )
    try:
        spec = ClusterSpec(**data)
    except ValidationError as e:
        raise ConfigError(f"{source}: {pydantic_message(e)}") from None
    return build_cluster(spec, catalog, source)


def load_cluster_file(path: str | Path, catalog: GpuCatalog = DEFAULT_CATALOG) -> Cluster:
    return parse_cluster(read_yaml(path, "cluster file"), str(path), catalog)
