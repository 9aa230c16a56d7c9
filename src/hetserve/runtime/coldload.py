"""Real cold starts of a zoo model, following its load plan (DeepPlan section 4.3.4).

A :class:`ColdModel` keeps every weight of one model instance in host memory (pinned on
CUDA) and moves it onto the device by the plan:

- the *load stream* copies the loaded rows of part 0 in plan order, recording an event
  after each row; on PT, each secondary GPU copies its part's rows and a *migration
  stream* forwards each to the primary after its copy's event, recording the row's event;
- DHA rows are never copied: their modules get host aliases of the pinned buffers
  (``profiling.layers.host_alias``: zero-copy, read over PCIe by the kernels);
- a forward pre-hook on every leaf module makes the execution stream wait for its row's
  event, so a batch may start while later rows still arrive;
- ``evict`` drops the device copies (the module's weights become empty tensors again).

Rows and their weights are those of the layer table: the caller passes them
(``profiling.layers.leaf_rows``; the runtime sits below the zoo and the profiler in the
layering), so row ``i`` of the plan is row ``i`` of ``layers.csv``. Likewise the CUDA
backend takes its host-alias function (``profiling.layers.host_alias``).

The ordering logic runs on the CPU too (:class:`ThreadBackend`: a loader thread copies
each row into fresh tensors and sets a ``threading.Event``; the hooks wait on it), which is
how it is tested without a GPU. :class:`CudaBackend` is the same on CUDA streams and
events, written against ``runtime.streams``: with ``RecordingOps`` in place of
``CudaOps`` the very same code runs on the CPU and every stream, event and allocator
operation is checked for ordering hazards (tests/runtime/test_streams.py). Status: the
CUDA backend has run on an NVIDIA H200 (its ``skipif(no CUDA)`` tests pass there, outputs
bit-equal to the warm model's; docs/benchmarks.md, "On a real GPU"); PT, which needs two
GPUs, has not.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from hetserve.core.coldstart import DHA, LoadPlan
from hetserve.core.errors import HetserveError


class ThreadBackend:
    """CPU: a thread copies rows in order; ``threading.Event`` per row."""

    name = "cpu"

    def __init__(self, delay_s_per_byte: float = 0.0) -> None:
        self.delay = delay_s_per_byte  # slow the copies down (tests of the overlap)

    def stage_host(self, t: torch.Tensor) -> torch.Tensor:
        return t.detach().clone()

    def alias(self, host: torch.Tensor) -> torch.Tensor:
        return host  # on the CPU the host copy is what the kernels read

    def start(
        self,
        rows: Sequence[tuple[int, list[tuple[torch.Tensor, torch.Tensor]]]],
        part_of: Sequence[int],
        on_row: Callable[[int], None],
        on_done: Callable[[], None],
    ) -> dict[int, Any]:
        events = {i: threading.Event() for i, _ in rows}

        def run() -> None:
            for i, pairs in rows:
                nbytes = 0
                for dst, src in pairs:
                    dst.copy_(src)
                    nbytes += src.nbytes
                if self.delay:
                    time.sleep(self.delay * nbytes)
                on_row(i)  # (logged before any waiter wakes)
                events[i].set()
            on_done()

        threading.Thread(target=run, name="hetserve-load", daemon=True).start()
        return events

    def wait(self, event: Any) -> None:
        event.wait()

    def empty(self, like: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(like)

    def executing(self) -> Any:
        return contextlib.nullcontext()

    def kernels(self, row: int, reads: Sequence[torch.Tensor]) -> None:
        """(The CPU runs each layer when called: nothing is queued.)"""

    def release(self, tensors: Sequence[torch.Tensor]) -> None:
        """(Freed when their last reference goes.)"""

    def finish(self) -> None:
        """(Nothing is queued on the CPU.)"""


class CudaBackend:
    """CUDA: a load stream, and per secondary GPU a copy stream and a migration stream
    (on the secondary) with a landing stream on the primary; pinned host buffers; an event
    per row that the execution stream waits on. The stream operations are
    ``runtime.streams``' (``ops``: ``CudaOps``, or ``RecordingOps`` to check the order on
    the CPU). Ordering, beyond the row events:

    - destination blocks are allocated on the load stream and ``record_stream``-ed to the
      execution stream at once, so a block freed by an eviction goes back to the load
      stream only after the kernels that read it (queued before the free) are done. The
      load therefore never waits for the execution stream: it runs beside other models'
      queued kernels (the first version allocated on the execution stream and made the
      load wait for everything queued there, measured on an H200 as a cold start delayed
      by all the work ahead of it);
    - a row over secondary ``k`` is copied into a staging buffer on that GPU's copy stream,
      then forwarded by a device-to-device copy that PyTorch runs on the *source* device's
      current stream: the migration stream (on the secondary) is made current for it, and
      the landing stream current on the primary (the copy's barrier is with that stream,
      never with the execution stream); staging buffers are ``record_stream``-ed to the
      migration stream and kept until their row has arrived;
    - destination tensors written by a migration stream are ``record_stream``-ed to it.
    """

    name = "cuda"

    def __init__(
        self,
        alias: Callable[[torch.Tensor, int], torch.Tensor],
        device: str = "cuda",
        secondaries: Sequence[str | int] = (),
        ops: Any = None,
    ) -> None:
        """``secondaries``: the GPUs whose host links parts 1, 2, ... come over, in part
        order (``planning.deepplan.pt_gpus``)."""
        from hetserve.runtime.streams import CudaOps

        self.ops = ops if ops is not None else CudaOps()
        # ``cuda`` alone is the current device, resolved now (not index 0)
        self.dev = self.ops.device(device)
        self.secondaries = [s if isinstance(s, int) else self.ops.device(s) for s in secondaries]
        if self.dev in self.secondaries:
            raise HetserveError(f"cuda:{self.dev} cannot be its own PT secondary")
        self._alias = alias
        self.exec = self.ops.current(self.dev)  # the stream the model runs on
        self._load = self.ops.stream(self.dev)
        self._sec = {
            k + 1: (self.ops.stream(d), self.ops.stream(d), self.ops.stream(self.dev), d)
            for k, d in enumerate(self.secondaries)
        }

    def stage_host(self, t: torch.Tensor) -> torch.Tensor:
        return self.ops.pin(t)

    def alias(self, host: torch.Tensor) -> torch.Tensor:
        return self._alias(host, self.dev)

    def empty(self, like: torch.Tensor) -> torch.Tensor:
        """A destination block: on the load stream's pool, its reads by the execution
        stream recorded (see the class's ordering notes)."""
        with self.ops.use(self._load):
            t = self.ops.empty(like, self.dev)
        self.ops.record_stream(t, self.exec)
        return t

    def executing(self) -> Any:
        return self.ops.use(self.exec)

    def kernels(self, row: int, reads: Sequence[torch.Tensor]) -> None:
        self.ops.kernels(reads, f"row {row}")

    def release(self, tensors: Sequence[torch.Tensor]) -> None:
        for t in tensors:
            self.ops.drop(t)

    def finish(self) -> None:
        """Block until the execution stream's queued work is done."""
        ev = self.ops.event()
        self.ops.record(ev, self.exec)
        self.ops.event_sync(ev)

    def start(
        self,
        rows: Sequence[tuple[int, list[tuple[torch.Tensor, torch.Tensor]]]],
        part_of: Sequence[int],
        on_row: Callable[[int], None],
        on_done: Callable[[], None],
    ) -> dict[int, Any]:
        ops = self.ops
        events: dict[int, Any] = {}
        staging: dict[int, list[torch.Tensor]] = {}
        for i, pairs in rows:
            p = part_of[i]
            ev = ops.event()
            if p == 0:
                with ops.use(self._load):
                    for dst, src in pairs:
                        ops.copy(dst, src)
                    ops.record(ev, self._load)
            else:
                if p not in self._sec:
                    raise HetserveError(
                        f"row {i} loads over part {p}: the backend has "
                        f"{len(self._sec)} secondary GPU(s)"
                    )
                copy, migrate, land, sdev = self._sec[p]
                staged = []
                with ops.use(copy):
                    for dst, src in pairs:
                        tmp = ops.empty(src, sdev)
                        ops.copy(tmp, src)
                        staged.append((dst, tmp))
                    arrived = ops.event()
                    ops.record(arrived, copy)
                ops.wait_event(migrate, arrived)
                with ops.use(land, migrate):
                    for dst, tmp in staged:
                        ops.copy(dst, tmp)
                        ops.record_stream(tmp, migrate)
                        ops.record_stream(dst, migrate)
                    ops.record(ev, migrate)
                staging[i] = [tmp for _, tmp in staged]
            events[i] = ev

        def watch() -> None:
            for i, _ in rows:
                ops.event_sync(events[i])
                self.release(staging.pop(i, []))
                on_row(i)
            on_done()

        spawn = getattr(ops, "spawn", None)
        if spawn is not None:  # the recorder runs it when told (RecordingOps.settle)
            spawn(watch)
        else:
            threading.Thread(target=watch, name="hetserve-load-watch", daemon=True).start()
        return events

    def wait(self, event: Any) -> None:
        self.ops.wait_event(self.exec, event)


class ColdModel:
    """One model instance whose weights live in host memory until a plan loads them."""

    def __init__(
        self,
        net: Any,
        backend: ThreadBackend | CudaBackend,
        rows: tuple[list[str], list[list[str]]],
    ) -> None:
        """``rows``: per row of the layer table, the module that opens it and the names of
        its weights (``profiling.layers.leaf_rows(net)``)."""
        self.net = net
        self.backend = backend
        self.row_names, self.row_weights = rows
        self.host = {n: backend.stage_host(t) for n, t in self._state().items()}
        self.events: dict[int, Any] = {}
        self._row_tensors: dict[int, list[torch.Tensor]] = {}  # what each row's kernels read
        self._copies: list[torch.Tensor] = []  # the device copies of the loaded rows
        self._pipelined = True
        self.loaded = False
        self.loading = False
        self.log: list[tuple[str, int]] = []  # ("loaded"|"waited"|"started", row): tests
        self._lock = threading.Lock()
        self._hooks: list[Any] = []
        self._call = 0
        self._install_hooks()
        self._clear_all()

    def __len__(self) -> int:
        return len(self.row_names)

    def _state(self) -> dict[str, torch.Tensor]:
        return {**dict(self.net.named_parameters()), **dict(self.net.named_buffers())}

    def _set(self, name: str, value: torch.Tensor) -> None:
        mod_name, _, attr = name.rpartition(".")
        mod = self.net.get_submodule(mod_name) if mod_name else self.net
        if attr in mod._parameters:
            mod._parameters[attr] = torch.nn.Parameter(value, requires_grad=False)
        else:
            mod._buffers[attr] = value

    def _clear_all(self) -> None:
        for n, host in self.host.items():
            self._set(n, host.new_empty((0,)))

    def _install_hooks(self) -> None:
        """One pre-hook on every module that opens a row (leaf modules, and graph layers
        without leaf calls): the n-th call of a pass opens row n (rows are leaf calls in
        execution order), and waits for that row's event."""
        named = dict(self.net.named_modules())
        for name in sorted(set(self.row_names)):
            self._hooks.append(named[name].register_forward_pre_hook(self._pre))

    def _pre(self, _mod: Any, _args: Any) -> None:
        i = self._call
        self._call += 1
        ev = self.events.get(i)
        if ev is not None and self._pipelined:
            self.backend.wait(ev)
            with self._lock:
                self.log.append(("waited", i))
        self.backend.kernels(i, self._row_tensors.get(i, ()))

    def load(self, plan: LoadPlan, on_done: Callable[[], None] | None = None) -> None:
        """Start loading by ``plan``; returns at once. ``on_done`` runs (on the loader's
        thread) when every loaded row has arrived."""
        if len(plan.modes) != len(self):
            raise HetserveError(
                f"{getattr(self.net, 'model_name', 'model')}: the load plan has "
                f"{len(plan.modes)} layers, the model's layer table {len(self)}"
            )
        if self.loaded or self.loading:
            raise HetserveError("load: the model is already loaded or loading")
        self.loading = True
        self._pipelined = plan.pipelined
        self.log.clear()
        copies: list[tuple[int, list[tuple[torch.Tensor, torch.Tensor]]]] = []
        self._row_tensors, self._copies = {}, []
        for i, names in enumerate(self.row_weights):
            if plan.modes[i] == DHA:
                aliases = [self.backend.alias(self.host[n]) for n in names]
                for n, a in zip(names, aliases, strict=True):
                    self._set(n, a)
                self._row_tensors[i] = aliases
                continue
            pairs = []
            for n in names:
                dst = self.backend.empty(self.host[n])
                self._set(n, dst)
                pairs.append((dst, self.host[n]))
            if pairs:
                copies.append((i, pairs))
                self._row_tensors[i] = [d for d, _ in pairs]
                self._copies += [d for d, _ in pairs]
        order = sorted(copies, key=lambda c: (plan.parts[c[0]], c[0]))

        def row_done(i: int) -> None:
            with self._lock:
                self.log.append(("loaded", i))

        def all_done() -> None:
            self.loaded, self.loading = True, False
            if on_done is not None:
                on_done()

        self.events = self.backend.start(order, plan.parts, row_done, all_done)

    def run(self, x: Any) -> Any:
        """A forward pass, waiting per row for weights still on their way (a plan that is
        not pipelined, the baseline: for every row, before the pass begins). On CUDA it
        returns when the kernels are queued (:meth:`finish` waits for them)."""
        self._call = 0
        with self.backend.executing():
            if not self._pipelined:
                for i in sorted(self.events):
                    self.backend.wait(self.events[i])
                    with self._lock:
                        self.log.append(("waited", i))
            with self._lock:
                self.log.append(("started", 0))
            with torch.inference_mode():
                out = self.net(x)
        if self._call != len(self):
            raise HetserveError(f"a pass made {self._call} leaf calls, the table has {len(self)}")
        return out

    def evict(self) -> None:
        """Free the device copies; the weights stay in host memory."""
        if self.loading:
            raise HetserveError("evict: the model is still loading")
        self._clear_all()
        self.backend.release(self._copies)
        self._copies, self._row_tensors = [], {}
        self.events = {}
        self.loaded = False

    def finish(self) -> None:
        """Wait until the work queued by :meth:`run` is done (CUDA: the execution stream)."""
        self.backend.finish()
