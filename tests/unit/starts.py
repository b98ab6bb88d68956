"""The proxy's two start commands, run as a process to see how a refused start reads.

``cascade-proxy serve`` and ``uvicorn proxy.app:create_app --factory`` must refuse alike: the
tests that check a refusal's lines run both (``START_COMMANDS``) through :func:`run_start`.
Port 1 is never listened on: each start they run stops before (``serve`` binds its
address first; where it may not bind port 1, it stops there, after the factory's lines).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SERVE = ["-m", "proxy", "serve", "--port", "1"]
UVICORN = ["-m", "uvicorn", "proxy.app:create_app", "--factory", "--port", "1"]
START_COMMANDS = [pytest.param(SERVE, id="serve"), pytest.param(UVICORN, id="uvicorn")]


def run_start(
    command: list[str], env: dict[str, str], cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``command`` under this interpreter with ``env`` alone, its output captured as text."""
    return subprocess.run(
        [sys.executable, *command], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
