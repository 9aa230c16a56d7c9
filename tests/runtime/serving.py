"""``hetserve serve`` as a real process for the tests: started in a session of its own
(port 0), waited for until its ready probe answers; its output in ``tmp_path/serve.out``."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import httpx
import pytest


def start_serve(tmp_path, args, env, timeout_s=120.0):  # type: ignore[no-untyped-def]
    """(process, base URL, its output file) once ``/v2/health/ready`` answers 200."""
    # append mode: the process and this one share the file's offset, and a seek here to
    # read it must not make the process write over what it wrote before
    path = tmp_path / "serve.out"
    path.write_text("")
    out = open(path, "a+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "hetserve", "serve", "--port", "0", *args],
        stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out.seek(0)
        m = re.search(r"at http://127\.0\.0\.1:(\d+)/v2", out.read())
        if m:
            url = f"http://127.0.0.1:{m.group(1)}"
            try:
                if httpx.get(f"{url}/v2/health/ready", timeout=2).status_code == 200:
                    return proc, url, out
            except httpx.TransportError:
                pass
        if proc.poll() is not None:
            out.seek(0)
            pytest.fail(f"serve exited with {proc.returncode}: {out.read()}")
        time.sleep(0.2)
    proc.kill()
    out.seek(0)
    pytest.fail(f"serve did not become ready in {timeout_s:.0f} s: {out.read()}")
