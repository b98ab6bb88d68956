"""A SIGTERM or Ctrl-C while ``serve`` starts ends the start at once, however long the start
would still take (here: a database that takes the connection and never answers, which
asyncpg waits 60 s for). It was held until the start was done: an orchestrator's SIGTERM
went unheeded for the whole wait, until its SIGKILL. The start's cleanup runs (the embedded
PostgreSQL is stopped as on any failed start), one line says why it stopped, and the exit
status is the signal's, as after a stop once serving (README: Stopping). That line is the
last: uvicorn's ``Application startup failed. Exiting.`` (an error, of a start that did not
fail but was stopped) is left out."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.common import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def silent_database() -> Iterator[tuple[int, threading.Event]]:
    """A port that takes connections and never answers, and an event set at the first."""
    listener = socket.create_server(("127.0.0.1", 0))
    reached = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # closed: the test is over
                return
            held.append(conn)
            reached.set()

    threading.Thread(target=accept, daemon=True).start()
    yield listener.getsockname()[1], reached
    listener.close()
    for conn in held:
        conn.close()


@pytest.mark.parametrize(
    ("sig", "status"),
    [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGINT, 128 + signal.SIGINT)],
    ids=["sigterm", "sigint"],
)
def test_a_signal_during_the_start_ends_it(
    silent_database: tuple[int, threading.Event],
    tmp_path: Path,
    sig: signal.Signals,
    status: int,
) -> None:
    port, reached = silent_database
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "PYTHONPATH": str(ROOT),
        "DATABASE_URL": f"postgresql://u:pw-7@127.0.0.1:{port}/db",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy", "serve", "--port", str(free_port())],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert reached.wait(30), "the start never connected to the database"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=10)  # not the 60 s the connection would wait
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == status, err
    assert "Traceback" not in err, err
    lines = err.splitlines()
    said = [i for i, line in enumerate(lines) if "start interrupted" in line]
    assert len(said) == 1 and said[0] == len(lines) - 1, err
    assert " ERROR " not in err, err
