"""A control server for the soak: uvicorn, as the proxy runs it, in its own process, whose
event loop is kept busy but never blocked, answering every GET with ``{"status":"ok"}``.

Its loop works in slices of ``SLICE`` seconds of CPU with as long a pause between them, so,
like the proxy's under load, it is seldom idle and competes for the CPU; but it never holds
the loop for more than a slice. The soak probes it the same way as the proxy's ``/healthz``
in the same run, so what a starved machine and the probing client cost shows in both, and
only what the proxy's loop adds beyond a busy loop that keeps yielding is held to the bar.

Run: ``python -m tests.reliability.control_server PORT``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from bench.common import free_port

SLICE = 0.001
_BODY = b'{"status":"ok"}'
_ROOT = Path(__file__).resolve().parents[2]


def wait_healthy(
    proc: subprocess.Popen[Any], origin: str, timeout: float, exited: Callable[[], str]
) -> None:
    """Wait until ``origin``'s ``/healthz`` answers 200; fail with ``exited()`` if ``proc``
    ends first, or once ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, exited()
        try:
            if httpx.get(f"{origin}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"{origin} did not start within {timeout} s"
        time.sleep(0.1)


def terminate(proc: subprocess.Popen[Any]) -> None:
    """Stop ``proc`` if it still runs: SIGTERM, then SIGKILL after 10 s without an exit."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


async def _busy() -> None:
    while True:
        end = time.perf_counter() + SLICE
        while time.perf_counter() < end:
            pass
        await asyncio.sleep(SLICE)


@contextlib.asynccontextmanager
async def _lifespan() -> AsyncIterator[None]:
    task = asyncio.create_task(_busy())
    try:
        yield
    finally:
        task.cancel()


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await receive()
        async with _lifespan():
            await send({"type": "lifespan.startup.complete"})
            await receive()
        await send({"type": "lifespan.shutdown.complete"})
        return
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": _BODY})


class ControlServer:
    """The control server as a subprocess on loopback."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> ControlServer:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.reliability.control_server", str(self.port)],
            cwd=_ROOT,
            env={**os.environ, "PYTHONPATH": str(_ROOT)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_healthy(self.proc, self.origin, timeout, lambda: "the control server exited")
        return self

    def stop(self) -> None:
        if self.proc is not None:
            terminate(self.proc)


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
