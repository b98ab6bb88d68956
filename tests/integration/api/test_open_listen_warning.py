"""Regression: ``serve --allow-unauthenticated`` on a non-loopback address warned that anyone
who can reach it can use the providers before it tried to bind, so on a port another process
holds the operator read a security warning for a server that never started, beside the bind
error. The warning now comes from the start, once the address is the server's, after the
banner that says where it listens; a port taken is the one error line alone."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.integration.api.conftest import Records, StartProxy

ROOT = Path(__file__).resolve().parents[3]
WARNING = "with no proxy keys (--allow-unauthenticated)"


def test_a_port_taken_is_the_error_alone(tmp_path: Path) -> None:
    with socket.socket() as taken, socket.socket() as closed:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        closed.bind(("127.0.0.1", 0))  # a database port nothing listens on: never reached
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(tmp_path),
            "PYTHONPATH": str(ROOT),
            "DATABASE_URL": f"postgresql://u:pw@127.0.0.1:{closed.getsockname()[1]}/db",
            "CASCADE_LOG_FORMAT": "text",
        }
        argv = ["serve", "--host", "0.0.0.0", "--port", str(port), "--allow-unauthenticated"]
        done = subprocess.run(
            [sys.executable, "-m", "proxy", *argv],
            env=env,
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=30,
        )
    assert done.returncode != 0, done.stderr
    assert WARNING not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"0.0.0.0:{port}" in lines[0], done.stderr


def test_the_warning_follows_the_banner(
    start_proxy: StartProxy, config_path: Path, records: Records
) -> None:
    start_proxy(config_path, host="0.0.0.0", allow_unauthenticated=True)
    said = [r.getMessage() for r in records.records if r.name.startswith("cascade")]
    banner = next(i for i, line in enumerate(said) if " listening on 0.0.0.0:" in line)
    warnings = [i for i, line in enumerate(said) if WARNING in line]
    assert len(warnings) == 1 and warnings[0] > banner, said
