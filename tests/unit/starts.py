"""The proxy's two start commands, run as a process to see how a refused start reads.

``cascade-proxy serve`` and ``uvicorn proxy.app:create_app --factory`` must refuse alike: the
tests that check a refusal's lines run both (``START_COMMANDS``) through :func:`run_start`.
uvicorn's port 1 is never reached: each start they run stops before uvicorn binds. ``serve``
binds and listens on its address first, so it gets a free port of its own: port 1 would
need root, and the starts that run at once would take it from one another.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.common import free_port

FREE_PORT = "<free port>"
"""In a command, the place of a port :func:`run_start` picks free."""

SERVE = ["-m", "proxy", "serve", "--port", FREE_PORT]
UVICORN = ["-m", "uvicorn", "proxy.app:create_app", "--factory", "--port", "1"]
START_COMMANDS = [pytest.param(SERVE, id="serve"), pytest.param(UVICORN, id="uvicorn")]


def run_start(
    command: list[str], env: dict[str, str], cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``command`` under this interpreter with ``env`` alone, its output captured as text."""
    argv = [str(free_port()) if part == FREE_PORT else part for part in command]
    return subprocess.run(
        [sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
