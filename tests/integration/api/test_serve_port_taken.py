"""Regression: ``cascade-proxy serve`` on a port another process holds logged its banner,
"listening on ...", and only then uvicorn's bind error, so the operator read both that it
listened and that it failed. The banner now comes once the socket is bound; a port taken is
one line naming the address, and a non-zero exit (proxy/server.py). So does the warning of
``--allow-unauthenticated`` on a non-loopback address (test_open_listen_warning.py), which
came first, for a server that never started."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.fakes.upstream import FakeUpstream


def test_a_port_taken_is_one_error_and_no_banner(
    db_dsn: str, config_path: Path, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cli = Path(sys.executable).with_name("cascade-proxy")
        env = {**os.environ, "CASCADE_WATCH_CONFIG": "false", "CASCADE_LOG_FORMAT": "text"}
        argv = [str(cli), "serve", "--host", "0.0.0.0", "--port", str(port)]
        argv.append("--allow-unauthenticated")
        done = subprocess.run(
            [*argv, "--config", str(config_path), "--database-url", db_dsn],
            env=env,
            capture_output=True,
            cwd=tmp_path,
            timeout=60,
        )
    stderr = done.stderr.decode()
    assert done.returncode != 0, stderr
    assert "listening on" not in stderr, stderr  # the banner's, and the warning's
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, stderr
    assert f"0.0.0.0:{port}" in errors[0] and "in use" in errors[0], stderr
