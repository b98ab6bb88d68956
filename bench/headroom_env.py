"""Headroom's proxy in its own virtualenv: the replay's reference row (``--policies headroom``).

Headroom (PyPI ``headroom-ai``) is a context-optimising proxy; issue 23 compares Cascade with
it on the replay transcripts. ``python -m bench.headroom_env [--install]`` creates
``bench/.headroom-venv`` (gitignored) with ``headroom-ai[proxy]`` at :data:`VERSION` and prints
what it found as JSON. Its proxy extra pulls in LiteLLM, transformers and onnxruntime (about
900 MB), so it is never a dependency of Cascade, of the test extra or of the bench extra, and
the replay installs it only when the ``headroom`` policy is asked for.

It runs offline: Hugging Face is told so (``HF_HUB_OFFLINE``), so its ML text compressor
(Kompress) finds no model and is skipped, and tiktoken's o200k file cannot be fetched, so it
counts tokens by its own estimate; LiteLLM falls back to its bundled cost map. Telemetry, the
semantic cache and rate limiting are off. :func:`start` serves it on 127.0.0.1 in front of
the replay upstream, in its default (``cache``) mode, with a throwaway ``HOME`` for its state.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import IO

import httpx

from bench import pinned_venv
from bench.common import free_port
from bench.pinned_venv import Pin, PinnedEnv

__all__ = ["VERSION", "REQUIREMENT", "VENV", "PIN", "ensure", "start", "serving", "main"]

VERSION = "0.42.0"
REQUIREMENT = f"headroom-ai[proxy]=={VERSION}"
BENCH = Path(__file__).resolve().parent
VENV = BENCH / ".headroom-venv"
INSTALL_TIMEOUT = 1800.0
NOTE = "offline: Kompress (ML) unavailable, token counts estimated"


PIN = Pin("Headroom", "headroom-ai", VERSION, REQUIREMENT, "headroom", INSTALL_TIMEOUT)


def ensure(*, install: bool = True, venv: Path = VENV) -> PinnedEnv:
    """The Headroom venv at :data:`VERSION`, creating it or installing the pin when it is not."""
    return pinned_venv.ensure(PIN, install=install, venv=venv)


def start(
    env: PinnedEnv, *, port: int, upstream: str, home: Path, log: IO[bytes]
) -> subprocess.Popen[bytes]:
    """Start ``headroom proxy`` on 127.0.0.1:``port`` routing chat completions to ``upstream``
    (its root URL, without ``/v1``). The process gets its own session so the caller can stop
    it and anything it spawns."""
    if not env.available:
        raise RuntimeError(f"Headroom is not available: {env.reason}")
    child_env = {
        **os.environ,
        "HOME": str(home),
        "OPENAI_API_KEY": "x",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HEADROOM_TELEMETRY": "off",
        "DO_NOT_TRACK": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    cmd = [env.executable, "proxy", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--openai-api-url", upstream, "--no-cache", "--no-rate-limit"]
    return subprocess.Popen(
        cmd, env=child_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


@contextmanager
def serving(env: PinnedEnv, upstream: str, timeout: float = 300.0) -> Iterator[str]:
    """Headroom's proxy in front of ``upstream`` for the block; yields its ``/v1`` URL."""
    with tempfile.TemporaryDirectory(prefix="headroom-replay-") as tmp:
        port = free_port()
        with (Path(tmp) / "headroom.log").open("wb") as log:
            proc = start(env, port=port, upstream=upstream, home=Path(tmp), log=log)
            try:
                deadline = time.monotonic() + timeout
                while True:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        tail = (Path(tmp) / "headroom.log").read_text(errors="replace")[-2000:]
                        raise RuntimeError(f"headroom proxy did not start:\n{tail}")
                    try:
                        if httpx.get(f"http://127.0.0.1:{port}/livez", timeout=2).is_success:
                            break
                    except httpx.HTTPError:
                        pass
                    time.sleep(0.5)
                yield f"http://127.0.0.1:{port}/v1"
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGTERM)
                    try:
                        proc.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait(timeout=10)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--install", action="store_true", help="create the venv if missing")
    args = parser.parse_args(argv)
    print(json.dumps(asdict(ensure(install=args.install))))


if __name__ == "__main__":
    main()
