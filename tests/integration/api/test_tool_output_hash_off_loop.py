"""The tool-outputs API's read of a long result by pinned handle, with nothing kept, writes
the result's chain hash off the server's event loop (``client_form.hashes_to``): the hash of
megabytes on the loop would hold every stream on the replica meanwhile."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from proxy import history as chain
from proxy.services import raw_cache
from tests.integration.api.sessions_helpers import chat, settled, user
from tests.integration.transcripts import blob

OUTPUT = blob(100_000, "long")


def _on_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def test_a_pinned_reads_long_hash_runs_off_the_loop(
    http: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    call = {"id": "call_0", "type": "function", "function": {"name": "cat", "arguments": "{}"}}
    history = [
        user("read it"),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_0", "content": OUTPUT},
    ]
    chat(http, history, sid="long")
    settled(http, "long", 4)
    raw_cache.clear()
    loops: list[bool] = []
    write = chain.dumps_sorted

    def canonical(msg: Any, levels: int | None = None) -> bytes:
        if len(str(msg.get("content"))) >= len(OUTPUT):
            loops.append(_on_loop())
        return write(msg, levels=levels)

    monkeypatch.setattr(chain, "dumps_sorted", canonical)
    resp = http.get("/v1/sessions/long/tool-outputs/call_0@2", params={"limit": 40})
    assert resp.status_code == 200, resp.text
    assert resp.json()["total_chars"] == len(OUTPUT)
    assert loops and not any(loops), loops
