"""The driver's Ray session: joining a cluster (or starting a local Ray) with the server's
own signal handlers kept and a one-line error where Ray does not start, and asking the GCS
which nodes are alive without ``ray.nodes()`` (which ends the process when its call
fails). Discovery (``runtime.discovery``) reads the cluster once it is joined."""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from collections.abc import Iterator
from typing import Any

from hetserve.core.errors import HetserveError


@contextlib.contextmanager
def keep_signal_handlers() -> Iterator[None]:
    """``ray.init`` replaces the driver's SIGTERM handler with one that calls
    ``sys.exit``, which would raise ``SystemExit`` inside the HTTP server's event loop and fail
    the requests in flight. The server's own handlers (uvicorn's: stop accepting, drain,
    shut down) are put back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in saved.items():
            if handler is not None:
                signal.signal(s, handler)


def check_address(address: str, timeout_s: float = 5.0) -> None:
    """An address that nothing answers at is a one-line error, at once (``ray.init``
    would wait for a minute)."""
    if address in ("auto", "local") or address.startswith(("ray://", "anyscale://")):
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise HetserveError(
            f"--address {address!r}: expected HOST:PORT of a Ray head (its GCS port, 6379 "
            f"unless ray start --port said otherwise)"
        )
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as e:
        raise HetserveError(
            f"--address {address}: nothing answers there ({e.strerror or e}); is a Ray head "
            f"running (ray start --head --port {port})?"
        ) from None


def connect(address: str | None, runtime_env: dict[str, Any] | None = None) -> bool:
    """Join the Ray cluster at ``address`` (or start a local one); True if this call
    initialised Ray (the caller shuts it down)."""
    import logging

    import ray

    if ray.is_initialized():
        return False
    if address is not None:
        check_address(address)
    with keep_signal_handlers():
        try:
            ray.init(
                address=address, include_dashboard=False, log_to_driver=False,
                logging_level=logging.ERROR, runtime_env=runtime_env,
            )  # fmt: skip
        except Exception as err:  # a GCS or raylet that did not come up, a bad runtime_env
            with contextlib.suppress(Exception):
                ray.shutdown()  # what it started of its processes
            where = f"Ray at {address}" if address is not None else "a local Ray instance"
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise HetserveError(f"{where} did not start: {first}") from None
    return True


@contextlib.contextmanager
def joined(address: str | None) -> Iterator[None]:
    """Connected to the Ray cluster at ``address`` for the block (nothing without one);
    the connection this made is closed after it."""
    owned = connect(address) if address is not None else False
    try:
        yield
    finally:
        if owned:
            import ray

            ray.shutdown()


def alive_node_ids(timeout_s: float = 1.0) -> set[str] | None:
    """The IDs (hex) of the nodes the Ray GCS holds alive, or None when the GCS does not
    answer within ``timeout_s`` (it was killed: a signal to the server's whole process
    group reaches the GCS that ``ray.init`` started, too). Asked through the driver's GCS
    client, which raises on a timeout: ``ray.nodes()`` ends the process instead (a failed
    check in Ray 2.60's global state accessor once its call is cancelled or the GCS stays
    away for 60 s)."""
    from ray._private.worker import global_worker

    try:
        nodes = global_worker.gcs_client.get_all_node_info(timeout=timeout_s)
    except Exception:  # RpcError, or the client is gone (ray.shutdown)
        return None
    return {nid.hex() for nid, info in nodes.items() if info.state == info.ALIVE}
