# cython: annotation_typing=False
"""The engine kernel's entities (``engine.kernel``): a worker's slot, a dispatched batch,
one route step of it; and the link models (``engine.links``): the lanes the kernel takes
per activation transfer (:class:`LinkTable`) and the host links that the modelled
executor's planned loads and DHA runs share (:class:`HostLinks`). Plain objects with
fixed attributes, which the kernel changes and executors and observers read (an executor
also keeps its own per-step data in ``Task.run``).

This file is plain Python and runs as it is. Where the package was built with Cython
(``setup.py``; ``entities_core_c.pxd`` beside it declares the C types: extension types
with typed attributes, every one readable and writable from Python), the same file is
also compiled as ``hetserve.engine.entities_core_c``, and ``engine.entities`` exports that
one's classes (``HETSERVE_PURE_PYTHON=1`` keeps this file). The compiled kernel
(``engine/kernel_core.py``) and the simulator's compiled recorder read them as C structs.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from types import MethodType
from typing import Any

from hetserve.core.cluster import Cluster
from hetserve.core.errors import HetserveError
from hetserve.scheduling.protocol import Dispatch, RouteStep, WorkerInfo

try:  # (Cython reads ``cython.compiled`` as True in the build it makes of this file)
    import cython
except ImportError:  # (plain Python, without Cython installed)
    from hetserve.core.records import NO_CYTHON as cython
if not cython.compiled:  # (compiled: the heap type its .pxd cimports)
    from hetserve.core.heaps import EventHeap

_NAN = math.nan  # (a C double compiled: ``math.nan`` is a module lookup per Task)


def _doubles(n: int) -> memoryview:
    return memoryview(array("d", [0.0]) * n)


class Route:
    """A route between two workers' GPUs (``LinkTable.send_between``): how many links it
    crosses (``n``), their bottleneck Gbit/s and the path's delay in s, where each link's
    lanes are in the table's buffer of free times (``at[2 q]``: the ``q``-th link's first
    lane's place there, ``at[2 q + 1]``: its number of lanes), and the links' names
    (``path``). Compiled, C numbers: the kernel's transfer between two stages reads the
    route and its links' lanes as numbers in a few lines (as a tuple of the path, a tuple
    of the lanes' lists and each list's float objects it waited on each, and counted
    their references)."""

    def __init__(
        self, path: tuple[str, ...], bw_gbps: float, delay_s: float, at: Sequence[int]
    ) -> None:
        self.n = len(path)
        self.bw_gbps = bw_gbps
        self.delay_s = delay_s
        self.at = memoryview(array("q", at))
        self.path = path


__all__ = [
    "Batch",
    "HostLinks",
    "LinkTable",
    "ObserverCall",
    "ObserverCore",
    "Slot",
    "StageStarter",
    "Task",
    "add_task",
    "new_batch",
    "new_task",
    "starter_of",
    "tasks_of",
]


class Slot:
    """A worker as the kernel sees it: what runs, what waits, whether it is lost."""

    __slots__ = (
        "gpu", "gpu_id", "gpu_name", "id", "index", "info", "lost", "ready", "running", "waiting",
    )  # fmt: skip

    def __init__(self, info: WorkerInfo, index: int) -> None:
        self.id = info.id
        self.index = index  # dense, from 0: where per-worker arrays want an integer
        self.info = info
        self.gpu = info.gpu
        self.gpu_id = info.gpu_id
        # (the GPU type's name, read per stage: a GpuType's attributes are a pydantic
        # model's, each read a Python call of its ``__getattr__`` hook)
        self.gpu_name: str = info.gpu.name
        self.running: Task | None = None
        # the stages whose input arrived, by planned start, then in the order they came
        # (each entry's task its ``a``; compiled, C numbers: no tuple or number per stage)
        self.ready = EventHeap(0)  # (room made at its first push: many are never used)
        self.waiting: list[Task] = []  # deferred until a load on the worker ends
        self.lost = False

    def queued(self) -> list[Task]:
        """The ready tasks, in the order they would start."""
        return [e[3] for e in sorted(self.ready)]  # (entries (start, seq, None, task, None))


@cython.freelist(64)  # (compiled: the memory of freed ones kept for new ones; Python: no-op)
@cython.cclass
class Batch:
    """A dispatched batch: its ``Dispatch`` (``d``), the route step it is at, its tasks:
    the latest (``task``, None where none or once it ended), each with the one before it
    (``Task.prev``; :func:`tasks_of` lists them). A chain, not a list per batch: the
    batch's tasks are read only where it ends early (each marked dead), and a list was
    made, grown and emptied per batch."""

    __slots__ = (
        "_d",
        "_route",
        "alive",
        "cuts",
        "dispatch_s",
        "gone",
        "id",
        "model",
        "nblocks",
        "payload",
        "requests",
        "rows",
        "stage",
        "task",
    )

    def __init__(self, d: Dispatch, now: float, rows: int) -> None:
        bid, model, requests, route = d
        _init_batch(self, d, bid, model, requests, route, now, rows)

    @property
    def route(self) -> tuple[RouteStep, ...]:
        """The route, its steps ``RouteStep``s (a scheduler's compiled core gives the
        kernel plain tuples of their fields, ``_route``: made ``RouteStep``s here, once,
        where Python reads them)."""
        route = self._route
        if route and type(route[0]) is not RouteStep:
            route = route_steps(route)
            self._route = route
        return route

    @property
    def d(self) -> Dispatch:
        """The ``Dispatch`` this batch came from (``_d``: as its scheduler gave it, or a
        plain tuple of its fields from a compiled core; made a ``Dispatch`` here, once)."""
        d = self._d
        if type(d) is not Dispatch:
            d = Dispatch(d[0], d[1], d[2], self.route)
            self._d = d
        return d


def route_steps(route: Any) -> tuple[RouteStep, ...]:
    """A compiled core's plain route (``PolicyCore.plain``: each step a plain tuple of a
    ``RouteStep``'s fields, its worker a name or the kernel's ``Slot`` for it,
    ``PolicyCore.worker_keys``) as the protocol's ``RouteStep``s, each worker its name."""
    out = []
    for step in route:
        stage, worker, at, blocks = step
        if type(worker) is Slot:
            worker = worker.id
        out.append(RouteStep(stage, worker, at, blocks))
    return tuple(out)


def _init_batch(
    b: Batch, d: Dispatch, bid: int, model: str, requests: Any, route: Any, now: float, rows: int
) -> int:
    """A batch's fields (``Batch.__init__``, :func:`new_batch`): ``bid``, ``model``,
    ``requests`` and ``route`` are ``d``'s fields."""
    b._d = d
    b.id = bid
    b.model = model
    b.requests = requests
    b._route = route
    b.rows = rows  # its size: the requests' rows together
    b.stage = 0
    b.dispatch_s = now
    b.alive = True
    b.task = None
    # ids of its requests cancelled while it was under way (None: none): they have ended;
    # the batch runs on for the others, and the kernel leaves them out at its end
    b.gone = None
    # the stage's input: the requests' inputs (or parked parts) for the first step, the
    # previous step's output after it
    b.payload = None
    # its model's blocks and bytes out by block (the kernel's, which sets them as it
    # takes the dispatch: ``Kernel._models``; -1 and None until then)
    b.nblocks = -1
    b.cuts = None
    return 0


def new_batch(
    d: Dispatch, bid: int, model: str, requests: Any, route: Any, now: float, rows: int
) -> Batch:
    """``Batch(d, now, rows)`` from ``d``'s fields as the caller read them; compiled, made
    in C (no call through Python, no field read through the NamedTuple's Python
    ``__getitem__``)."""
    b = Batch.__new__(Batch)
    _init_batch(b, d, bid, model, requests, route, now, rows)
    return b


@cython.freelist(128)  # (compiled: as Batch's)
@cython.cclass
class Task:
    """One route step of a batch on its worker. ``ran``: the executor took it (it did
    not fail or defer it at once). ``run``, ``version`` and ``stop`` are the
    executor's: what it needs to end the step (the modelled executor's block times and
    energy), a counter that makes its pending callbacks stale, and the flag a
    ``Preempt`` raises (a thread checks it at every block boundary). ``prev``: the
    batch's task before this one, once :func:`add_task` made this its latest."""

    __slots__ = (
        "_step",
        "batch",
        "dead",
        "index",
        "prev",
        "ran",
        "run",
        "start_s",
        "stop",
        "version",
        "worker",
        "xfer_end_s",
        "xfer_start_s",
    )

    def __init__(self, batch: Batch, index: int, worker: Slot) -> None:
        _init_task(self, batch, index, worker)

    @property
    def last(self) -> bool:
        """The route's last step."""
        return self.index == len(self.batch._route) - 1

    @property
    def transfer_start_s(self) -> float | None:
        """When its input's transfer began (None: no transfer, or not yet). The kernel
        keeps it as ``xfer_start_s``, a C double where compiled (NaN: none), so that no
        float is made per transfer."""
        x = self.xfer_start_s
        return None if x != x else x

    @transfer_start_s.setter
    def transfer_start_s(self, x: float | None) -> None:
        self.xfer_start_s = _NAN if x is None else x

    @property
    def transfer_end_s(self) -> float | None:
        """When its input arrived (None: no transfer, or not yet; ``xfer_end_s``, as
        :attr:`transfer_start_s`)."""
        x = self.xfer_end_s
        return None if x != x else x

    @transfer_end_s.setter
    def transfer_end_s(self, x: float | None) -> None:
        self.xfer_end_s = _NAN if x is None else x

    @property
    def step(self) -> RouteStep:
        """Its route step, a ``RouteStep`` (``_step``: as the batch's route holds it, a
        plain tuple of its fields where a compiled core made the route: :attr:`Batch.route`
        makes them ``RouteStep``s)."""
        step = self._step
        if type(step) is not RouteStep:
            step = self.batch.route[self.index]
            self._step = step
        return step


def _init_task(t: Task, batch: Batch, index: int, worker: Slot) -> int:
    """A task's fields (``Task.__init__``, :func:`new_task`)."""
    t.batch = batch
    t.index = index
    t._step = batch._route[index]
    t.worker = worker
    t.version = 0
    t.dead = False
    t.ran = False
    t.stop = False
    t.start_s = _NAN
    t.run = None
    t.xfer_start_s = _NAN
    t.xfer_end_s = _NAN
    t.prev = None
    return 0


def add_task(batch: Batch, task: Task) -> None:
    """``task`` is ``batch``'s latest (its stage under way), after the one that was."""
    task.prev = batch.task
    batch.task = task


def tasks_of(batch: Batch) -> list[Task]:
    """``batch``'s tasks, the latest first (none once it ended)."""
    out = []
    t = batch.task
    while t is not None:
        out.append(t)
        t = t.prev
    return out


def new_task(batch: Batch, index: int, worker: Slot) -> Task:
    """``Task(batch, index, worker)``; compiled, made in C (no call through Python)."""
    t = Task.__new__(Task)
    _init_task(t, batch, index, worker)
    return t


class LinkTable:
    """Directed links with lanes, FIFO, held end to end (``engine.links``): each link's
    lanes are free from some time on; a transfer over a path takes a lane on every
    link of it, from when all are free, for its bytes over the bottleneck bandwidth
    plus the path's delay. The lanes' free times are one buffer of C doubles (``free``,
    compiled), each link's lanes side by side from its place there (:meth:`lanes` gives
    them by link name)."""

    def __init__(
        self,
        cluster: Cluster,
        record: bool = False,
        pins: Mapping[tuple[str, str], tuple[str, ...]] | None = None,
    ) -> None:
        """``pins``: (GPU a, GPU b) -> the links transfers from a to b take (a plan's
        pinned cut paths, RAMPA's), instead of the cluster's shortest path."""
        self.cluster = cluster
        self.record = record
        # each link's lanes, made on first use: the first one's place in ``free`` and
        # their number, by link name
        self._lane_at: dict[str, int] = {}
        self._lane_n: dict[str, int] = {}
        self.free = _doubles(16)  # (when each lane is free from; ``n_free`` in use)
        self.n_free = 0
        self._paths: dict[tuple[str, str], tuple[tuple[str, ...], float, float]] = {}
        # ``send_between``'s (the kernel's transfers between stages): by a worker's number,
        # a list by the other's of its :class:`Route`, None where not found yet (lists,
        # not a dict keyed by the pair: found with no hash or key made)
        self._routes: list[list[Route | None]] = []
        self.log: dict[str, list[tuple[float, float]]] = {}
        self.end_s = 0.0  # (``send_between_at``'s last end)
        for (a, b), path in (pins or {}).items():
            self.pin(a, b, path)

    def lanes(self) -> dict[str, list[float]]:
        """Each link's lanes made so far (by a transfer over it): the time each is free
        from, by link name, in the order the links were first used."""
        return {
            name: [self.free[o + i] for i in range(self._lane_n[name])]
            for name, o in self._lane_at.items()
        }

    def _place(self, name: str) -> int:
        """Where link ``name``'s lanes begin in ``free`` (made on first use, each free
        from 0; the buffer doubles when full, the places kept)."""
        o = self._lane_at.get(name, -1)
        if o >= 0:
            return o
        k = self.cluster.links[name].lanes
        o = self.n_free
        if o + k > len(self.free):
            free = _doubles(max(2 * len(self.free), o + k))
            for i in range(o):
                free[i] = self.free[i]
            self.free = free
        for i in range(k):
            self.free[o + i] = 0.0
        self.n_free = o + k
        self._lane_at[name] = o
        self._lane_n[name] = k
        return o

    def path(self, a: str, b: str) -> tuple[tuple[str, ...], float, float]:
        """Links between two GPUs, the bottleneck Gbit/s and the path's delay (cached)."""
        hit = self._paths.get((a, b))
        if hit is None:
            hit = self._paths[(a, b)] = self._find_path(a, b)
        return hit

    def _find_path(self, a: str, b: str) -> tuple[tuple[str, ...], float, float]:
        p = self.cluster.transfer_path(a, b) if a != b else []
        links = self.cluster.links
        bw = min((links[x].bw_gbps for x in p), default=math.inf)
        delay = sum(links[x].delay_s for x in p)
        return (tuple(p), bw, delay)

    def pin(self, a: str, b: str, path: tuple[str, ...]) -> None:
        """Transfers from GPU ``a`` to GPU ``b`` take ``path`` (a placement's chosen route)
        instead of the cluster's shortest one."""
        links = self.cluster.links
        unknown = [x for x in path if x not in links]
        if unknown:
            raise KeyError(f"path {a} -> {b}: unknown links {unknown}")
        bw = min((links[x].bw_gbps for x in path), default=math.inf)
        self._paths[(a, b)] = (tuple(path), bw, sum(links[x].delay_s for x in path))
        self._routes = []  # (``send_between``'s: found again, over the pinned path)

    def transfer(
        self, path: tuple[str, ...], bw_gbps: float, delay_s: float, n_bytes: float, now: float
    ) -> tuple[float, float]:
        """Take a lane on every link of ``path`` for the transfer; returns (start, end)."""
        if not path or n_bytes <= 0:
            return now, now
        chosen = []
        start = now
        for name in path:
            o = self._place(name)
            i = _earliest_lane(self.free, o, self._lane_n[name])
            free_s = self.free[i]
            chosen.append(i)
            if free_s > start:
                start = free_s
        end = start + n_bytes * 8 / (bw_gbps * 1e9) + delay_s
        for i in chosen:
            self.free[i] = end
        if self.record:
            for name in path:
                self.log.setdefault(name, []).append((start, end))
        return start, end

    def send(self, a: str, b: str, n_bytes: float, now: float) -> tuple[float, float]:
        """A transfer of ``n_bytes`` from GPU ``a`` to GPU ``b`` over their path (pinned, or
        the cluster's shortest); returns (start, end)."""
        path, bw, delay = self.path(a, b)
        return self.transfer(path, bw, delay, n_bytes, now)

    def send_between(self, a: Slot, b: Slot, n_bytes: float, now: float) -> tuple[float, float]:
        """:meth:`send` from worker ``a``'s GPU to worker ``b``'s (the same lanes, the same
        times), with their path and its links' lanes found by the workers' numbers (one
        kernel's workers: their numbers are unique) instead of by name."""
        start = self.send_between_at(a, b, n_bytes, now)
        return start, self.end_s

    def send_between_at(self, a: Slot, b: Slot, n_bytes: float, now: float) -> float:
        """:meth:`send_between`'s start; its end in ``end_s`` (compiled, two C doubles:
        no pair made, the kernel's call per stage after the first)."""
        route = None
        rows = self._routes
        if a.index < len(rows):
            row = rows[a.index]
            if b.index < len(row):
                route = row[b.index]
        if route is None:
            route = self._route(a, b)
        n = route.n
        if n == 0 or n_bytes <= 0:
            self.end_s = now
            return now
        if self.record:
            start, self.end_s = self.transfer(
                route.path, route.bw_gbps, route.delay_s, n_bytes, now
            )
            return start
        # ``transfer``: the first lane that frees earliest on each link, the latest of them
        # (``_earliest_lane`` written out: compiled, a typed buffer passed to a function
        # has its count taken and let go, atomically, at each call)
        start = now
        for q in range(n):
            o = route.at[2 * q]
            free_s = self.free[o]
            for j in range(o + 1, o + route.at[2 * q + 1]):
                if self.free[j] < free_s:
                    free_s = self.free[j]
            if free_s > start:
                start = free_s
        end = start + n_bytes * 8 / (route.bw_gbps * 1e9) + route.delay_s
        for q in range(n):  # (each link's earliest again: a link twice on a path takes two)
            o = route.at[2 * q]
            i = o
            free_s = self.free[o]
            for j in range(o + 1, o + route.at[2 * q + 1]):
                if self.free[j] < free_s:
                    free_s = self.free[j]
                    i = j
            self.free[i] = end
        self.end_s = end
        return start

    def _route(self, a: Slot, b: Slot) -> Route:
        """The path from worker ``a``'s GPU to ``b``'s, its bottleneck Gbit/s, its delay
        and its links' lanes, found and kept for :meth:`send_between`."""
        path, bw, delay = self.path(a.gpu_id, b.gpu_id)
        at = []
        for name in path:
            at.append(self._place(name))
            at.append(self._lane_n[name])
        route = Route(path, bw, delay, at)
        rows = self._routes
        while len(rows) <= a.index:
            rows.append([])
        row = rows[a.index]
        while len(row) <= b.index:
            row.append(None)
        row[b.index] = route
        return route

    def gather(
        self, sources: Iterable[tuple[str, int]], dst: str, per_request_bytes: float, now: float
    ) -> tuple[float, float]:
        """A continued batch's input (protocol rule 4): from each (GPU, number of parked
        requests) of ``sources`` (one per worker they are parked on) a transfer of their
        activations to GPU ``dst``; returns (first start, last end), both ``now`` when
        nothing moves."""
        t0, t1 = math.inf, now
        for src, k in sources:
            s0, s1 = self.send(src, dst, per_request_bytes * k, now)
            t0, t1 = min(t0, s0), max(t1, s1)
        return min(t0, t1), t1


def _most(busy: list[int], path: tuple[int, ...]) -> int:
    """The most loads over any link of ``path`` (not empty: a host path has the GPU's own
    link at least)."""
    most = busy[path[0]]
    for x in path:
        if busy[x] > most:
            most = busy[x]
    return most


def _users(busy: list[int], dha: list[int], path: tuple[int, ...], own: tuple[int, ...]) -> int:
    """The most users of any link of ``path``: loads and DHA runs, less the links in
    ``own`` (a run's own model's load: once per time it holds each)."""
    users = 0
    for x in path:
        u = busy[x] + dha[x]
        for y in own:
            if y == x:
                u -= 1
        if u > users:
            users = u
    return users


def _earliest_lane(free: Any, o: int, k: int) -> int:
    """The place in ``free`` of the first of a link's ``k`` lanes (from place ``o``)
    that frees earliest (``min`` and ``index``, written out: a C loop compiled)."""
    free_s = free[o]
    i = o
    for j in range(o + 1, o + k):
        v = free[j]
        if v < free_s:
            free_s = v
            i = j
    return i


class HostLinks:
    """Host links in use by planned loads (shared by the simulator and the emulated
    runtime): which GPUs' links a load takes (the worker's, and for parallel
    transmission GPUs of the same node under other PCIe switches joined to it by NVLink,
    the least busy first, then by index) and the factor its load times are multiplied by
    (the number of loads on the busiest link it crosses, itself included).

    Links are numbered as first met (``names``: their names by number): a path is a tuple
    of numbers, and the counts per link are lists indexed by them."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.names: list[str] = []  # the links met so far, by number
        self._ids: dict[str, int] = {}
        self.busy: list[int] = []  # loads over each link
        self._paths: dict[str, tuple[int, ...]] = {}
        self.dha_busy: list[int] = []  # DHA runs reading over each link
        # DHA runs by when their reads end (``core.heaps.EventHeap``: each one's path as its
        # first argument; the order of runs that end together does not matter)
        self._until = EventHeap()
        self._cands: dict[str, list[tuple[str, int, object, tuple[int, ...]]]] = {}
        self._switch: dict[str, object] = {}

    def expire(self, now: float) -> None:
        """Forget the DHA runs whose reads have ended by ``now``."""
        until, dha = self._until, self.dha_busy
        while len(until) and until.first_s() <= now + 1e-12:
            until.pop_into()
            for x in until.a:
                dha[x] -= 1
        until.a = None

    def dha_factor(
        self, gpu_id: str, now: float, own: tuple[int, ...] = ()
    ) -> tuple[float, tuple[int, ...]]:
        """The factor a DHA run starting ``now`` on ``gpu_id`` takes (users on the busiest
        link of its host path, itself included; ``own``: links held by its own model's
        cold load, not counted) and the path."""
        if len(self._until):
            self.expire(now)
        path = self.path(gpu_id)
        return float(_users(self.busy, self.dha_busy, path, own) + 1), path

    def dha_run(self, gpu_id: str, now: float, dha_s: float, own: tuple[int, ...] = ()) -> float:
        """A run on ``gpu_id`` that reads host memory for ``dha_s`` seconds when alone
        starts ``now``: its factor (``dha_factor``); it holds its host path for as long as
        it reads, ``factor * dha_s`` (``hold_until``)."""
        if len(self._until):  # (``dha_factor``, without its tuple)
            self.expire(now)
        path = self.path(gpu_id)
        f = float(_users(self.busy, self.dha_busy, path, own) + 1)
        self.hold_until(path, now + f * dha_s)
        return f

    def hold_until(self, path: tuple[int, ...], end_s: float) -> None:
        """A DHA run reads over ``path`` until ``end_s``."""
        dha = self.dha_busy
        for x in path:
            dha[x] += 1
        self._until.push(end_s, None, path, None)

    def path(self, gpu_id: str) -> tuple[int, ...]:
        """The links of ``gpu_id``'s host path, by number (``names``)."""
        p = self._paths.get(gpu_id)
        if p is None:
            ids = []
            for name in self.cluster.host_path(gpu_id):
                i = self._ids.get(name)
                if i is None:
                    i = self._ids[name] = len(self.names)
                    self.names.append(name)
                    self.busy.append(0)
                    self.dha_busy.append(0)
                ids.append(i)
            p = self._paths[gpu_id] = tuple(ids)
        return p

    def take(
        self, gpu_id: str, n_parts: int, model: str, now: float | None = None
    ) -> tuple[list[float], tuple[int, ...]]:
        """A planned load in ``n_parts`` parts on ``gpu_id`` (``now``: when, to forget
        the DHA runs over by then): each part's load-time factor, and the links it holds
        (by number) until :meth:`release`."""
        if now is not None and len(self._until):
            self.expire(now)
        busy = self.busy
        path = self.path(gpu_id)
        # each part's factor from the loads already there (the worker's part first), then
        # every link crossed counted once per part that crosses it
        scale = [float(_most(busy, path) + 1)]
        c = self._secondary(gpu_id) if n_parts == 2 else None
        if c is not None:  # (the common case: one other GPU, its path its candidate's)
            p = c[3]
            scale.append(float(_most(busy, p) + 1))
            held = path + p
        elif n_parts > 1:
            links = list(path)
            for g in self.secondaries(gpu_id, n_parts - 1, model):
                p = self.path(g)
                scale.append(float(_most(busy, p) + 1))
                links.extend(p)
            held = tuple(links)
        else:
            held = path
        for x in held:
            busy[x] += 1
        return scale, held

    def release(self, held: tuple[int, ...]) -> None:
        """A load's links (``take``'s) are free of it."""
        busy = self.busy
        for x in held:
            busy[x] -= 1

    def secondaries(self, gpu_id: str, k: int, model: str) -> list[str]:
        if k <= 0:
            return []
        cands = self._cands.get(gpu_id)
        if cands is None:
            cands = self._cands[gpu_id] = self._candidates(gpu_id)
        busy = self.busy
        if k == 1:  # (the common case, two parts: :meth:`_secondary`)
            best = self._secondary(gpu_id)
            if best is not None:
                return [best[0]]
        # by the loads on the busiest link of each one's host path, then by index (a node's
        # GPUs have distinct indexes: the order is total, and the switches never compared)
        ranked = []
        for c in cands:
            ranked.append((_most(busy, c[3]), c[1], c))
        ranked.sort()
        seen_switch: set[object] = {self._switch[gpu_id]}
        out = []
        for e in ranked:
            c = e[2]
            s_, gid = c[2], c[0]
            if s_ in seen_switch and s_ is not None:
                continue
            seen_switch.add(s_)
            out.append(gid)
            if len(out) == k:
                return out
        raise HetserveError(
            f"load plan of {model} loads over {k + 1} GPUs' host links; GPU {gpu_id}'s "
            f"node offers {len(out) + 1} (GPUs under other PCIe switches joined by NVLink)"
        )

    def _secondary(self, gpu_id: str) -> tuple[str, int, object, tuple[int, ...]] | None:
        """The one other GPU whose links a load in two parts takes: the first in
        :meth:`secondaries`' order, found without ranking them all; its candidate ``(id,
        index, switch, host path)``, or None where there is none."""
        cands = self._cands.get(gpu_id)
        if cands is None:
            cands = self._cands[gpu_id] = self._candidates(gpu_id)
        busy = self.busy
        own = self._switch[gpu_id]
        best = None
        best_m = 0
        best_i = 0
        for c in cands:
            s_ = c[2]
            if s_ is not None and s_ == own:
                continue
            m = _most(busy, c[3])
            i = c[1]
            if best is None or m < best_m or (m == best_m and i < best_i):
                best = c
                best_m = m
                best_i = i
        return best

    def _candidates(self, gpu_id: str) -> list[tuple[str, int, object, tuple[int, ...]]]:
        """The GPUs that can carry a part of a load for ``gpu_id``: of its node, under
        another PCIe switch (or none), joined to it by NVLink; (id, index, switch, host
        path) each."""
        g = self.cluster.gpu(gpu_id)
        node = self.cluster.node(g.node)
        sw = node.pcie_switch_of
        mine = sw[g.index] if sw else None
        self._switch[gpu_id] = mine
        pairs = {frozenset(p) for p in node.nvlink_pairs}
        return [
            (o.id, o.index, sw[o.index] if sw else ("own", o.index), self.path(o.id))
            for o in node.gpus
            if o.index != g.index
            and (not sw or sw[o.index] is None or sw[o.index] != mine)
            and frozenset((g.index, o.index)) in pairs
        ]  # fmt: skip


# ---------------------------------------------------------------------- observers
class ObserverCore:
    """An observer (``engine.executor.Observer``) whose per-event methods the compiled
    kernel calls as C methods, with C arguments: the simulator's ledger
    (``sim/recorder_core.py``) is one. A subclass's Python method, or a method replaced
    on an instance, is still the one called (the compiled method looks for those first,
    as Cython's ``cpdef`` methods do). Every method a no-op here (``Observer``'s
    docstrings say what each is told)."""

    def dispatched(self, batch: Batch, first_block: int, now: float) -> None:
        """``Observer.dispatched``."""

    def stage_ended(self, task: Task, now: float, status: str, blocks_done: int) -> None:
        """``Observer.stage_ended``."""

    def ended(
        self,
        requests: Sequence[Any],
        outcomes: Sequence[int] | None,
        reason: str,
        now: float,
        outputs: Sequence[Any] | None,
    ) -> None:
        """``Observer.ended``."""


class StageStarter:
    """An executor's stage start that the compiled kernel calls as a C method, with C
    arguments (``Executor.start``): the modelled executor's (``engine/modelled_core.py``,
    ``ModelledStart``) is one. The kernel takes it where the executor's ``start`` is its
    bound method (:func:`starter_of`); any other start is called through Python. A
    subclass's Python method is still the one called (as :class:`ObserverCore`'s)."""

    def start(self, task: Task, now: float) -> None:
        """``Executor.start``."""
        raise NotImplementedError


def starter_of(executor: Any) -> StageStarter | None:
    """The :class:`StageStarter` whose method ``executor.start`` is (as bound by the
    executor), or None."""
    fn = executor.start
    if type(fn) is not MethodType:
        return None
    starter = fn.__self__
    if not isinstance(starter, StageStarter) or fn != starter.start:
        return None
    return starter


class ObserverCall(ObserverCore):
    """Any other observer, as an :class:`ObserverCore`: each call goes on to its method
    (the kernel holds its observer as one or the other)."""

    def __init__(self, observer: Any) -> None:
        self.observer = observer

    def dispatched(self, batch: Batch, first_block: int, now: float) -> None:
        """``Observer.dispatched``, on to the observer's."""
        self.observer.dispatched(batch, first_block, now)

    def stage_ended(self, task: Task, now: float, status: str, blocks_done: int) -> None:
        """``Observer.stage_ended``, on to the observer's."""
        self.observer.stage_ended(task, now, status, blocks_done)

    def ended(
        self,
        requests: Sequence[Any],
        outcomes: Sequence[int] | None,
        reason: str,
        now: float,
        outputs: Sequence[Any] | None,
    ) -> None:
        """``Observer.ended``, on to the observer's."""
        self.observer.ended(requests, outcomes, reason, now, outputs)
