"""The CUDA stream operations the cold-start loader uses, and a recorder that checks them.

The loader (``runtime.coldload``) is written against :class:`CudaOps`: a thin layer over
``torch.cuda`` streams, events and the caching allocator, so that the *same code* runs on
a GPU and, with :class:`RecordingOps`, on the CPU. The recorder keeps the semantics the
loader depends on, as PyTorch implements them (``aten/src/ATen/native/cuda/Copy.cu``,
``c10/cuda/CUDACachingAllocator.cpp``):

- a kernel or copy runs on the *current* stream of its device; a host-to-device copy on
  the destination's; a device-to-device copy between two GPUs on the *source* device's
  current stream, behind a two-way barrier with the destination device's current stream
  (the copy waits for the destination stream's earlier work, and the destination stream
  then waits for the copy);
- an event captures its stream's work so far; a stream that waits on it is ordered after
  that work; ``wait_stream`` is the same for everything queued on the other stream;
- the caching allocator gives a freed block back to the stream it was *allocated on* at
  once: an allocation on that stream may reuse it before other streams that used it have
  finished, unless ``record_stream`` named them (then the block waits for their work as
  of the free).

Every operation becomes a vector clock (one component per stream and one for the host);
an access to a block (read or write, of weights, staging buffers, rows) that is not
ordered after a conflicting earlier access to the same block, in any earlier life of the
block, is a *hazard*. A correct loader leaves :attr:`RecordingOps.hazards` empty; each
defect of its first (never run) version shows up there (tests/runtime/test_streams.py).
The data is moved for real (CPU tensors), at once, when an operation is recorded: outputs
equal to the warm model's show that every weight arrived where the model reads it, not
that the order on a GPU is right. The order is what the vector clocks check (the hazards);
the values on a real GPU are checked by the CUDA tests (``skipif(no CUDA)``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

HOST = -1  # the device index of host memory


class CudaOps:
    """The real thing: ``torch.cuda``."""

    name = "cuda"

    def device(self, spec: str | torch.device) -> int:
        """A CUDA device's index (``cuda`` alone: the current device, resolved now)."""
        d = torch.device(spec)
        return d.index if d.index is not None else torch.cuda.current_device()

    def device_count(self) -> int:
        return torch.cuda.device_count()

    def stream(self, dev: int) -> Any:
        return torch.cuda.Stream(torch.device("cuda", dev))

    def current(self, dev: int) -> Any:
        return torch.cuda.current_stream(torch.device("cuda", dev))

    @contextlib.contextmanager
    def use(self, *streams: Any) -> Iterator[None]:
        """Each stream current on its device (the last one's device current) meanwhile."""
        with contextlib.ExitStack() as stack:
            for s in streams:
                stack.enter_context(torch.cuda.stream(s))
            yield

    def event(self) -> Any:
        return torch.cuda.Event()

    def record(self, ev: Any, stream: Any) -> None:
        ev.record(stream)

    def wait_event(self, stream: Any, ev: Any) -> None:
        stream.wait_event(ev)

    def wait_stream(self, stream: Any, other: Any) -> None:
        stream.wait_stream(other)

    def event_sync(self, ev: Any) -> None:
        ev.synchronize()

    def empty(self, like: torch.Tensor, dev: int) -> torch.Tensor:
        return torch.empty(like.shape, dtype=like.dtype, device=torch.device("cuda", dev))

    def copy(self, dst: torch.Tensor, src: torch.Tensor, what: str = "copy") -> None:
        dst.copy_(src, non_blocking=True)

    def record_stream(self, t: torch.Tensor, stream: Any) -> None:
        t.record_stream(stream)

    def drop(self, t: torch.Tensor) -> None:
        """The caller's last reference to ``t`` goes (the allocator frees it then)."""

    def pin(self, t: torch.Tensor) -> torch.Tensor:
        return t.detach().cpu().pin_memory()

    def kernels(self, reads: Iterable[torch.Tensor], what: str = "kernels") -> None:
        """The execution stream is about to run kernels reading ``reads`` (the real
        kernels are the model's own; nothing to do)."""


@dataclass
class _Stream:
    sid: int
    dev: int
    name: str
    clock: dict[int, int] = field(default_factory=dict)


@dataclass
class _Event:
    clock: dict[int, int] | None = None


@dataclass
class _Access:
    sid: int
    tick: int
    write: bool
    what: str


@dataclass
class _Block:
    bid: int
    dev: int
    alloc_sid: int
    life: int = 0
    used_by: set[int] = field(default_factory=set)  # streams named by record_stream
    accesses: list[_Access] = field(default_factory=list)
    ready: dict[int, int] | None = None  # the recorded streams' work as of the free


def _merge(a: dict[int, int], b: dict[int, int]) -> None:
    for k, v in b.items():
        if a.get(k, 0) < v:
            a[k] = v


class RecordingOps:
    """CPU tensors standing for ``n_devices`` GPUs; every operation recorded and checked
    (module docstring). ``current_device`` is the device ``cuda`` alone means."""

    name = "recording"

    def __init__(self, n_devices: int = 1, current_device: int = 0) -> None:
        self.n_devices = n_devices
        self.current_device = current_device
        self._streams: list[_Stream] = []
        self.host: dict[int, int] = {}  # what the host has seen finish
        self._cur = {d: self._new_stream(d, f"default:{d}") for d in range(n_devices)}
        self._dev_of: dict[int, int] = {}  # data_ptr -> device (tensors made here)
        self._block_of: dict[int, _Block] = {}  # data_ptr -> block
        self._free: dict[tuple[int, int], list[_Block]] = {}  # (dev, alloc stream) -> blocks
        self._n_blocks = 0
        self.log: list[tuple[str, str, str]] = []  # (operation, stream, what)
        self.hazards: list[str] = []
        self._pending: list[Callable[[], None]] = []

    def spawn(self, fn: Callable[[], None]) -> None:
        """A host thread that waits on events: run by :meth:`settle` (the GPU's work is
        done at once here, so a thread would merely race the caller's next operations)."""
        self._pending.append(fn)

    def settle(self) -> None:
        """The host threads run now (their event waits return at once)."""
        while self._pending:
            self._pending.pop(0)()

    # ------------------------------------------------------------------ streams
    def _new_stream(self, dev: int, name: str) -> _Stream:
        s = _Stream(len(self._streams), dev, name)
        self._streams.append(s)
        return s

    def device(self, spec: str | torch.device) -> int:
        d = torch.device(spec)
        return d.index if d.index is not None else self.current_device

    def device_count(self) -> int:
        return self.n_devices

    def stream(self, dev: int) -> _Stream:
        return self._new_stream(dev, f"s{len(self._streams)}:{dev}")

    def current(self, dev: int) -> _Stream:
        return self._cur[dev]

    @contextlib.contextmanager
    def use(self, *streams: _Stream) -> Iterator[None]:
        saved = dict(self._cur), self.current_device
        for s in streams:
            self._cur[s.dev] = s
            self.current_device = s.dev
        try:
            yield
        finally:
            self._cur, self.current_device = saved

    def _tick(self, s: _Stream) -> dict[int, int]:
        _merge(s.clock, self.host)  # work queued after the host saw something finish
        s.clock[s.sid] = s.clock.get(s.sid, 0) + 1
        return s.clock

    def event(self) -> _Event:
        return _Event()

    def record(self, ev: _Event, stream: _Stream) -> None:
        _merge(stream.clock, self.host)
        ev.clock = dict(stream.clock)
        self.log.append(("record", stream.name, ""))

    def wait_event(self, stream: _Stream, ev: _Event) -> None:
        if ev.clock is not None:  # (an event never recorded: nothing to wait for)
            _merge(stream.clock, ev.clock)
        self.log.append(("wait_event", stream.name, ""))

    def wait_stream(self, stream: _Stream, other: _Stream) -> None:
        _merge(stream.clock, other.clock)
        self.log.append(("wait_stream", stream.name, other.name))

    def event_sync(self, ev: _Event) -> None:
        if ev.clock is not None:
            _merge(self.host, ev.clock)

    # ------------------------------------------------------------------ memory
    def _dev(self, t: torch.Tensor) -> int:
        return self._dev_of.get(t.data_ptr(), HOST)

    def empty(self, like: torch.Tensor, dev: int) -> torch.Tensor:
        s = self._cur[dev]
        t = torch.empty(like.shape, dtype=like.dtype)
        pool = self._free.get((dev, s.sid), [])
        block = None
        for k, b in enumerate(pool):
            if b.ready is None:  # back to its stream at once
                block = pool.pop(k)
                break
        if block is None:
            for k, b in enumerate(pool):  # the allocator found its recorded work done
                block = pool.pop(k)
                assert b.ready is not None
                _merge(self.host, b.ready)
                break
        if block is None:
            self._n_blocks += 1
            block = _Block(self._n_blocks, dev, s.sid)
        else:
            block.life += 1
            block.used_by, block.ready = set(), None
        if t.numel():
            self._dev_of[t.data_ptr()] = dev
            self._block_of[t.data_ptr()] = block
        return t

    def record_stream(self, t: torch.Tensor, stream: _Stream) -> None:
        b = self._block_of.get(t.data_ptr())
        if b is not None and stream.sid != b.alloc_sid:
            b.used_by.add(stream.sid)

    def drop(self, t: torch.Tensor) -> None:
        b = self._block_of.pop(t.data_ptr(), None)
        self._dev_of.pop(t.data_ptr(), None)
        if b is None:
            return
        if b.used_by:
            b.ready = {}
            for sid in b.used_by:
                _merge(b.ready, self._streams[sid].clock)
        self._free.setdefault((b.dev, b.alloc_sid), []).insert(0, b)

    def pin(self, t: torch.Tensor) -> torch.Tensor:
        return t.detach().clone()

    # ------------------------------------------------------------------ work
    def _access(self, t: torch.Tensor, s: _Stream, clock: dict[int, int], write: bool,
                what: str) -> None:  # fmt: skip
        b = self._block_of.get(t.data_ptr())
        if b is None:
            return  # host memory (pinned weights, aliases): never freed while in use
        for a in b.accesses:
            if (a.write or write) and clock.get(a.sid, 0) < a.tick:
                self.hazards.append(
                    f"block {b.bid} (life {b.life}): {'write' if write else 'read'} by "
                    f"{what} on {s.name} is not ordered after the "
                    f"{'write' if a.write else 'read'} by {a.what} on "
                    f"{self._streams[a.sid].name}"
                )
        b.accesses.append(_Access(s.sid, clock[s.sid], write, what))

    def copy(self, dst: torch.Tensor, src: torch.Tensor, what: str = "copy") -> None:
        sd, dd = self._dev(src), self._dev(dst)
        if sd in (HOST, dd):
            s = self._cur[dd if dd != HOST else sd]
        else:  # between GPUs: on the source's current stream, barrier with the dest's
            s = self._cur[sd]
            if dd != HOST:
                _merge(s.clock, self._cur[dd].clock)
        clock = self._tick(s)
        self._access(src, s, clock, False, what)
        self._access(dst, s, clock, True, what)
        self.log.append(("copy", s.name, f"{what} {sd}->{dd}"))
        dst.copy_(src)
        if sd not in (HOST, dd) and dd != HOST:
            _merge(self._cur[dd].clock, s.clock)

    def kernels(self, reads: Iterable[torch.Tensor], what: str = "kernel") -> None:
        """Kernels on the current stream of the current device reading ``reads``."""
        s = self._cur[self.current_device]
        clock = self._tick(s)
        for t in reads:
            self._access(t, s, clock, False, what)
        self.log.append(("kernels", s.name, what))
