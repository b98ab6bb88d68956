"""``serve`` as a container's PID 1 (the image's ``CMD`` runs ``cascade-proxy serve`` with
no init): the kernel drops a signal PID 1 raises to itself by its default action, so the
SIGTERM that uvicorn (or ``serve``) raises again to exit by it did not end the process.
It went on and exited 0 after a SIGTERM's stop, 130 after a Ctrl-C cut it short, and 3 (a
failed start) after a SIGTERM during the start; the status is now the signal's, 143, as the
README says (proxy/server.py). Run in a PID namespace of its own (``unshare``); skipped
where one cannot be made."""

from __future__ import annotations

import os
import shutil
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
    import asyncio, os, sys
    from proxy.refusals import StartupRefusals
    from proxy.server import serve

    hold, brief = sys.argv[2] == "hold", sys.argv[2] == "brief"

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            await receive()
            print("pid", os.getpid(), flush=True)
            try:
                if hold:
                    await asyncio.Event().wait()  # a start that waits on a database
            except BaseException:
                await send({"type": "lifespan.startup.failed", "message": "cut"})
                raise
            await send({"type": "lifespan.startup.complete"})
            await receive()
            await send({"type": "lifespan.shutdown.complete"})
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"started", "more_body": True})
        if brief:  # a stream that ends while the stop waits for it
            await asyncio.sleep(1.2)
            await send({"type": "http.response.body", "body": b"done"})
            return
        await asyncio.Event().wait()  # a stream that goes on

    port = int(sys.argv[1])
    sys.exit(serve(StartupRefusals(app), host="127.0.0.1", port=port, log_level="info"))
    """
)


def _pid_namespaces() -> bool:
    if shutil.which("unshare") is None or not Path("/proc/self/task").exists():
        return False
    if not (Path("/proc/self/task") / str(os.getpid()) / "children").exists():
        return False  # how the test finds the process inside
    probe = ["unshare", "-Urpf", sys.executable, "-c", "import os; print(os.getpid())"]
    done = subprocess.run(probe, capture_output=True, text=True, timeout=10, check=False)
    return done.stdout.strip() == "1"


pytestmark = pytest.mark.skipif(not _pid_namespaces(), reason="no PID namespace here")


def _child(unshare: int) -> int:
    """The process ``unshare --fork`` started: PID 1 inside, this one outside."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        children = Path(f"/proc/{unshare}/task/{unshare}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.02)
    raise AssertionError("unshare started nothing")


@pytest.mark.parametrize(
    ("signals", "mode", "status"),
    [
        ((signal.SIGTERM,), "serve", 143),
        ((signal.SIGTERM, signal.SIGINT), "serve", 143),
        ((signal.SIGTERM,), "hold", 143),
        ((signal.SIGINT,), "serve", 0),
        # uvicorn raises both again once its stream ended, the SIGTERM first: 143 elsewhere
        ((signal.SIGINT, signal.SIGTERM), "brief", 143),
    ],
    ids=[
        "sigterm",
        "sigterm-then-ctrl-c",
        "sigterm-during-the-start",
        "ctrl-c",
        "ctrl-c-then-sigterm",
    ],
)
def test_pid_one_exits_with_the_stops_signal(
    signals: tuple[signal.Signals, ...], mode: str, status: int
) -> None:
    hold = mode == "hold"
    port = free_port()
    cmd = ["unshare", "-Urpf", sys.executable, "-c", _APP, str(port)]
    proc = subprocess.Popen([*cmd, mode], stdout=subprocess.PIPE, text=True)
    client = None
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().split() == ["pid", "1"]
        inner = _child(proc.pid)
        if not hold:
            deadline = time.monotonic() + 10
            while client is None:
                try:
                    client = socket.create_connection(("127.0.0.1", port), timeout=1)
                except OSError:
                    assert time.monotonic() < deadline and proc.poll() is None, "never served"
                    time.sleep(0.05)
            if len(signals) > 1:  # a stream the first signal's stop waits for
                client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                assert client.recv(4096)
            else:
                client.close()
        for sig in signals:
            time.sleep(0.2)  # the start, or the stop, waits
            os.kill(inner, sig)
        proc.wait(timeout=15)
    finally:
        if client is not None:
            client.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == status
