"""Two first reads of one stored output side by side, each on its own connection, redact its
copy once (``raw_cache._redacted``): the later read waits for the redaction under way, and
both pages are the ones a fresh read gives."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import asyncpg

from bench.raw_pages import before, hostile
from proxy.cascade.redaction import compile_patterns, redact
from proxy.services import raw_cache, toolloop
from tests.integration.store.helpers import S, T, insert_messages, rows_for, user

PATTERNS = compile_patterns(())


async def test_two_first_reads_side_by_side_redact_once(
    conn: Any, pool: asyncpg.Pool, monkeypatch: Any
) -> None:
    text = hostile(60_000)
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    history = [user("look"), {"role": "assistant", "content": None, "tool_calls": [call]}]
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(history))
    await conn.execute(
        "INSERT INTO messages (tenant, session_id, pos, hash, role, message, tool_call_id)"
        " VALUES ($1, $2, 2, 'h', 'tool', $3, 'c1')",
        T,
        S,
        {"role": "tool", "tool_call_id": "c1", "content": text[:50] + " [cut]"},
    )
    await conn.execute(
        "INSERT INTO tool_raw_outputs (tenant, session_id, tool_call_id, content,"
        " original_bytes) VALUES ($1, $2, 'c1', $3, $4)",
        T,
        S,
        text,
        len(text),
    )
    calls, go = [], threading.Event()

    def held(text: str, patterns: Any) -> tuple[str, int]:
        calls.append(1)
        go.wait(5)  # held until both reads have asked
        return redact(text, patterns)

    monkeypatch.setattr(raw_cache, "redact", held)
    raw_cache.clear()

    async def page(offset: int) -> str | None:
        async with pool.acquire() as c:
            return await toolloop.read_page(
                c,
                tenant=T,
                session_id=S,
                tool_call_id="c1",
                offset=offset,
                max_chars=2000,
                patterns=PATTERNS,
            )

    first = asyncio.create_task(page(0))
    while not calls:
        await asyncio.sleep(0.002)
    second = asyncio.create_task(page(30_000))
    for _ in range(1000):  # until it waits for the redaction under way, or makes its own
        if len(calls) == 2 or sum(f.waiting for f in raw_cache._FLIGHTS.values()) == 2:
            break
        await asyncio.sleep(0.002)
    go.set()
    pages = await asyncio.gather(first, second)
    raw_cache.clear()
    assert len(calls) == 1
    assert pages == [await before(conn, S, "c1", o, 2000, PATTERNS, tenant=T) for o in (0, 30_000)]
