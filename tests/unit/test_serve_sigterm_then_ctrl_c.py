"""A Ctrl-C after a SIGTERM, during the stop's wait: uvicorn, its loop still running,
raises the captured signals again, the SIGTERM last, by its default action: the process
died there, before the lifespan's task was cancelled, so its cleanup (the embedded
PostgreSQL's stop among it) never ran, unlike after two Ctrl-Cs. ``serve`` now exits by
the SIGTERM once the loop has closed (proxy/server.py)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bench.common import free_port

_APP = textwrap.dedent(
    """
    import asyncio, pathlib, sys
    from proxy.server import serve

    marker = pathlib.Path(sys.argv[1])

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            try:
                while (await receive())["type"] != "lifespan.shutdown":
                    await send({"type": "lifespan.startup.complete"})
                await send({"type": "lifespan.shutdown.complete"})
            finally:
                marker.write_text("closed")  # the lifespan's cleanup
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"started", "more_body": True})
        await asyncio.Event().wait()  # a stream that goes on

    sys.exit(serve(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="info"))
    """
)


@pytest.mark.parametrize(
    ("first", "status"),
    [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGINT, 130)],
    ids=["sigterm-then-ctrl-c", "ctrl-c-twice"],
)
def test_a_ctrl_c_during_the_stop_runs_the_cleanup_and_exits_by_the_stops_signal(
    tmp_path: Path, first: signal.Signals, status: int
) -> None:
    marker, port = tmp_path / "closed", free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", _APP, str(marker), str(port)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                client = socket.create_connection(("127.0.0.1", port), timeout=1)
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "never served"
                time.sleep(0.05)
        with client:
            client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert b"started" in client.recv(4096) or b"started" in client.recv(4096)
            proc.send_signal(first)
            assert proc.stderr is not None
            while "Shutting down" not in proc.stderr.readline():  # taken before the next
                assert proc.poll() is None, "exited on the first signal alone"
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == status
    assert marker.exists(), "the lifespan's cleanup never ran"
