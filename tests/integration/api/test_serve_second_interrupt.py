"""Regression: a second Ctrl-C during ``cascade-proxy serve``'s graceful shutdown printed
screenfuls of tracebacks. uvicorn answers it by giving up the wait for the requests in
flight and ending its loop with them running, and every task cancelled there logged its
cancellation as an error. It now quits with one line saying what it cut, no traceback, and
status 130; one Ctrl-C still lets the stream finish and exits 0 (proxy/server.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from bench.common import free_port
from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream

CHUNKS, CHUNK_DELAY = 20, 0.1  # a 2 s answer, still streaming when Ctrl-C comes


def _serve(db_dsn: str, config: Path, cwd: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cli = Path(sys.executable).with_name("cascade-proxy")
    env = {**os.environ, "CASCADE_WATCH_CONFIG": "false", "CASCADE_LOG_FORMAT": "text"}
    argv = [str(cli), "serve", "--port", str(port), "--config", str(config)]
    proc = subprocess.Popen(
        [*argv, "--database-url", db_dsn],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
    )
    origin = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(f"{origin}/healthz", timeout=1)
            return proc, origin
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(proc.communicate()[1].decode()[-2000:]) from None
            time.sleep(0.1)


@pytest.mark.parametrize("interrupts", [1, 2])
def test_ctrl_c_during_a_stream(
    db_dsn: str, config_path: Path, fake_upstream: FakeUpstream, tmp_path: Path, interrupts: int
) -> None:
    fake_upstream.script(reply("word " * CHUNKS, chunks=CHUNKS, chunk_delay=CHUNK_DELAY))
    proc, origin = _serve(db_dsn, config_path, tmp_path)
    lines: list[str] = []
    ended = threading.Event()

    def stream() -> None:
        body = {
            "model": "gpt-fake",
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        }
        headers = {"authorization": "Bearer sk-test-client"}
        try:
            with httpx.stream(
                "POST", f"{origin}/v1/chat/completions", json=body, headers=headers, timeout=30
            ) as r:
                lines.extend(r.iter_lines())
        except httpx.HTTPError as exc:  # cut by the second Ctrl-C
            lines.append(repr(exc))
        ended.set()

    client = threading.Thread(target=stream)
    try:
        client.start()
        deadline = time.monotonic() + 10
        while len(lines) < 3 and time.monotonic() < deadline:  # the stream is under way
            time.sleep(0.02)
        for _ in range(interrupts):
            time.sleep(0.3)
            proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
        client.join(10)
    stderr = err.decode()
    assert "Traceback" not in stderr, stderr[-3000:]
    if interrupts == 1:
        assert proc.returncode == 0, stderr[-2000:]
        assert "data: [DONE]" in lines  # the stream ran to its end
    else:
        assert proc.returncode == 130, stderr[-2000:]
        said = [line for line in stderr.splitlines() if "interrupted again" in line]
        assert len(said) == 1, stderr[-2000:]
        assert "cutting 1 open connection(s)" in said[0]
        assert "data: [DONE]" not in lines
