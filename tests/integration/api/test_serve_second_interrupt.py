"""Regression: a second Ctrl-C during ``cascade-proxy serve``'s graceful shutdown printed
screenfuls of tracebacks. uvicorn answers it by giving up the wait for the requests in
flight and ending its loop with them running, and every task cancelled there logged its
cancellation as an error. It now quits with one line saying what it cut, no traceback, and
status 130 (after a SIGTERM, a Ctrl-C quits the same way, the status the SIGTERM's); one
Ctrl-C still lets the stream finish and exits 0; a second SIGTERM lets it finish too, says
the stop goes on, and the exit is by SIGTERM (proxy/server.py)."""

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
from tests.fakes.replies import Pacer, reply
from tests.fakes.upstream import FakeUpstream

CHUNKS = 20


def _serve(db_dsn: str, config: Path, cwd: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cli = Path(sys.executable).with_name("cascade-proxy")
    env = {**os.environ, "CASCADE_WATCH_CONFIG": "false", "CASCADE_LOG_FORMAT": "text"}
    argv = [str(cli), "serve", "--port", str(port), "--config", str(config)]
    proc = subprocess.Popen(
        [*argv, "--database-url", db_dsn],
        env=env,
        stdout=subprocess.DEVNULL,
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
                assert proc.stderr is not None
                raise AssertionError(proc.stderr.read().decode()[-2000:]) from None
            time.sleep(0.1)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (signal.SIGINT, None),
        (signal.SIGINT, signal.SIGINT),
        (signal.SIGTERM, signal.SIGINT),
        (signal.SIGTERM, signal.SIGTERM),
    ],
    ids=["ctrl-c", "ctrl-c-twice", "sigterm-then-ctrl-c", "sigterm-twice"],
)
def test_ctrl_c_during_a_stream(
    db_dsn: str,
    config_path: Path,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    first: signal.Signals,
    second: signal.Signals | None,
) -> None:
    # The answer stops after its role frame and two words until the test lets it go on:
    # still streaming when each Ctrl-C comes.
    pacer = Pacer()
    pacer.allow(2)
    fake_upstream.script(reply("word " * CHUNKS, chunks=CHUNKS, pacer=pacer))
    proc, origin = _serve(db_dsn, config_path, tmp_path)
    lines: list[str] = []
    ended = threading.Event()
    err: list[str] = []

    def read_stderr() -> None:
        assert proc.stderr is not None
        err.extend(line.decode() for line in proc.stderr)

    def said(text: str) -> bool:
        return any(text in line for line in list(err))

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
    reader = threading.Thread(target=read_stderr)
    try:
        client.start()
        reader.start()
        deadline = time.monotonic() + 10
        while len(lines) < 3 and time.monotonic() < deadline:  # the stream is under way
            time.sleep(0.02)
        proc.send_signal(first)
        # the first Ctrl-C is handled (a second one sent before might be taken for it)
        while not said("Shutting down") and time.monotonic() < deadline + 10:
            time.sleep(0.02)
        assert said("Shutting down"), err
        if second is not None:
            proc.send_signal(second)
        if second == signal.SIGTERM:  # taken, said, and the stop goes on
            while not said("SIGTERM again") and time.monotonic() < deadline + 10:
                time.sleep(0.02)
        if second != signal.SIGINT:
            pacer.allow(CHUNKS + 10)  # the rest of the answer, after the signal(s)
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
        client.join(10)
        reader.join(10)
    stderr = "".join(err)
    assert "Traceback" not in stderr, stderr[-3000:]
    if second != signal.SIGINT:
        assert proc.returncode == (0 if first == signal.SIGINT else -first), stderr[-2000:]
        assert "data: [DONE]" in lines  # the stream ran to its end
        again = [line for line in stderr.splitlines() if "SIGTERM again" in line]
        assert len(again) == (second == signal.SIGTERM), stderr[-2000:]
    else:
        # after a SIGTERM the process still ends by it, as uvicorn re-raises it
        assert proc.returncode == (130 if first == signal.SIGINT else -first), stderr[-2000:]
        again = [line for line in stderr.splitlines() if "interrupted again" in line]
        assert len(again) == 1, stderr[-2000:]
        assert "cutting 1 open connection(s)" in again[0]
        assert "data: [DONE]" not in lines
