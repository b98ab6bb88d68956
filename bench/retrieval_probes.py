"""The retrieval benchmark's probes: its HTTP client, its own database connection, and what
it reads through them (embedded messages, the search's plan, the embedder's rate alone).

None of these is on the proxy's path: :class:`Client` sends the measured requests, and
:class:`Db` is a connection of the benchmark's own for polls and reads between requests.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["EMBED_MODEL", "Client", "Db", "explain_search", "embedder_rate", "wait_embedded"]

EMBED_MODEL = "wordllama-l2-256"


class Client:
    """The benchmark's HTTP client: chat turns (timed) and compactions through the proxy."""

    def __init__(self, base: str) -> None:
        import httpx

        self.base = base
        self.http = httpx.Client(timeout=600, headers={"authorization": "Bearer sk-bench"})

    def chat(self, sid: str, agent: str, history: list[dict[str, Any]]) -> tuple[float, float]:
        """The request's wall time and the proxy's own share of it (its overhead header),
        in ms."""
        body = json.dumps({"model": agent, "messages": history}).encode()
        t0 = time.perf_counter()
        resp = self.http.post(
            f"{self.base}/v1/chat/completions",
            content=body,
            headers={"x-session-id": sid, "content-type": "application/json"},
        )
        ms = 1000 * (time.perf_counter() - t0)
        if resp.status_code != 200:
            raise RuntimeError(f"{sid}: HTTP {resp.status_code}: {resp.text[:300]}")
        reply = resp.json()["choices"][0]["message"]
        history.append({k: v for k, v in reply.items() if v is not None})
        return ms, float(resp.headers.get("x-cascade-overhead-ms") or "nan")

    def compact(self, sid: str) -> None:
        resp = self.http.post(f"{self.base}/v1/sessions/{sid}/compact")
        if resp.status_code != 200 or not resp.json().get("compacted"):
            raise RuntimeError(f"{sid}: compact failed: {resp.status_code} {resp.text[:300]}")

    def close(self) -> None:
        self.http.close()


class Db:
    """One connection of the benchmark's own, for polls and reads between requests."""

    def __init__(self, dsn: str) -> None:
        import asyncpg

        self.loop = asyncio.new_event_loop()
        self.conn = self.loop.run_until_complete(asyncpg.connect(dsn))

    def fetch(self, sql: str, *args: Any) -> list[Any]:
        return list(self.loop.run_until_complete(self.conn.fetch(sql, *args)))

    def close(self) -> None:
        self.loop.run_until_complete(self.conn.close())
        self.loop.close()


def _embedded(db: Db, sid: str) -> int:
    sql = (
        "SELECT count(*) FROM message_embeddings WHERE session_id = $1 AND model = $2 "
        "AND claimed_at IS NULL"
    )
    return int(db.fetch(sql, sid, EMBED_MODEL)[0][0])


def explain_search(dsn: str, sid: str) -> list[str]:
    """The plan of one search as the proxy runs it: ``cascade_related_v2``'s statement (read
    from the function, at 256 dimensions), under the setting the function makes, with a
    stored vector as the query."""
    row_sql = "SELECT tenant, embedding FROM message_embeddings WHERE session_id = $1 LIMIT 1"
    src_sql = "SELECT prosrc FROM pg_proc WHERE proname = 'cascade_related_v2'"

    async def go() -> list[str]:
        import asyncpg
        from pgvector.asyncpg import register_vector

        conn = await asyncpg.connect(dsn)
        try:
            await register_vector(conn)
            row = await conn.fetchrow(row_sql, sid)
            src = str(await conn.fetchval(src_sql))
            inner = src.split("$q$")[1].replace("%1$s", "256").replace("$5", "$5::float8")
            args = (row["tenant"], sid, EMBED_MODEL, row["embedding"], 0.35, 4)
            async with conn.transaction():
                await conn.execute("SET LOCAL hnsw.iterative_scan = 'relaxed_order'")
                rows = await conn.fetch("EXPLAIN (ANALYZE, COSTS OFF) " + inner, *args)
            return [r[0] for r in rows]
        finally:
            await conn.close()

    return asyncio.run(go())


def embedder_rate(history: Sequence[Mapping[str, Any]], batch: int) -> float:
    """Messages a second of the builtin embedder alone, on this process's one core."""
    from proxy.embeddings import BuiltinEmbedder, embedding_text

    texts = [t for t in (embedding_text(m) for m in history if m.get("role") != "system") if t]
    emb = BuiltinEmbedder(EMBED_MODEL, 256)
    emb.embed_now(texts[:8])  # load the model outside the timing
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {max(cpus)})
    try:
        t0 = time.perf_counter()
        for i in range(0, len(texts), batch):
            emb.embed_now(texts[i : i + batch])
        return len(texts) / (time.perf_counter() - t0)
    finally:
        os.sched_setaffinity(0, cpus)


def wait_embedded(db: Db, sid: str, want: int, timeout: float) -> dict[str, float]:
    """Poll until ``want`` messages of ``sid`` are embedded; the rate between the first
    poll that saw progress and the last. When the first poll that sees any already sees them
    all (a small session: one or two batches), the rate counts from this call's start
    instead, which includes the hot reload's delay: an underestimate, never a zero."""
    t_start = time.monotonic()
    t_first = n_first = None
    deadline = t_start + timeout
    while time.monotonic() < deadline:
        n = _embedded(db, sid)
        now = time.monotonic()
        if n > 0 and t_first is None:
            t_first, n_first = now, n
        if n >= want:
            assert t_first is not None and n_first is not None
            if n_first >= n:
                t_first, n_first = t_start, 0
            span = max(now - t_first, 1e-3)
            return {"messages": n, "seconds": round(span, 2), "rate": (n - n_first) / span}
        time.sleep(0.05)
    raise RuntimeError(f"{sid}: only {_embedded(db, sid)} of {want} embedded in {timeout} s")
