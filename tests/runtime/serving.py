"""``hetserve serve`` as a real process for the tests: started in a session of its own
(port 0), waited for until its ready probe answers; its output in ``tmp_path/serve.out``."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest


class ServeLog:
    """The serving process's output file, read through a file description of this
    process's own. The child's stdout is another description with ``O_APPEND``: reading
    through one shared with it races its writes (a write between this side's seek and
    read moves the shared offset to the end, and the read gives '')."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._sink = open(path, "a")  # the child's stdout and stderr

    def read(self) -> str:
        """Everything the process has written so far."""
        return self.path.read_text()

    def close(self) -> None:
        """Closes this side's copy of the child's stdout (the child keeps its own)."""
        self._sink.close()


def start_serve(tmp_path, args, env, timeout_s=120.0):  # type: ignore[no-untyped-def]
    """(process, base URL, its output as a :class:`ServeLog`) once ``/v2/health/ready``
    answers 200."""
    path = tmp_path / "serve.out"
    path.write_text("")
    out = ServeLog(path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "hetserve", "serve", "--port", "0", *args],
        stdout=out._sink, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        m = re.search(r"at http://127\.0\.0\.1:(\d+)/v2", out.read())
        if m:
            url = f"http://127.0.0.1:{m.group(1)}"
            try:
                if httpx.get(f"{url}/v2/health/ready", timeout=2).status_code == 200:
                    return proc, url, out
            except httpx.TransportError:
                pass
        if proc.poll() is not None:
            pytest.fail(f"serve exited with {proc.returncode}: {out.read()}")
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"serve did not become ready in {timeout_s:.0f} s: {out.read()}")
