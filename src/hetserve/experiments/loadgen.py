"""An open-loop HTTP/1.1 load generator that keeps up with thousands of requests/s on one
core.

A general-purpose async client (httpx) spends about a millisecond of CPU per request,
which on a 2-core machine caps the load it can offer, and slows the server it shares the
machine with, long before the server's own limit. This one sends prepared request bytes
over a pool of keep-alive connections (:class:`asyncio.Protocol`, responses parsed by
``httptools``, the parser uvicorn uses) with no per-request coroutine: at each arrival time
the request goes out on an idle connection, or waits for the first connection to free up.

Latency is measured from the request's *scheduled* arrival time, so time a request spends
waiting for a connection (or for a late sender) counts against it: a slow server cannot
hide behind a slow client (no coordinated omission). ``lag_s`` says how late each request
actually left.

A request whose connection closes before any byte of its answer has come is sent once
more, on another connection (``Shots.resent`` counts them). That is HTTP keep-alive's
race: a server closes a connection it has kept idle too long just as a request goes out
on it, and never reads the request. A second loss, or a loss after the answer began, is
the request's: it keeps status 0.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from hetserve.core.errors import HetserveError


@dataclass
class Shots:
    """Per request: HTTP status (0: no answer), latency from the scheduled arrival, how
    late it was sent, and the response's headers and body (for the caller to read)."""

    status: np.ndarray
    latency_s: np.ndarray
    lag_s: np.ndarray
    headers: list[dict[bytes, bytes] | None]
    bodies: list[bytes | None]
    resent: int = 0  # requests sent again after their connection closed unanswered


def http_request(url: str, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    """The bytes of one ``POST path`` with ``body`` to the server at ``url``."""
    host = urlsplit(url).netloc
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class _Conn(asyncio.Protocol):
    def __init__(self, gen: Any) -> None:  # a _Gen or a _Closed
        import httptools

        self.gen = gen
        self.parser = httptools.HttpResponseParser(self)
        self.transport: Any = None
        self.current = -1
        self.answering = False  # a byte of the current request's answer has come
        self._headers: dict[bytes, bytes] = {}
        self._body: list[bytes] = []

    # asyncio.Protocol
    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.gen.idle(self)

    def data_received(self, data: bytes) -> None:
        import httptools

        self.answering = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.gen.lost(self)

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.lower()] = value

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        i, self.current = self.current, -1
        self.gen.answered(i, self.parser.get_status_code(), self._headers, b"".join(self._body))
        self._headers, self._body = {}, []
        if not self.parser.should_keep_alive():
            self.transport.close()
        else:
            self.gen.idle(self)

    def send(self, i: int, data: bytes) -> None:
        self.current = i
        self.answering = False
        self.transport.write(data)


class _Gen:
    def __init__(self, payloads: Sequence[bytes], arrivals: np.ndarray, which: np.ndarray) -> None:
        n = len(arrivals)
        self.payloads = payloads
        self.arrivals = arrivals
        self.which = which
        self.status = np.zeros(n, dtype=np.int32)
        self.latency = np.full(n, np.nan)
        self.lag = np.full(n, np.nan)
        self.headers: list[dict[bytes, bytes] | None] = [None] * n
        self.bodies: list[bytes | None] = [None] * n
        self.waiting: collections.deque[int] = collections.deque()
        self.free: list[_Conn] = []
        self.left = n
        self.t0 = 0.0
        self.done = asyncio.get_running_loop().create_future()
        self.conns: set[_Conn] = set()
        self.address: tuple[str, int] = ("", 0)
        self.closing = False
        self.reconnects = 0  # how many more times a lost connection is replaced
        self.sent = 0
        self.grow_to = 0  # open more connections on demand, up to this many in all
        self.opening = 0  # connections being opened for requests that wait
        self.resent: set[int] = set()  # requests sent again (module docstring)

    async def connect(self) -> None:
        _, conn = await asyncio.get_running_loop().create_connection(
            lambda: _Conn(self), *self.address
        )
        self.conns.add(conn)

    def idle(self, conn: _Conn) -> None:
        if self.waiting:
            self._send(conn, self.waiting.popleft())
        else:
            self.free.append(conn)

    def _send(self, conn: _Conn, i: int) -> None:
        self.lag[i] = time.perf_counter() - self.t0 - self.arrivals[i]
        self.sent += 1
        conn.send(i, self.payloads[self.which[i]])

    def arrive(self, i: int) -> None:
        if self.free:
            self._send(self.free.pop(), i)
        else:
            self.waiting.append(i)
            if len(self.conns) + self.opening < self.grow_to:
                self.opening += 1
                task = asyncio.get_running_loop().create_task(self._grow())
                task.add_done_callback(_quiet)

    async def _grow(self) -> None:
        try:
            await self.connect()
        finally:
            self.opening -= 1

    def answered(self, i: int, status: int, headers: dict[bytes, bytes], body: bytes) -> None:
        if i < 0:
            return
        self.latency[i] = time.perf_counter() - self.t0 - self.arrivals[i]
        self.status[i] = status
        self.headers[i], self.bodies[i] = headers, body
        self._one_less()

    def lost(self, conn: _Conn) -> None:
        if conn in self.free:
            self.free.remove(conn)
        self.conns.discard(conn)
        if conn.current >= 0:  # its request got no answer
            i, conn.current = conn.current, -1
            if not conn.answering and i not in self.resent and not self.closing:
                self.resent.add(i)  # (keep-alive's race: module docstring) once more
                self.arrive(i)
            else:
                self.latency[i] = time.perf_counter() - self.t0 - self.arrivals[i]
                self._one_less()
        if not self.closing and self.left > 0 and self.reconnects > 0:
            self.reconnects -= 1
            # the server closed it (an idle keep-alive connection times out): a new one
            task = asyncio.get_running_loop().create_task(self.connect())
            task.add_done_callback(_quiet)

    def _one_less(self) -> None:
        self.left -= 1
        if self.left == 0 and not self.done.done():
            self.done.set_result(None)


def _quiet(task: asyncio.Task[Any]) -> None:
    """A reconnection that failed: the requests it would have carried wait for the others
    (or, with none left, get no answer)."""
    if not task.cancelled():
        task.exception()


async def _run(
    url: str,
    payloads: Sequence[bytes],
    arrivals: np.ndarray,
    which: np.ndarray,
    connections: int,
    timeout_s: float,
    progress: Callable[[int, int], None] | None = None,
    spin_s: float = 0.0,
    grow_to: int = 0,
) -> Shots:
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise HetserveError(f"load generator: expected a URL like http://host:port, got {url!r}")
    gen = _Gen(payloads, arrivals, which)
    gen.address = (parts.hostname, parts.port or 80)
    gen.reconnects = 10 * connections
    gen.grow_to = grow_to
    for _ in range(connections):
        try:
            await gen.connect()
        except OSError as e:
            raise HetserveError(f"load generator: cannot connect to {url}: {e}") from None
    gen.t0 = time.perf_counter() + 0.05
    n = len(arrivals)
    k = 0
    ticker = None
    if progress is not None:

        async def tick() -> None:
            while True:
                await asyncio.sleep(1.0)
                progress(gen.sent, n - gen.left)

        ticker = asyncio.get_running_loop().create_task(tick())
    if n:
        while k < n:
            now = time.perf_counter() - gen.t0
            while k < n and arrivals[k] <= now:
                gen.arrive(k)
                k += 1
            if k < n:
                wait = float(arrivals[k]) - now
                if wait > spin_s:  # the event loop's timers are ~1 ms coarse: wake early,
                    await asyncio.sleep(wait - spin_s)
                else:  # then yield (answers are read meanwhile) until it is time
                    await asyncio.sleep(0)
        with contextlib.suppress(TimeoutError):  # the unanswered keep status 0
            await asyncio.wait_for(gen.done, timeout_s)
    if ticker is not None:
        ticker.cancel()
    gen.closing = True
    for c in list(gen.conns):
        if c.transport is not None:
            c.transport.close()
    return Shots(gen.status, gen.latency, gen.lag, gen.headers, gen.bodies, len(gen.resent))


def open_loop(
    url: str,
    payloads: Sequence[bytes],
    arrivals_s: np.ndarray,
    which: np.ndarray | None = None,
    connections: int = 64,
    timeout_s: float = 60.0,
    progress: Callable[[int, int], None] | None = None,
    spin_s: float = 0.0,
    grow_to: int = 0,
) -> Shots:
    """Send request ``i`` (the prepared bytes ``payloads[which[i]]``, see
    :func:`http_request`) at ``arrivals_s[i]`` seconds after the start (sorted), over
    ``connections`` keep-alive connections to ``url``; wait up to ``timeout_s`` after the
    last for the answers. Runs its own event loop (uvloop where installed). ``progress``,
    where given, is called once a second with the requests sent and answered so far.
    ``spin_s`` > 0: the sender wakes that long before a request is due and yields to the
    loop until it is (the loop's timers are about a millisecond coarse: sends land within
    that of their time, for some CPU). ``grow_to`` > ``connections``: a request that finds
    every connection busy opens another, up to that many in all (an open loop's sender
    should not be held back by its own connection pool: Little's law needs rate x latency
    of them)."""
    arrivals = np.asarray(arrivals_s, dtype=float)
    if len(arrivals) > 1 and np.any(np.diff(arrivals) < 0):
        raise HetserveError("load generator: arrival times must be sorted")
    w = np.zeros(len(arrivals), dtype=np.int64) if which is None else np.asarray(which)
    if connections < 1:
        raise HetserveError(f"load generator: connections must be >= 1, got {connections}")
    return _loop_run(
        _run(url, payloads, arrivals, w, connections, timeout_s, progress, spin_s, grow_to)
    )


def _loop_run(coro: Any) -> Any:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


class _Closed:
    """Closed loop: every connection sends its next request as soon as it is answered.
    ``stop_on_error``: the first answer other than 200 ends the run (and is raised)."""

    def __init__(self, payload: bytes, t_end: float, stop_on_error: bool = True) -> None:
        self.payload = payload
        self.t_end = t_end
        self.stop_on_error = stop_on_error
        self.count = 0
        self.bad: tuple[int, bytes] | None = None
        self.open = 0
        self.done = asyncio.get_running_loop().create_future()
        self.sent_at: list[float] = []  # per request sent: when
        self.answers: list[tuple[int, int, float]] = []  # (request, status, latency_s)

    def idle(self, conn: _Conn) -> None:
        if time.perf_counter() < self.t_end and (self.bad is None or not self.stop_on_error):
            self.sent_at.append(time.perf_counter())
            conn.send(len(self.sent_at) - 1, self.payload)
        else:
            self.lost(conn)

    def answered(self, i: int, status: int, headers: dict[bytes, bytes], body: bytes) -> None:
        self.answers.append((i, status, time.perf_counter() - self.sent_at[i]))
        if status == 200:
            self.count += 1
        elif self.bad is None:
            self.bad = (status, body)

    def lost(self, conn: _Conn) -> None:
        if conn.transport is not None and not conn.transport.is_closing():
            conn.transport.close()
            return  # connection_lost follows
        self.open -= 1
        if self.open <= 0 and not self.done.done():
            self.done.set_result(None)


async def _closed(url: str, payload: bytes, clients: int, seconds: float) -> float:
    parts = urlsplit(url)
    loop = asyncio.get_running_loop()
    gen = _Closed(payload, time.perf_counter() + seconds)
    gen.open = clients
    t0 = time.perf_counter()
    for _ in range(clients):
        await loop.create_connection(lambda: _Conn(gen), parts.hostname, parts.port or 80)
    await gen.done
    if gen.bad is not None:
        raise HetserveError(f"load generator: HTTP {gen.bad[0]}: {gen.bad[1][:200]!r}")
    return gen.count / (time.perf_counter() - t0)


def closed_loop(url: str, payload: bytes, clients: int, seconds: float) -> float:
    """Requests/s answered with 200 when ``clients`` connections each send ``payload``
    (see :func:`http_request`) again as soon as the last is answered, for ``seconds``."""
    return float(_loop_run(_closed(url, payload, clients, seconds)))


@dataclass
class ClosedRun:
    """A closed loop's answers: per request answered, its HTTP status and latency (from
    its send: a closed loop has no schedule), the requests sent, and the run's length."""

    status: np.ndarray
    latency_s: np.ndarray
    sent: int
    seconds: float


async def _closed_all(url: str, payload: bytes, clients: int, seconds: float) -> ClosedRun:
    parts = urlsplit(url)
    loop = asyncio.get_running_loop()
    gen = _Closed(payload, time.perf_counter() + seconds, stop_on_error=False)
    gen.open = clients
    t0 = time.perf_counter()
    for _ in range(clients):
        try:
            await loop.create_connection(lambda: _Conn(gen), parts.hostname, parts.port or 80)
        except OSError as e:
            raise HetserveError(f"load generator: cannot connect to {url}: {e}") from None
    await gen.done
    st = np.array([a[1] for a in gen.answers], dtype=np.int32)
    lat = np.array([a[2] for a in gen.answers])
    return ClosedRun(st, lat, len(gen.sent_at), time.perf_counter() - t0)


def closed_loop_answers(url: str, payload: bytes, clients: int, seconds: float) -> ClosedRun:
    """The closed loop of :func:`closed_loop`, every answer kept (errors included: they
    do not stop it)."""
    return _loop_run(_closed_all(url, payload, clients, seconds))  # type: ignore[no-any-return]
