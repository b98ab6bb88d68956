"""Helpers for the lossless-stage integration tests (issue #3).

- :func:`load_transcript`: the first N steps of one real recorded agent run, read in place from
  ``<repo>/../shared/data/trajectories`` (never copied into the repository) and converted to
  OpenAI chat messages by ``bench/trajectories.py``. The test is skipped, with the reason, when
  the folder is absent.
- The client's view of truncation and recovery: :func:`marker_args` parses the paging marker a
  truncated result carries, :func:`read_all` pages a stored output back through
  ``GET /v1/sessions/{id}/tool-outputs/{tool_call_id}`` and reassembles it byte for byte,
  :func:`wait_event` replays a session's persisted events until one shows up, and
  :func:`replay_events` returns all of them.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from bench.trajectories import load
from tests.integration.api.conftest import ProxyServer

__all__ = [
    "ACCEPTANCE_FILE",
    "TRAJECTORIES",
    "api",
    "blob",
    "load_transcript",
    "marker_args",
    "page_slice",
    "read_all",
    "replay_events",
    "sdk",
    "wait_event",
]

TRAJECTORIES = Path(__file__).parents[2].parent / "shared" / "data" / "trajectories"
ACCEPTANCE_FILE = "OpenHands__benchmarks__traj_safety-metrics.json"
"""A web agent whose tool output is ~99% of its context: 6 kB browser-state dumps every other
step (SOURCES.md, file 4)."""

_MARKER = re.compile(r"read_tool_output\((\{[^)]*\})\)")
_HEADER = re.compile(r"\[read_tool_output id=.*? chars (\d+)-(\d+) of (\d+)\]\n")


def load_transcript(steps: int, name: str = ACCEPTANCE_FILE) -> list[dict[str, Any]]:
    """The transcript's messages up to the results of its ``steps``-th assistant turn."""
    path = TRAJECTORIES / name
    if not path.is_file():
        pytest.skip(f"real agent transcript not found at {path} (see SOURCES.md there)")
    messages = [dict(m) for m in load(path)[0].messages]
    turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    if len(turns) <= steps:
        pytest.skip(f"{name} has {len(turns)} assistant turns; the test needs {steps + 1}")
    return messages[: turns[steps]]


_HEX_AS_LETTERS = str.maketrans("0123456789abcdef", "ghijklmnopqrstuv")


def blob(n: int, tag: str) -> str:
    """``n`` chars of distinct, greppable lines, so no two offsets look alike. Each line's
    digest is spelled in letters: a hex one is a random-looking id the proxy's estimate
    counts at a token per 1.4 characters (``cascade/estimate.py``), and these tests' fake
    provider counts characters / 4."""
    lines, size, i = [], 0, 0
    while size < n:
        digest = hashlib.sha256(f"{tag}{i}".encode()).hexdigest().translate(_HEX_AS_LETTERS)
        line = f"{tag}:{i:05d} {digest}\n"
        lines.append(line)
        size += len(line)
        i += 1
    return "".join(lines)[:n]


def sdk(proxy: ProxyServer, sid: str, key: str = "sk-test-client") -> openai.OpenAI:
    """The official SDK, pointed at session ``sid`` through the ``/s/{id}/v1`` base URL."""
    return openai.OpenAI(base_url=f"{proxy.origin}/s/{sid}/v1", api_key=key, max_retries=0)


def api(proxy: ProxyServer, key: str = "sk-test-client") -> httpx.Client:
    return httpx.Client(
        base_url=proxy.origin, headers={"authorization": f"Bearer {key}"}, timeout=10
    )


def marker_args(content: str) -> dict[str, Any] | None:
    """The JSON arguments of the ``read_tool_output(...)`` a message advertises, if any."""
    m = _MARKER.search(content)
    return json.loads(m.group(1)) if m else None


def page_slice(page: str) -> tuple[int, int, int, str]:
    """``(start, end, total, text)`` of one read_tool_output page (header and note removed)."""
    m = _HEADER.match(page)
    assert m, f"not a read_tool_output page: {page[:200]!r}"
    a, b, total = map(int, m.groups())
    return a, b, total, page[m.end() : m.end() + b - a]


def read_all(http: httpx.Client, sid: str, cid: str, limit: int = 700) -> str:
    """Page a stored output back through the tool-outputs API and reassemble it exactly."""
    out, offset = [], 0
    while True:
        r = http.get(
            f"/v1/sessions/{sid}/tool-outputs/{cid}", params={"offset": offset, "limit": limit}
        )
        assert r.status_code == 200, r.text
        a, b, total, text = page_slice(r.json()["page"])
        assert a == offset and b - a <= limit, (a, b, offset)
        out.append(text)
        if b == total:
            return "".join(out)
        assert b > a, f"page at {a} of {total} made no progress"
        offset = b


def wait_event(
    http: httpx.Client,
    sid: str,
    name: str,
    match: Callable[[Mapping[str, Any]], bool] = lambda data: True,
    timeout: float = 5.0,
) -> dict[str, Any]:
    """Replay the session's events from the start (``Last-Event-ID: 0``) until ``name``."""
    deadline = time.monotonic() + timeout
    with http.stream(
        "GET", f"/v1/sessions/{sid}/events", headers={"Last-Event-ID": "0"}, timeout=timeout
    ) as r:
        assert r.status_code == 200, r.read()
        current = None
        try:
            for line in r.iter_lines():
                if line.startswith("event:"):
                    current = line.split(":", 1)[1].strip()
                elif line.startswith("data:") and current == name:
                    data = json.loads(line.split(":", 1)[1])
                    if match(data):
                        return data
                if time.monotonic() > deadline:
                    break
        except httpx.ReadTimeout:
            pass
    pytest.fail(f"no matching {name} event on session {sid} within {timeout} s")


def replay_events(http: httpx.Client, sid: str, idle: float = 0.5) -> list[tuple[str, str]]:
    """Every persisted event of the session as ``(name, raw data)``, read until ``idle`` s of
    silence after the replay (the stream itself stays open for live events)."""
    out: list[tuple[str, str]] = []
    timeout = httpx.Timeout(10.0, read=idle)
    headers = {"Last-Event-ID": "0"}
    with http.stream("GET", f"/v1/sessions/{sid}/events", headers=headers, timeout=timeout) as r:
        assert r.status_code == 200, r.read()
        current = ""
        try:
            for line in r.iter_lines():
                if line.startswith("event:"):
                    current = line.split(":", 1)[1].strip()
                elif line.startswith("data:"):
                    out.append((current, line.split(":", 1)[1].strip()))
        except httpx.ReadTimeout:
            pass
    return out
