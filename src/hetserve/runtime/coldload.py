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
events. Status: the CUDA backend is written without a GPU to run it on.
"""

from __future__ import annotations

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
                events[i].set()
                on_row(i)
            on_done()

        threading.Thread(target=run, name="hetserve-load", daemon=True).start()
        return events

    def wait(self, event: Any) -> None:
        event.wait()

    def empty(self, like: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(like)


class CudaBackend:
    """CUDA: a load stream (and one per secondary GPU with a migration stream), pinned
    host buffers, an event per row; the execution stream waits on the events."""

    name = "cuda"

    def __init__(
        self,
        alias: Callable[[torch.Tensor, int], torch.Tensor],
        device: str = "cuda",
        secondaries: Sequence[str] = (),
    ) -> None:
        self.device = torch.device(device)
        self.secondaries = [torch.device(d) for d in secondaries]
        self._alias = alias

    def stage_host(self, t: torch.Tensor) -> torch.Tensor:
        return t.detach().cpu().pin_memory()

    def alias(self, host: torch.Tensor) -> torch.Tensor:
        return self._alias(host, self.device.index or 0)

    def empty(self, like: torch.Tensor) -> torch.Tensor:
        return torch.empty(like.shape, dtype=like.dtype, device=self.device)

    def start(
        self,
        rows: Sequence[tuple[int, list[tuple[torch.Tensor, torch.Tensor]]]],
        part_of: Sequence[int],
        on_row: Callable[[int], None],
        on_done: Callable[[], None],
    ) -> dict[int, Any]:
        load = torch.cuda.Stream(self.device)
        sec = {k + 1: (torch.cuda.Stream(d), torch.cuda.Stream(self.device), d)
               for k, d in enumerate(self.secondaries)}  # fmt: skip
        events: dict[int, Any] = {}
        for i, pairs in rows:
            p = part_of[i]
            ev = torch.cuda.Event()
            if p == 0:
                with torch.cuda.stream(load):
                    for dst, src in pairs:
                        dst.copy_(src, non_blocking=True)
                    ev.record(load)
            else:
                if p not in sec:
                    raise HetserveError(f"row {i} loads over part {p}: no such secondary GPU")
                copy, migrate, dev = sec[p]
                staged = []
                with torch.cuda.stream(copy):
                    for dst, src in pairs:
                        staged.append((dst, src.to(dev, non_blocking=True)))
                    arrived = torch.cuda.Event()
                    arrived.record(copy)
                with torch.cuda.stream(migrate):
                    migrate.wait_event(arrived)
                    for dst, tmp in staged:
                        dst.copy_(tmp, non_blocking=True)
                    ev.record(migrate)
            events[i] = ev

        def watch() -> None:
            for i, _ in rows:
                events[i].synchronize()
                on_row(i)
            on_done()

        threading.Thread(target=watch, name="hetserve-load-watch", daemon=True).start()
        return events

    def wait(self, event: Any) -> None:
        torch.cuda.current_stream(self.device).wait_event(event)


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
        self.loaded = False
        self.loading = False
        self.log: list[tuple[str, int]] = []  # ("loaded"|"waited", row), for tests
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
        if ev is not None:
            self.backend.wait(ev)
            with self._lock:
                self.log.append(("waited", i))

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
        self.log.clear()
        copies: list[tuple[int, list[tuple[torch.Tensor, torch.Tensor]]]] = []
        for i, names in enumerate(self.row_weights):
            if plan.modes[i] == DHA:
                for n in names:
                    self._set(n, self.backend.alias(self.host[n]))
                continue
            pairs = []
            for n in names:
                dst = self.backend.empty(self.host[n])
                self._set(n, dst)
                pairs.append((dst, self.host[n]))
            if pairs:
                copies.append((i, pairs))
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
        """A forward pass, waiting per row for weights still on their way."""
        self._call = 0
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
        self.events = {}
        self.loaded = False
