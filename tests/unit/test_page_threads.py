"""A tool output's page (a grep of up to ``rawCapBytes``, a redaction) is made on threads of
its own, not the event loop's default executor: that one also runs a turn's query
embedding under the turn's retrieval timeout, which a burst of greps queued ahead of it
would run out, every tenant's turn then answering without its retrieved memory."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from proxy.services import toolloop


async def test_a_burst_of_pages_leaves_the_default_executor_free(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()

    def blocked(*args: Any, **kwargs: Any) -> tuple[str, None]:
        release.wait(5)
        return "page", None

    async def stored(*args: Any, **kwargs: Any) -> dict[str, Any]:
        return {"content": "x"}

    monkeypatch.setattr(toolloop, "raw_output_page", blocked)
    monkeypatch.setattr(toolloop.raw_outputs, "fetchrow_raw_output", stored)
    pages = [
        asyncio.create_task(
            toolloop.read_page(
                None, tenant="t", session_id="s", tool_call_id="c", grep="x", max_chars=1000
            )
        )
        for _ in range(40)
    ]
    await asyncio.sleep(0.05)
    try:
        assert await asyncio.wait_for(asyncio.to_thread(lambda: 1), 1) == 1
    finally:
        release.set()
        assert await asyncio.gather(*pages) == ["page"] * 40
