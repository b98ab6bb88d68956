"""A proxy killed outright leaves its pid in the embedded server's list of holders; the next
start drops it (``pgembed.forget_dead_handles``), so that run's clean exit stops the server
instead of leaving it running for good."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.pgembed import start_embedded

_HOLD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from proxy.pgembed import start_embedded
    start_embedded(Path(sys.argv[1]))
    print("up", flush=True)
    time.sleep(120)
    """
)


def _postmaster(data_dir: Path) -> int | None:
    """The running postmaster's pid, from its pid file (None when it is not running)."""
    try:
        pid = int((data_dir / "pgdata" / "postmaster.pid").read_text().split()[0])
        os.kill(pid, 0)
    except (FileNotFoundError, IndexError, ValueError, ProcessLookupError):
        return None
    return pid


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """Outside pytest's ``pytest-of-<user>`` (see test_embedded_tuning); a server still
    running at the end is stopped, by its pid."""
    with tempfile.TemporaryDirectory(prefix="cascade-holders-") as path:
        yield Path(path)
        pid = _postmaster(Path(path))
        if pid is not None:
            os.kill(pid, signal.SIGINT)  # fast shutdown
            for _ in range(100):
                if _postmaster(Path(path)) is None:
                    break
                time.sleep(0.1)


def test_a_start_after_a_killed_holder_stops_the_server_at_its_exit(data_dir: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(data_dir)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "up"
    finally:
        holder.kill()  # SIGKILL: pgserver's exit hook never runs
        holder.wait(30)
    running = _postmaster(data_dir)
    assert running is not None  # the killed holder left it up
    pids = (data_dir / "pgdata" / ".handle_pids.json").read_text()
    assert str(holder.pid) in pids  # and its pid in the list

    _, server = start_embedded(data_dir)  # attaches to the running server
    assert _postmaster(data_dir) == running
    server.cleanup()  # the last live holder lets go

    assert _postmaster(data_dir) is None
