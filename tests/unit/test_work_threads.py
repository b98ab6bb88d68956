"""A tool output's page (a grep of up to ``rawCapBytes``, a redaction) is made on the work
threads (``proxy.work_threads``), not the event loop's default executor: that one also runs
a turn's query embedding under the turn's retrieval timeout, which a burst of greps queued
ahead of it would run out, every tenant's turn then answering without its retrieved
memory."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import uuid
from typing import Any

import pytest

from proxy.services import toolloop
from proxy.work_threads import PAGES, off_loop
from tests.unit.raw_reads import stub_reads


async def test_a_burst_of_pages_leaves_the_default_executor_free(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()

    def blocked(*args: Any, **kwargs: Any) -> tuple[str, None]:
        release.wait(5)
        return "page", None

    async def stored(*args: Any, **kwargs: Any) -> dict[str, Any]:
        return {"content": "x", "original_bytes": 1, "capped": False}

    monkeypatch.setattr(toolloop, "raw_output_page", blocked)

    async def version(*args: Any, **kwargs: Any) -> str:
        return str(uuid.uuid4())  # never a kept text's: each read is the stub's

    stub_reads(monkeypatch, stored, version)
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


async def test_a_page_still_queued_when_its_request_is_cancelled_is_never_made() -> None:
    release = threading.Event()
    made: list[int] = []

    def page(n: int) -> int:
        release.wait(5)
        made.append(n)
        return n

    running = [asyncio.create_task(off_loop(PAGES, page, n)) for n in range(2)]
    queued = asyncio.create_task(off_loop(PAGES, page, 99))
    await asyncio.sleep(0.05)
    queued.cancel()
    await asyncio.sleep(0)
    release.set()
    assert sorted(await asyncio.gather(*running)) == [0, 1]
    await asyncio.sleep(0.05)
    assert 99 not in made and queued.cancelled()


async def test_a_page_runs_in_its_callers_context_and_raises_to_it() -> None:
    """The page's log lines carry the request's id (a context variable), and a page that
    fails raises its own error, traceback and all, where the request awaits it, which the
    request's error handling then answers and logs as any other."""
    request = contextvars.ContextVar("request", default="none")
    request.set("req-1")
    seen: list[str] = []

    def page() -> None:
        seen.append(request.get())
        raise ValueError("bad page")

    with pytest.raises(ValueError, match="bad page") as raised:
        await off_loop(PAGES, page)
    assert seen == ["req-1"]
    assert raised.traceback[-1].name == "page"  # the page's own frame: its cause
    assert request.get() == "req-1"
