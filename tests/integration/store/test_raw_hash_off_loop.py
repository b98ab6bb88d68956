"""A long tool result's chain hash, which ties a row to what the client sent, is written off
the event loop (``client_form.hashes_to``): a read with nothing kept of a whole row, by
pinned handle or by bare id, lets every other coroutine on the loop run meanwhile."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from proxy import history
from proxy.cascade.redaction import compile_patterns
from proxy.services import raw_cache, toolloop
from tests.integration.store.helpers import S, T, insert_messages, rows_for, tool_history

TEXT = "".join(f"{i:06d} whole result line\n" for i in range(20_000))  # 500,000 characters


@pytest.mark.parametrize("handle", ["c1@2", "c1"])
async def test_a_long_results_hash_lets_the_loop_run(
    conn: Any, handle: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(tool_history(TEXT)))
    raw_cache.clear()
    started, progressed = threading.Event(), threading.Event()
    waited: list[bool] = []

    def canonical(msg: Any, levels: int | None = None) -> bytes:
        if len(str(msg.get("content"))) >= len(TEXT):  # the long result: wait for the loop
            started.set()
            waited.append(progressed.wait(1.0))  # on the loop, nothing else runs: times out
        return write(msg, levels=levels)

    write = history.dumps_sorted
    monkeypatch.setattr(history, "dumps_sorted", canonical)

    async def other() -> None:
        while not started.is_set():
            await asyncio.sleep(0.001)
        progressed.set()

    beside = asyncio.create_task(other())
    page = await toolloop.read_page(
        conn,
        tenant=T,
        session_id=S,
        tool_call_id=handle,
        offset=0,
        max_chars=2000,
        patterns=compile_patterns(()),
    )
    beside.cancel()
    raw_cache.clear()
    assert page is not None and "000000 whole result line" in page
    assert waited and all(waited), waited


async def test_a_short_results_hash_stays_on_the_loop(
    conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the hop to a thread costs more than a short text's hash
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(tool_history("short")))
    threads: list[bool] = []

    def canonical(msg: Any, levels: int | None = None) -> bytes:
        threads.append(threading.current_thread() is threading.main_thread())
        return write(msg, levels=levels)

    write = history.dumps_sorted
    monkeypatch.setattr(history, "dumps_sorted", canonical)
    raw_cache.clear()
    page = await toolloop.read_page(
        conn, tenant=T, session_id=S, tool_call_id="c1@2", offset=0, max_chars=2000
    )
    raw_cache.clear()
    assert page is not None and "short" in page
    assert threads and all(threads), threads
