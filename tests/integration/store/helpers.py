"""Test-only setup and readers for the store tests.

Rows are stored as they are (the proxy moves the head inside larger statements); a short
history and the rows for it; a session that owns a row of every kind, and its row counts; the
session's head, and the statements a connection runs, less asyncpg's own type lookups.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from asyncpg import introspection

from proxy.cascade.types import Spill
from proxy.history import chain
from proxy.store import messages as msgs, raw_outputs, sessions, summaries, writes
from proxy.store.messages import NewMessage
from proxy.store.nul import encode

T, S = "t-a", "s1"
_INTROSPECTION = {
    introspection.INTRO_LOOKUP_TYPES,
    introspection.INTRO_LOOKUP_TYPES_13,
    introspection.TYPE_BY_NAME,
}

OWNER = uuid.UUID(int=1)  # one request's lease owner, so a test may begin twice
A, B = uuid.UUID(int=1), uuid.UUID(int=2)  # two requests' lease owners (two replicas)


def asyncpg_internal(query: str) -> bool:
    """asyncpg's own type lookups (and jit toggles) on first use of a type on a connection."""
    return query in _INTROSPECTION or "set_config('jit'" in query


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def tool_history(content: str) -> list[dict[str, Any]]:
    """A user's message, an assistant's call ``c1`` and its result ``content``."""
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    return [
        user("look"),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": content},
    ]


def rows_for(history: list[dict[str, Any]], start: int = 0) -> list[msgs.NewMessage]:
    hashes = chain(history)
    return [
        msgs.NewMessage(
            pos=i,
            hash=hashes[i],
            role=history[i]["role"],
            message=history[i],
            tool_call_id=history[i].get("tool_call_id"),
            tokens=len(str(history[i].get("content") or "")) // 4,
        )
        for i in range(start, len(history))
    ]


HISTORY = [
    {"role": "system", "content": "sys"},
    user("one"),
    {"role": "assistant", "content": "two"},
    user("three"),
    {"role": "assistant", "content": "four"},
]


INSERT_MESSAGES = """
INSERT INTO messages (tenant, session_id, pos, hash, role, message, tool_call_id, tokens,
                      redacted, verbatim, source)
SELECT $1, $2, pos, hash, role, message, tool_call_id, tokens, redacted, verbatim, source
FROM unnest($3::int[], $4::text[], $5::text[], $6::json[], $7::text[], $8::int[],
            $9::bool[], $10::bool[], $11::text[])
     AS t(pos, hash, role, message, tool_call_id, tokens, redacted, verbatim, source)
"""


async def insert_messages(
    conn: Any, *, tenant: str, session_id: str, rows: Sequence[NewMessage]
) -> None:
    """Store rows as they are: a request stores its rows inside larger statements."""
    if rows:
        await conn.execute(
            INSERT_MESSAGES,
            tenant,
            session_id,
            [r.pos for r in rows],
            [r.hash for r in rows],
            [encode(r.role) for r in rows],
            [r.message for r in rows],
            [None if r.tool_call_id is None else encode(r.tool_call_id) for r in rows],
            [r.tokens for r in rows],
            [r.redacted for r in rows],
            [r.verbatim for r in rows],
            [r.source for r in rows],
        )


async def set_head(
    conn: Any,
    *,
    tenant: str,
    session_id: str,
    head_len: int,
    head_hash: str | None,
    system_count: int,
) -> None:
    await conn.execute(
        "UPDATE sessions SET head_len = $3, head_hash = $4, system_count = $5"
        " WHERE tenant = $1 AND id = $2",
        tenant,
        session_id,
        head_len,
        head_hash,
        system_count,
    )


async def create_session(
    conn: Any, *, tenant: str, session_id: str, agent: str, model: str | None
) -> None:
    """Create the session row (touch it if it exists); requests do this in
    ``cascade_begin_step``."""
    await conn.execute(
        "INSERT INTO sessions (tenant, id, agent, model) VALUES ($1, $2, $3, $4)"
        " ON CONFLICT (tenant, id) DO UPDATE SET updated_at = now()",
        tenant,
        session_id,
        agent,
        model,
    )


async def make_session(conn: Any, session_id: str, *, tenant: str = T, n: int = 3) -> None:
    """A session with ``n`` messages, a raw output, a summary and an event."""
    await create_session(conn, tenant=tenant, session_id=session_id, agent="a", model="m")
    rows = [
        msgs.NewMessage(pos=i, hash=f"h{i}", role="user", message={"role": "user", "content": i})
        for i in range(n)
    ]
    await insert_messages(conn, tenant=tenant, session_id=session_id, rows=rows)
    await set_head(
        conn,
        tenant=tenant,
        session_id=session_id,
        head_len=n,
        head_hash=f"h{n - 1}",
        system_count=0,
    )
    spill = Spill(tool_call_id="call_1", text="raw text")
    await writes.append_and_fetch_window(
        conn,
        tenant=tenant,
        session_id=session_id,
        rows=[],
        raw=raw_outputs.raw_rows([spill], 1000),
        head_len=n,
        head_hash=f"h{n - 1}",
        system_count=0,
        old_len=n,
        from_pos=n,
        move_head=False,
    )
    await summaries.insert_summary(
        conn,
        tenant=tenant,
        session_id=session_id,
        boundary=1,
        boundary_hash="h0",
        content="brief",
        tokens=1,
        model="fast",
    )
    await writes.persist_step(
        conn, tenant=tenant, session_id=session_id, events=(["context.usage"], [{"x": 1}])
    )


async def counts(conn: Any, session_id: str, tenant: str = T) -> dict[str, int]:
    out = {}
    for table in ("messages", "tool_raw_outputs", "summaries", "events"):
        sql = f"SELECT count(*) FROM {table} WHERE tenant = $1 AND session_id = $2"
        out[table] = await conn.fetchval(sql, tenant, session_id)
    return out


async def head(conn: Any, session: str = S) -> tuple[int, str | None, int]:
    row = await sessions.fetchrow_session(conn, tenant=T, session_id=session)
    return row["head_len"], row["head_hash"], row["system_count"]


def logged(conn: Any) -> list[str]:
    seen: list[str] = []
    conn.add_query_logger(lambda q: seen.append(q.query))
    return seen
