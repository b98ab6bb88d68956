"""Wait until the proxy's background worker has embedded every stored message of a session.

Retrieval searches only messages that have a vector, and the worker embeds them in the
background, so what a new turn finds depends on how far the worker got. A replay that waits,
before each step that starts a turn, until every live message of its session has a vector (or
is settled without one: a message with no text) searches the same messages on every run: its
results are reproducible. The bench reads the proxy's own database (the embedded server in the
proxy's data dir) on a connection of its own; the proxy is not told anything.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

__all__ = ["PENDING", "EmbeddingWait"]

PENDING = """
SELECT count(*) FROM messages m
WHERE m.session_id = $1 AND m.superseded_at IS NULL AND m.role <> 'system'
  AND NOT EXISTS (SELECT 1 FROM message_embeddings e
                  WHERE e.message_id = m.id AND e.model = $2 AND e.claimed_at IS NULL)
"""
"""The session's live messages the worker has not settled yet for ``model`` (the messages it
claims: ``store.embeddings.CLAIM``)."""


class EmbeddingWait:
    """A connection to the proxy's database for ``wait``; ``close`` when done."""

    def __init__(self, dsn: str, model: str) -> None:
        import asyncpg

        self.model = model
        self.loop = asyncio.new_event_loop()
        self.conn: Any = self.loop.run_until_complete(asyncpg.connect(dsn))
        self.waited = 0.0  # seconds spent waiting, over every call

    @classmethod
    def for_data_dir(cls, data_dir: Path, model: str) -> EmbeddingWait:
        # the embedded server's URI, from its postmaster.pid
        from bench.growth_setup import embedded_dsn

        return cls(embedded_dsn(data_dir / "pgdata"), model)

    def pending(self, session_id: str) -> int:
        found = self.loop.run_until_complete(self.conn.fetchval(PENDING, session_id, self.model))
        return int(found)

    def wait(self, session_id: str, timeout: float = 120.0, poll: float = 0.02) -> None:
        """Return once no live message of ``session_id`` waits for its vector."""
        start = time.monotonic()
        while (left := self.pending(session_id)) > 0:
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"{session_id}: {left} messages still unembedded")
            time.sleep(poll)
        self.waited += time.monotonic() - start

    def retrievals(self, session_ids: list[str]) -> tuple[int, int, int]:
        """The sessions' ``context.retrieval`` events: how many, how many with hits, how many
        with an error."""
        sql = (
            "SELECT count(*), count(*) FILTER (WHERE (data->>'hits')::int > 0), "
            "count(*) FILTER (WHERE data->>'error' IS NOT NULL) FROM events "
            "WHERE session_id = ANY($1::text[]) AND name = 'context.retrieval'"
        )
        row = self.loop.run_until_complete(self.conn.fetchrow(sql, session_ids))
        return int(row[0]), int(row[1]), int(row[2])

    def close(self) -> None:
        self.loop.run_until_complete(self.conn.close())
        self.loop.close()
