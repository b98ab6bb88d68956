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
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

import httpx

from bench.common import free_port

__all__ = ["VERSION", "REQUIREMENT", "VENV", "HeadroomEnv", "ensure", "start", "serving", "main"]

VERSION = "0.42.0"
REQUIREMENT = f"headroom-ai[proxy]=={VERSION}"
BENCH = Path(__file__).resolve().parent
VENV = BENCH / ".headroom-venv"
INSTALL_TIMEOUT = 1800.0
NOTE = "offline: Kompress (ML) unavailable, token counts estimated"


@dataclass(frozen=True, slots=True)
class HeadroomEnv:
    """Whether Headroom can be run, and if not, why (shown in the results)."""

    available: bool
    reason: str = ""
    executable: str = ""
    version: str = ""


def _version(python: Path) -> str:
    probe = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('headroom-ai'))"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return probe.stdout.strip() if probe.returncode == 0 else ""


def ensure(*, install: bool = True, venv: Path = VENV) -> HeadroomEnv:
    """The Headroom venv at :data:`VERSION`, creating it or installing the pin when it is not."""
    python = venv / "bin" / "python"
    executable = venv / "bin" / "headroom"
    found = _version(python) if executable.exists() else ""
    if found == VERSION:
        return HeadroomEnv(True, executable=str(executable), version=found)
    if not install:
        has = f"has headroom-ai {found}, the bench pins {VERSION}" if found else "has no Headroom"
        return HeadroomEnv(False, reason=f"{venv} {has} (run with --install)")
    try:
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        pip = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", REQUIREMENT],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return HeadroomEnv(False, reason=f"could not create the Headroom venv: {exc}")
    if pip.returncode != 0:
        tail = " | ".join(pip.stderr.strip().splitlines()[-4:])
        return HeadroomEnv(False, reason=f"pip install {REQUIREMENT} failed: {tail}")
    version = _version(python)
    if not executable.exists() or version != VERSION:
        return HeadroomEnv(False, reason=f"pip installed headroom-ai {version!r}, not {VERSION}")
    return HeadroomEnv(True, executable=str(executable), version=version)


def start(
    env: HeadroomEnv, *, port: int, upstream: str, home: Path, log: IO[bytes]
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
def serving(env: HeadroomEnv, upstream: str, timeout: float = 300.0) -> Iterator[str]:
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
