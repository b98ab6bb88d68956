"""Small helpers every benchmark shares: a free loopback port, the machine line, strict JSON.

Importing this module needs nothing beyond what serving installs, so the test suite (and
tests that only want :func:`free_port`) can import it without the bench extra; ``psutil``
is imported where the machine line is built.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import socket
from pathlib import Path
from typing import Any

__all__ = ["free_port", "machine", "clean", "out_file", "emit"]


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def machine() -> str:
    """'2 cores (Intel Xeon …), 24 GiB': what a reader needs to compare runs."""
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    import psutil  # the bench extra installs it

    mem = psutil.virtual_memory().total / 2**30
    return f"{os.cpu_count()} cores ({model or platform.machine()}), {mem:.0f} GiB"


def clean(value: Any) -> Any:
    """NaN (an unmeasured number) becomes null, so the JSON is strict."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


def out_file(path: Path, default_name: str) -> Path:
    """Where a benchmark writes its JSON: ``path``, or ``path / default_name`` when ``path``
    is an existing directory (a run of many minutes must not end in IsADirectoryError)."""
    return path / default_name if path.is_dir() else path


def emit(result: Any, out: Path | None, default_name: str) -> None:
    """Print a benchmark's JSON result, and write it to ``out`` (a file, or a directory to
    write ``default_name`` into) when given."""
    text = json.dumps(result, indent=2)
    print(text)
    if out is not None:
        out_file(out, default_name).write_text(text + "\n")
