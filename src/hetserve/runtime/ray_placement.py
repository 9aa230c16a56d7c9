"""Workers on GPUs of their planned type, by Ray's own mechanisms, and checked.

Each planned GPU that holds worker slots becomes one *bundle* ``{"GPU": 1}`` of a Ray
placement group; the planned GPUs of one planned node form one group with the
``STRICT_PACK`` strategy (they land on one node, as the plan's links assume). Each bundle
carries a label selector on Ray's ``ray.io/node-id`` label: the node of that name where the
plan's cluster is the discovered one (``hetserve cluster discover`` names nodes by address
and node id), else every node that discovery (``runtime.discovery``) found with GPUs of
the bundle's type. A worker slot is an actor in
its GPU's bundle asking for ``1/share`` of a GPU's half, so the slices of one planned GPU
share the one physical GPU Ray reserved for the bundle. (Half: while a plan switches, the
old plan's slices of a GPU and the new plan's, of another share, are actors at once; the
bundle reserves the whole GPU for this job either way, so nothing else can take the other
half.) A switch that brings GPUs reserves them (``reserve``); one that leaves GPUs unused
gives their groups back to Ray (``release``).

Why placement groups with label selectors (Ray 2.60): a bundle reserves a whole GPU, so
the slices of one planned GPU cannot be spread over two GPUs (per-actor ``num_gpus``
alone lets Ray put each slice where it likes); the selector names nodes by what discovery
read, so it binds exact types where Ray's ``accelerator_type:<T>`` resources are coarse
(Ray calls both A100s ``A100`` and both V100s ``V100``), and it works alike for nodes
whose type comes from NVML, Ray's resource or its label. Ray does the placing; hetserve
only says what each bundle needs.

At start-up each actor reports where it really is (node, Ray's GPU index, the UUID of the
device CUDA computes on and the driver's name for it, where a driver answers); :func:`verify`
finds that GPU among the discovered ones by UUID (by index without a driver) and compares
it with the plan; a mismatch is an error, not a warning. Actors run with
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (:data:`ACTOR_ENV`), so that Ray's GPU ids and NVML's
indices agree on a node with mixed GPUs.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from hetserve.core.errors import HetserveError
from hetserve.runtime.discovery import NODE_ID_LABEL, TYPE_RESOURCE, Discovered, gpu_type

# how long Ray may take to reserve the plan's GPUs before it is an error
RESERVE_TIMEOUT_S = 60.0
# set in every GPU actor: CUDA numbers devices by PCI bus, as NVML does (its default,
# fastest first, can put Ray's GPU id 0 on NVML's GPU 1 on a node with two GPU types)
ACTOR_ENV = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
# with it, Ray leaves CUDA_VISIBLE_DEVICES as the actor's environment sets it: an actor
# whose planned GPU has a known UUID sees that GPU alone (``planned_uuid``)
NOSET_VISIBLE = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class WorkerPlace:
    """Where a worker's actor really is (what it reported at start-up)."""

    node_id: str
    node_address: str
    gpu_index: int | None  # Ray's GPU id on the node (None: a CPU worker, or one pinned by UUID)
    gpu_name: str | None  # as the driver says it (None: no driver, e.g. an emulated node)
    pid: int
    # the UUID of the device the actor computes on, as CUDA sees it (None: no CUDA): what
    # identifies the GPU, where indices may differ (CUDA's order against NVML's)
    gpu_uuid: str | None = None
    # the GPU type of the ``hetserve_gpu:<T>`` resource Ray gave the actor (None: none)
    typed_as: str | None = None
    # the actor's CUDA_DEVICE_ORDER (``PCI_BUS_ID`` for every GPU actor hetserve starts)
    device_order: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def where_am_i() -> dict[str, Any]:
    """Called inside an actor: its node, GPU index and the driver's name for that GPU."""
    import os

    import ray

    ctx = ray.get_runtime_context()
    ids = ray.get_gpu_ids()
    # Ray's id, or (an actor pinned to its GPU by UUID: ``planned_uuid``) that UUID
    index = int(ids[0]) if ids and str(ids[0]).isdigit() else None
    name = uuid = None
    if ids:
        uuid = cuda_uuid()
        try:
            import pynvml

            pynvml.nvmlInit()
            try:  # the driver's name of the very device CUDA computes on, where known
                h = (pynvml.nvmlDeviceGetHandleByUUID(uuid) if uuid
                     else pynvml.nvmlDeviceGetHandleByIndex(index))  # fmt: skip
                raw = pynvml.nvmlDeviceGetName(h)
                name = raw.decode() if isinstance(raw, bytes) else str(raw)
            finally:
                pynvml.nvmlShutdown()
        except Exception:  # no driver (an emulated node) or no nvidia-ml-py: Ray's word only
            name = None
    typed = [k[len(TYPE_RESOURCE) :] for k in ctx.get_assigned_resources()
             if k.startswith(TYPE_RESOURCE)]  # fmt: skip
    return {
        "node_id": ctx.get_node_id(),
        "node_address": ray.util.get_node_ip_address(),
        "gpu_index": index,
        "gpu_name": name,
        "pid": os.getpid(),
        "gpu_uuid": uuid,
        "typed_as": typed[0] if len(typed) == 1 else None,
        "device_order": os.environ.get("CUDA_DEVICE_ORDER"),
    }


def cuda_uuid() -> str | None:
    """The UUID (``GPU-...``, NVML's form) of CUDA's current device in this process, or
    None where there is no CUDA device (an emulated node, a CPU worker)."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        u = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
    except Exception:
        return None
    return u if u.startswith("GPU-") else f"GPU-{u}"


class RayPlacement:
    """The placement groups of a plan's GPU workers (module docstring). ``reserve`` adds
    the groups of more GPU workers (a new plan's), ``release`` gives back the groups of
    GPUs no worker uses any more."""

    def __init__(self, view: Any, found: Discovered | None) -> None:
        self.found = found
        self.cluster = view.cluster
        self.groups: list[Any] = []
        self._strategy: dict[str, Any] = {}
        self._gpus_of: dict[int, set[str]] = {}  # id(group) -> the planned GPUs in it
        self._bundle_of: dict[str, tuple[Any, int]] = {}  # planned GPU -> (group, bundle)
        self._names: dict[str, int] = {}  # group names used, and how often
        self._typed: dict[str, str] = {}  # planned GPU -> its type's resource, where asked
        self.reserve(list(view.workers.values()))

    def reserve(self, workers: list[Any]) -> None:
        """Reserve the GPUs of ``workers`` not reserved yet and wait until Ray has
        (``RESERVE_TIMEOUT_S``; a one-line error after it, with nothing left reserved
        by this call). A GPU whose node the plan's cluster names (the discovered one)
        gets a group of its own, pinned to that node (so that it can be given back
        alone); the GPUs of a node named by type only share one ``STRICT_PACK`` group,
        so that they land on one node."""
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        gpu_workers = [w for w in workers if w.gpu.name != "CPU"]
        if not gpu_workers:
            return
        found = self.found
        if found is None:
            raise HetserveError("GPU workers need the discovered cluster to be placed")
        check_shares(gpu_workers)
        for w in gpu_workers:  # a GPU reserved already: its slices join its bundle
            if w.gpu_id in self._bundle_of and w.id not in self._strategy:
                pg, i = self._bundle_of[w.gpu_id]
                self._strategy[w.id] = PlacementGroupSchedulingStrategy(
                    pg, placement_group_bundle_index=i
                )
        todo = [w for w in gpu_workers if w.gpu_id not in self._bundle_of]
        groups: dict[tuple[str, str], dict[str, list[Any]]] = {}
        for w in todo:
            same = found.node(w.node)  # the plan was made on the discovered cluster's YAML
            key = (w.node, w.gpu_id) if same is not None else (w.node, "")
            groups.setdefault(key, {}).setdefault(w.gpu_id, []).append(w)
        pending = []
        for (node, gid), gpus in groups.items():
            bundles, selectors = [], []
            same = found.node(node)
            for ws in gpus.values():
                ids = found.node_ids_with(ws[0].gpu.name)
                if same is not None and same.node_id in ids:
                    ids = [same.node_id]  # that very node
                if not ids:
                    raise HetserveError(
                        f"the plan puts {ws[0].gpu.name} workers on {node}, but the cluster "
                        f"at {found.address} has no {ws[0].gpu.name} node"
                    )
                bundle = {"GPU": 1.0}
                if all((n := found.by_id(i)) is not None and n.typed for i in ids):
                    # nodes of several types: Ray is asked for this type's GPU there
                    bundle[TYPE_RESOURCE + ws[0].gpu.name] = 1.0
                    self._typed[ws[0].gpu_id] = TYPE_RESOURCE + ws[0].gpu.name
                bundles.append(bundle)
                selectors.append(
                    {NODE_ID_LABEL: ids[0] if len(ids) == 1 else f"in({','.join(ids)})"}
                )
            # (a name once per run: Ray frees a removed group's name only later)
            name = f"hetserve:{gid or node}"
            self._names[name] = self._names.get(name, 0) + 1
            if self._names[name] > 1:
                name += f"#{self._names[name]}"
            pg = placement_group(
                bundles, strategy="STRICT_PACK", bundle_label_selector=selectors, name=name
            )
            self.groups.append(pg)
            self._gpus_of[id(pg)] = set(gpus)
            pending.append((node, gpus, pg))
            for i, (gid, ws) in enumerate(gpus.items()):
                self._bundle_of[gid] = (pg, i)
                for w in ws:
                    self._strategy[w.id] = PlacementGroupSchedulingStrategy(
                        pg, placement_group_bundle_index=i
                    )
        made = [pg for _, _, pg in pending]
        for node, gpus, pg in pending:
            try:
                ray.get(pg.ready(), timeout=RESERVE_TIMEOUT_S)
            except ray.exceptions.GetTimeoutError:
                need = Counter(ws[0].gpu.name for ws in gpus.values())
                self._drop(made)
                raise HetserveError(
                    f"Ray could not reserve {', '.join(f'{n}x {t}' for t, n in need.items())} "
                    f"on one node for the plan's {node} within {RESERVE_TIMEOUT_S:.0f} s (the "
                    f"cluster has {_shapes(found)}; are other jobs holding them?)"
                ) from None

    def release(self, gpu_ids: set[str], workers: list[str]) -> list[str]:
        """``workers`` are gone and the planned GPUs ``gpu_ids`` hold no worker any more:
        the groups all of whose GPUs are unused are removed (their GPUs go back to Ray).
        Returns the planned GPUs given back."""
        for w in workers:
            self._strategy.pop(w, None)
        done = []
        for pg in list(self.groups):
            gids = self._gpus_of.get(id(pg), set())
            if gids and gids <= gpu_ids:
                self._drop([pg])
                done += sorted(gids)
        return done

    def _drop(self, groups: list[Any]) -> None:
        from ray.util.placement_group import remove_placement_group

        for pg in groups:
            with contextlib.suppress(Exception):  # (a cluster going away frees them itself)
                remove_placement_group(pg)
            for gid in self._gpus_of.pop(id(pg), set()):
                self._bundle_of.pop(gid, None)
            if pg in self.groups:
                self.groups.remove(pg)
        gone = {id(pg) for pg in groups}
        for w in [w for w, st in self._strategy.items() if id(st.placement_group) in gone]:
            del self._strategy[w]

    def options(self, worker: Any) -> dict[str, Any]:
        """The actor options of one worker slot."""
        if worker.gpu.name == "CPU":
            return {"num_cpus": 0}
        env = dict(ACTOR_ENV)
        uuid = planned_uuid(self.cluster, self.found, worker.gpu_id)
        if uuid is not None:  # the very GPU the plan names, whichever id Ray gives
            env |= {"CUDA_VISIBLE_DEVICES": uuid, NOSET_VISIBLE: "1"}
        out = {
            "num_cpus": 0,
            "num_gpus": 0.5 / worker.share,  # (half: a switch's new slices fit beside)
            "scheduling_strategy": self._strategy[worker.id],
            "runtime_env": {"env_vars": env},
        }
        typed = self._typed.get(worker.gpu_id)
        if typed is not None:  # (so that the actor can say which type Ray gave it)
            out["resources"] = {typed: 0.5 / worker.share}
        return out

    def bundles_to_node(self) -> dict[str, str]:
        """Per GPU worker, the node Ray reserved its bundle on (Ray's own state)."""
        import ray

        out = {}
        for wid, st in self._strategy.items():
            table = ray.util.placement_group_table(st.placement_group)
            out[wid] = table["bundles_to_node_id"][st.placement_group_bundle_index]
        return out

    def remove(self) -> None:
        self._drop(list(self.groups))


def _shapes(found: Discovered) -> str:
    c = Counter(n.shape for n in found.nodes)
    return ", ".join(f"{k} node(s) of {s}" for s, k in c.items())


def check_shares(workers: list[Any]) -> None:
    """The slices on one planned GPU take at most the whole GPU (1/share each)."""
    per_gpu: dict[str, float] = {}
    for w in workers:
        if w.share < 1:
            raise HetserveError(f"worker {w.id}: share {w.share} does not divide a GPU")
        per_gpu[w.gpu_id] = per_gpu.get(w.gpu_id, 0.0) + 1.0 / w.share
    for gid, used in per_gpu.items():
        if used > 1.0 + 1e-9:
            raise HetserveError(
                f"the plan's slices on {gid} take {used:.3g} GPUs: the shares of one GPU's "
                f"workers must add up to at most one GPU (1/share each)"
            )


def planned_uuid(cluster: Any, found: Discovered | None, gpu_id: str) -> str | None:
    """The UUID of the physical GPU a planned GPU is, where the plan was made on the
    discovered cluster (its nodes named as discovery named them) and NVML told the UUIDs:
    the k-th planned GPU of a type on a node is the k-th of that type in NVML's order
    there. None otherwise (a node named by type only, an emulated node)."""
    if found is None:
        return None
    try:
        gpu = cluster.gpu(gpu_id)
    except HetserveError:
        return None
    node = found.node(gpu.node)
    if node is None:
        return None
    planned = [g.id for g in cluster.node(gpu.node).gpus if g.type.name == gpu.type.name]
    real = [g for g in sorted(node.gpus, key=lambda g: g.index) if g.type == gpu.type.name]
    if len(real) != len(planned) or not all(g.uuid for g in real):
        return None
    return real[planned.index(gpu_id)].uuid


def _the_gpu(gpus: Any, p: WorkerPlace) -> Any:
    """The discovered GPU a worker runs on: by UUID where both sides know it (indices can
    differ: CUDA orders devices fastest first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``,
    NVML by PCI bus), else by Ray's index (nodes without a driver: emulated ones)."""
    if p.gpu_uuid and any(g.uuid for g in gpus):
        return next((g for g in gpus if g.uuid == p.gpu_uuid), None)
    return next((g for g in gpus if g.index == p.gpu_index), None)


def verify(view: Any, found: Discovered | None, places: dict[str, WorkerPlace]) -> None:
    """Every worker is where the plan wants it: on a node of the cluster with a GPU of
    its planned type (the GPU found by its UUID where CUDA and NVML tell it, else by Ray's
    GPU id; where a driver answers, its name checked too);
    the slices of one planned GPU on one physical GPU, different planned GPUs on different
    ones. A mismatch is a one-line error naming the worker, the plan and what it found."""
    nodes = {n.node_id: n for n in found.nodes} if found is not None else {}
    phys: dict[str, tuple[str, int | None]] = {}
    for wid, p in places.items():
        w = view.workers[wid]
        planned = w.gpu.name
        if planned == "CPU":
            continue
        at = f"worker {wid} (planned on {planned}) runs on node {p.node_id[:8]}"
        node = nodes.get(p.node_id)
        if node is None or (p.gpu_index is None and p.gpu_uuid is None):
            raise HetserveError(f"{at}, GPU {p.gpu_index}: not a GPU node discovery found")
        if p.device_order != ACTOR_ENV["CUDA_DEVICE_ORDER"]:
            raise HetserveError(
                f"{at}: its CUDA_DEVICE_ORDER is {p.device_order!r}, not PCI_BUS_ID (Ray's "
                f"GPU ids would not be NVML's; is a runtime_env overriding it?)"
            )
        if p.typed_as is not None and p.typed_as != planned:
            raise HetserveError(
                f"{at} ({node.name}): Ray gave it {TYPE_RESOURCE}{p.typed_as}, not "
                f"{TYPE_RESOURCE}{planned}"
            )
        if node.typed and not any(g.uuid for g in node.gpus):
            # (no driver: no index is any card's; the type is the resource Ray gave)
            if p.typed_as is None:
                raise HetserveError(
                    f"{at} ({node.name}): the node declares {TYPE_RESOURCE}<T> resources "
                    f"but the actor holds none of them"
                )
            gpu = next((g for g in node.gpus if g.type == planned), None)
        else:
            gpu = _the_gpu(node.gpus, p)
        if gpu is None or gpu.type != planned:
            got = gpu.type if gpu is not None else "no such GPU"
            which = p.gpu_uuid or f"GPU {p.gpu_index}"
            raise HetserveError(f"{at} ({node.name}), {which}: a {got}")
        if p.gpu_name is not None:
            t = gpu_type(p.gpu_name, found.catalog if found else view.cluster.catalog, at)
            if t.name != planned:
                raise HetserveError(f"{at}, GPU {p.gpu_index}: the driver says {p.gpu_name!r}")
        here = (p.node_id, p.gpu_uuid or p.gpu_index)
        phys.setdefault(w.gpu_id, here)
        if phys[w.gpu_id] != here:
            raise HetserveError(
                f"the slices of the plan's {w.gpu_id} run on two GPUs: {phys[w.gpu_id]} and {here}"
            )
    owners = Counter(phys.values())
    shared = [k for k, n in owners.items() if n > 1]
    if shared:
        gids = sorted(g for g, k in phys.items() if k == shared[0])
        raise HetserveError(
            f"the plan's {' and '.join(gids)} run on one physical GPU (node "
            f"{shared[0][0][:8]}, GPU {shared[0][1]})"
        )
