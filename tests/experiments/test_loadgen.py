"""The open-loop load generator: answers, queueing counted from the arrival time, errors."""

import asyncio

import numpy as np
import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("httptools")

from hetserve.core.errors import HetserveError
from hetserve.experiments.live import free_port, serve_in_thread
from hetserve.experiments.loadgen import closed_loop, http_request, open_loop


def _slow_app(delay_s: float):
    """ASGI: answers each POST after ``delay_s`` with its body reversed; 418 for /teapot."""

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                m = await receive()
                await send({"type": m["type"] + ".complete"})
                if m["type"] == "lifespan.shutdown":
                    return
        body = b""
        while True:
            m = await receive()
            body += m.get("body", b"")
            if not m.get("more_body"):
                break
        await asyncio.sleep(delay_s)
        status = 418 if scope["path"] == "/teapot" else 200
        out = body[::-1]
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-length", str(len(out)).encode())]})  # fmt: skip
        await send({"type": "http.response.body", "body": out})

    return app


def test_open_loop_answers_every_request_and_counts_queueing_from_the_arrival():
    with serve_in_thread(_slow_app(0.05)) as url:
        big = bytes(range(256)) * 4000  # 1 MB: several writes and reads per request
        payloads = [http_request(url, "/x", b"abc", {}), http_request(url, "/y", big, {})]
        # one connection, three requests at once: the last waits for the first two
        shots = open_loop(url, payloads, np.zeros(3), np.array([0, 1, 0]), connections=1)
    assert list(shots.status) == [200, 200, 200]
    assert shots.bodies[0] == b"cba" and shots.bodies[1] == big[::-1]
    assert shots.headers[0][b"content-length"] == b"3"
    lat = np.sort(shots.latency_s)
    assert lat[0] >= 0.045 and lat[1] >= 0.095 and lat[2] >= 0.145
    assert shots.lag_s[2] >= 0.09  # it left when the connection came free


def test_open_loop_keeps_the_schedule_with_enough_connections():
    arrivals = np.arange(20) * 0.01
    with serve_in_thread(_slow_app(0.02)) as url:
        shots = open_loop(url, [http_request(url, "/", b"", {})], arrivals, connections=8)
    assert (shots.status == 200).all()
    assert np.all(shots.lag_s < 0.02)
    assert np.all(shots.latency_s >= 0.018) and np.median(shots.latency_s) < 0.2


def test_the_pool_grows_when_every_connection_is_busy():
    """An open loop with one connection and 30 requests at once to a server that answers
    in 0.2 s: without growth the last would leave 5.8 s late; with ``grow_to`` each
    request that finds the pool busy opens a connection, and all leave at once."""
    with serve_in_thread(_slow_app(0.2)) as url:
        shots = open_loop(url, [http_request(url, "/", b"x", {})], np.zeros(30),
                          connections=1, grow_to=40)  # fmt: skip
    assert (shots.status == 200).all()
    assert shots.lag_s.max() < 0.15 and shots.latency_s.max() < 1.0


def test_a_spinning_sender_leaves_on_time():
    """``spin_s``: the sender wakes early and yields until a request is due (the loop's
    timers are about a millisecond coarse)."""
    arrivals = 0.05 + np.arange(60) * 0.0037
    with serve_in_thread(_slow_app(0.0)) as url:
        shots = open_loop(url, [http_request(url, "/", b"", {})], arrivals, connections=8,
                          spin_s=0.002)  # fmt: skip
    assert (shots.status == 200).all()
    assert np.median(shots.lag_s) < 0.0002  # (without the spin: about 0.5 ms)


def test_connections_the_server_closes_are_replaced():
    """uvicorn closes idle keep-alive connections (here after 1 s): requests after a longer
    pause go out on new ones."""
    arrivals = np.array([0.0, 0.01, 1.6, 1.61])
    with serve_in_thread(_slow_app(0.0), timeout_keep_alive=1) as url:
        shots = open_loop(url, [http_request(url, "/", b"x", {})], arrivals, connections=2)
    assert list(shots.status) == [200] * 4
    assert np.all(shots.lag_s < 0.5)


def test_closed_loop_counts_answers_and_reports_errors():
    with serve_in_thread(_slow_app(0.01)) as url:
        rps = closed_loop(url, http_request(url, "/", b"hi", {}), clients=2, seconds=0.5)
        assert 20 < rps < 200 + 1  # 2 clients, 10 ms each: at most 200 req/s
        with pytest.raises(HetserveError, match="HTTP 418"):
            closed_loop(url, http_request(url, "/teapot", b"", {}), clients=1, seconds=0.3)


def test_unanswered_requests_and_bad_arguments():
    with serve_in_thread(_slow_app(5.0)) as url:
        shots = open_loop(url, [http_request(url, "/", b"", {})], np.zeros(2), timeout_s=0.2)
    assert list(shots.status) == [0, 0]  # no answer within the timeout
    with pytest.raises(HetserveError, match="sorted"):
        open_loop("http://127.0.0.1:1", [b""], np.array([1.0, 0.0]))
    with pytest.raises(HetserveError, match="URL like"):
        open_loop("ftp://x", [b""], np.zeros(1))
    with pytest.raises(HetserveError, match="cannot connect"):
        open_loop(f"http://127.0.0.1:{free_port()}", [b""], np.zeros(1))


class _ClosingServer:
    """A raw HTTP/1.1 server (asyncio, in a thread) that answers each POST with its body,
    except: a request whose body is ``drop`` closes its connection unanswered the first
    time it comes (the keep-alive race, made to happen), one whose body is ``always`` does
    so every time, and one whose body is ``half`` gets half a status line and then a
    closed connection, every time. ``seen`` counts each body as received."""

    def __init__(self) -> None:
        import threading

        self.seen: dict[bytes, int] = {}
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def main() -> None:
            self.done = asyncio.Event()
            server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
            ready.set()
            await self.done.wait()
            server.close()
            await server.wait_closed()

        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(main(),),
                                       daemon=True)  # fmt: skip
        self.thread.start()
        assert ready.wait(10)

    async def _serve(self, reader, writer) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                n = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                             if line.lower().startswith(b"content-length")))  # fmt: skip
                body = await reader.readexactly(n)
                self.seen[body] = self.seen.get(body, 0) + 1
                if (body == b"drop" and self.seen[body] == 1) or body in (b"always", b"half"):
                    if body == b"half":
                        writer.write(b"HTTP/1.1 2")
                        await writer.drain()
                    writer.close()
                    return
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (n, body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.done.set)
        self.thread.join(timeout=10)
        self.loop.close()


def test_a_request_whose_connection_closes_unanswered_is_sent_once_more():
    """HTTP keep-alive's race, made to happen: the server closes a connection without
    answering the request on it. That request goes out again on another connection and is
    answered; one whose answer had begun is not sent again (status 0), and neither is one
    the server drops every time (sent twice, then status 0)."""
    srv = _ClosingServer()
    try:
        url = f"http://127.0.0.1:{srv.port}"
        payloads = [http_request(url, "/", b, {}) for b in (b"ok", b"drop", b"half", b"always")]
        which = np.array([0, 1, 0, 0, 2, 0, 3, 0])
        shots = open_loop(url, payloads, np.arange(8) * 0.02, which, connections=2,
                          timeout_s=2.0)  # fmt: skip
    finally:
        srv.stop()
    assert list(shots.status) == [200, 200, 200, 200, 0, 200, 0, 200]
    assert shots.bodies[1] == b"drop"
    assert srv.seen[b"drop"] == 2 and srv.seen[b"half"] == 1 and srv.seen[b"always"] == 2
    assert shots.resent == 2
