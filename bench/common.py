"""Small helpers every benchmark shares: a free loopback port, the machine line, strict JSON,
the sample statistics every report takes (percentiles, NaN-safe medians and ratios), and
the filler text the synthetic conversations are made of.

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
import random
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "free_port",
    "machine",
    "clean",
    "out_file",
    "emit",
    "percentile",
    "median",
    "summarize",
    "ratio",
    "words_text",
]


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


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0–100) with linear interpolation between closest ranks (numpy's
    default), so p50 of an even-sized sample is the mean of the middle two. NaN when empty."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def median(values: Sequence[float]) -> float:
    """Median ignoring NaNs (a round that produced no sample must not poison the others)."""
    kept = [v for v in values if not math.isnan(v)]
    return percentile(kept, 50) if kept else math.nan


def summarize(values: Sequence[float]) -> dict[str, float]:
    """n, mean, p50, p90, p99 and max of a sample; NaN statistics for an empty one."""
    if not values:
        nan = math.nan
        return {"n": 0, "mean": nan, "p50": nan, "p90": nan, "p99": nan, "max": nan}
    return {
        "n": len(values),
        "mean": sum(values) / len(values),
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "max": max(values),
    }


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, NaN when either is missing or the denominator is not positive,
    so a target that could not be measured reads as unknown rather than as met or failed."""
    if math.isnan(numerator) or math.isnan(denominator) or denominator <= 0:
        return math.nan
    return numerator / denominator


def words_text(rng: random.Random, words: Sequence[str], chars: int) -> str:
    """``chars`` characters of ``words`` drawn by ``rng``, space-separated: text a BPE
    tokenizer sees as prose, reproducible from the generator's seed."""
    out: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(words)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:chars]
