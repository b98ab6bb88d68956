"""LiteLLM's proxy in its own virtualenv, so it is never a dependency of Cascade.

``python -m bench.litellm_env [--install]`` creates ``bench/.litellm-venv`` (gitignored) with
``litellm[proxy]`` at :data:`VERSION` from PyPI and prints what it found as JSON.

The version is pinned because LiteLLM's cost per request moves between releases by more than
the ratios the overhead bench checks, so ratios from different releases do not compare; the
results name the version they ran against. :func:`ensure` installs on first use, and again
when the venv holds another version, and reports, never raises: when LiteLLM cannot be
installed or started (no network, a broken release), the benchmark records the reason and
drops the column. :func:`start` runs ``litellm --config bench/litellm_config.yaml`` routing
``bench-model`` to the fake upstream (``openai/`` provider, ``api_base`` from
``CASCADE_BENCH_UPSTREAM``), with no database, no callbacks, telemetry off, the cost map read
locally instead of fetched, and uvicorn's per-request access log silenced (``LITELLM_LOG=ERROR``)
so the comparison is not tilted by logging. LiteLLM refuses to start without a master key, so
the caller passes one and the load generator sends it as the bearer token.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import IO

from bench import pinned_venv
from bench.pinned_venv import Pin, PinnedEnv

__all__ = ["VERSION", "REQUIREMENT", "VENV", "CONFIG", "PIN", "ensure", "start", "main"]

VERSION = "1.108.7"
REQUIREMENT = f"litellm[proxy]=={VERSION}"
BENCH = Path(__file__).resolve().parent
VENV = BENCH / ".litellm-venv"
CONFIG = BENCH / "litellm_config.yaml"
INSTALL_TIMEOUT = 900.0


PIN = Pin("LiteLLM", "litellm", VERSION, REQUIREMENT, "litellm", INSTALL_TIMEOUT)


def ensure(*, install: bool = True, venv: Path = VENV) -> PinnedEnv:
    """The LiteLLM venv at :data:`VERSION`, creating it or installing the pin when it is not."""
    return pinned_venv.ensure(PIN, install=install, venv=venv)


def start(
    env: PinnedEnv, *, port: int, upstream: str, master_key: str, log: IO[bytes]
) -> subprocess.Popen[bytes]:
    """Start the proxy on 127.0.0.1:``port`` routing to ``upstream`` (e.g. ``http://…/v1``).

    The process gets its own session so the caller can stop it and anything it spawns."""
    if not env.available:
        raise RuntimeError(f"LiteLLM is not available: {env.reason}")
    child_env = {
        **os.environ,
        "CASCADE_BENCH_UPSTREAM": upstream,
        "LITELLM_MASTER_KEY": master_key,
        "LITELLM_TELEMETRY": "False",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
        "LITELLM_MODE": "PRODUCTION",
        "DISABLE_ADMIN_UI": "True",
        "NO_DOCS": "True",
    }
    for unset in ("DATABASE_URL", "REDIS_HOST", "REDIS_URL"):
        child_env.pop(unset, None)
    return subprocess.Popen(
        [env.executable, "--config", str(CONFIG), "--host", "127.0.0.1", "--port", str(port)],
        env=child_env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=str(BENCH),
        start_new_session=True,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--install", action="store_true", help="create the venv if missing")
    args = parser.parse_args(argv)
    print(json.dumps(asdict(ensure(install=args.install))))


if __name__ == "__main__":
    main()
