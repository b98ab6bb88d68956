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
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

__all__ = ["VERSION", "REQUIREMENT", "VENV", "CONFIG", "LiteLLMEnv", "ensure", "start", "main"]

VERSION = "1.108.7"
REQUIREMENT = f"litellm[proxy]=={VERSION}"
BENCH = Path(__file__).resolve().parent
VENV = BENCH / ".litellm-venv"
CONFIG = BENCH / "litellm_config.yaml"
INSTALL_TIMEOUT = 900.0


@dataclass(frozen=True, slots=True)
class LiteLLMEnv:
    """Whether LiteLLM can be run, and if not, why (shown in the results)."""

    available: bool
    reason: str = ""
    executable: str = ""
    version: str = ""


def _version(python: Path) -> str:
    probe = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return probe.stdout.strip() if probe.returncode == 0 else ""


def _tail(text: str, lines: int = 8) -> str:
    kept = [ln for ln in text.splitlines() if ln.strip() and "is ignored: it is neither" not in ln]
    return " | ".join(kept[-lines:])


def ensure(*, install: bool = True, venv: Path = VENV) -> LiteLLMEnv:
    """The LiteLLM venv at :data:`VERSION`, creating it or installing the pin when it is not."""
    python = venv / "bin" / "python"
    executable = venv / "bin" / "litellm"
    found = _version(python) if executable.exists() else ""
    if found == VERSION:
        return LiteLLMEnv(True, executable=str(executable), version=found)
    if not install:
        has = f"has litellm {found}, the bench pins {VERSION}" if found else "has no LiteLLM"
        return LiteLLMEnv(False, reason=f"{venv} {has} (run with --install)")
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
        return LiteLLMEnv(False, reason=f"could not create the LiteLLM venv: {exc}")
    if pip.returncode != 0:
        return LiteLLMEnv(False, reason=f"pip install {REQUIREMENT} failed: {_tail(pip.stderr)}")
    version = _version(python)
    if not executable.exists() or not version:
        return LiteLLMEnv(False, reason="litellm installed but its CLI is missing")
    if version != VERSION:
        return LiteLLMEnv(False, reason=f"pip installed litellm {version}, not {VERSION}")
    return LiteLLMEnv(True, executable=str(executable), version=version)


def start(
    env: LiteLLMEnv, *, port: int, upstream: str, master_key: str, log: IO[bytes]
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
