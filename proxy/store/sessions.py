"""The ``sessions`` table: one row per (tenant, session) with the cascade's counters."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Container, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from proxy.requestlog import session_wait
from proxy.store.db import lend, unavailable_when_lost
from proxy.store.events import NOTIFY_CHANNEL
from proxy.store.leases import free_for_update, leave_queue, poll_delays
from proxy.store.nul import decode
from proxy.store.steps import AgentRefused

if TYPE_CHECKING:
    from proxy.store.db import Connection, Executor

__all__ = [
    "Pause",
    "fetchrow_session",
    "count_superseded",
    "fetchval_agent",
    "fetch_sessions",
    "delete_session",
    "reset_session",
    "copy_session",
    "wait_turn",
    "set_handoff_above",
]

# The row alone: compactions, the event stream and every session route read it, and a
# count of the session's messages here would visit each of them (no index finds the
# superseded ones), however old the session.
FETCHROW_SESSION = "SELECT * FROM sessions WHERE tenant = $1 AND id = $2"

COUNT_SUPERSEDED = """
SELECT count(*) FROM messages
WHERE tenant = $1 AND session_id = $2 AND superseded_at IS NOT NULL
"""


def _decoded(row: Any) -> dict[str, Any]:
    """A sessions row as a dict, its model as the client named it (``nul``: begin_step
    stores it through ``nul.encode``)."""
    out = dict(row)
    if out.get("model") is not None:
        out["model"] = decode(out["model"])
    return out


async def fetchrow_session(
    conn: Executor, *, tenant: str, session_id: str
) -> dict[str, Any] | None:
    row = await conn.fetchrow(FETCHROW_SESSION, tenant, session_id)
    return None if row is None else _decoded(row)


async def count_superseded(conn: Executor, *, tenant: str, session_id: str) -> int:
    """How many of the session's messages an edited history superseded (``show`` only)."""
    return int(await conn.fetchval(COUNT_SUPERSEDED, tenant, session_id))


FETCHVAL_AGENT = "SELECT agent FROM sessions WHERE tenant = $1 AND id = $2"


async def fetchval_agent(conn: Executor, *, tenant: str, session_id: str) -> str | None:
    """The agent of the session's last request (None: no such session): the one row field
    a proxy key limited to some agents is checked against (``api.deps.reach_session``)."""
    agent: str | None = await conn.fetchval(FETCHVAL_AGENT, tenant, session_id)
    return agent


FETCH_SESSIONS = """
SELECT id, agent, model, parent_id, created_at, updated_at, head_len, last_prompt_tokens,
       last_estimate, calibration, reclaimed_tokens,
       CASE WHEN $4::text[] IS NOT NULL AND parent_id IS NOT NULL THEN (
           SELECT p.agent FROM sessions p WHERE p.tenant = s.tenant AND p.id = s.parent_id
       ) END AS parent_agent
FROM sessions s WHERE tenant = $1 AND ($4::text[] IS NULL OR agent = any($4::text[]))
  AND ($5::text IS NULL OR strpos(lower(id), lower($5)) > 0
       OR strpos(lower(coalesce(agent, '')), lower($5)) > 0
       OR strpos(lower(coalesce(model, '')), lower($5)) > 0)
  AND ($6::timestamptz IS NULL OR updated_at < $6 OR (updated_at = $6 AND id > $7::text))
ORDER BY updated_at DESC, id LIMIT $2 OFFSET $3
"""


async def fetch_sessions(
    conn: Executor,
    *,
    tenant: str,
    limit: int = 100,
    offset: int = 0,
    agents: Sequence[str] | None = None,
    containing: str | None = None,
    after: tuple[datetime, str] | None = None,
) -> list[dict[str, Any]]:
    """A page of the tenant's sessions, latest activity first (``after``: only the rows
    past that (updated_at, id) in this order, a cursor's place); with ``agents``, only theirs,
    and with ``containing``, only those whose id, agent or model holds it, case aside (both
    filtered before the page is cut, so ``limit`` counts the sessions returned), each with
    the agent its parent runs now (``parent_agent``: None without ``agents``, a parent, or
    a parent still there). ``strpos`` compares the text as it is, so ``%`` and ``_`` are no
    wildcards; a model is matched as stored (``nul``), which is as sent unless it holds a
    NUL."""
    rows = await conn.fetch(
        FETCH_SESSIONS,
        tenant,
        limit,
        offset,
        None if agents is None else list(agents),
        containing,
        *(after or (None, None)),
    )
    return [_decoded(r) for r in rows]


SET_HANDOFF_ABOVE = "UPDATE sessions SET handoff_above = $3 WHERE tenant = $1 AND id = $2"


async def set_handoff_above(conn: Executor, *, tenant: str, session_id: str, above: bool) -> None:
    """Flip the handoff nudge's crossing flag (``cascade/handoff.py``); called only when it
    changes."""
    await conn.execute(SET_HANDOFF_ABOVE, tenant, session_id, above)


Pause = Callable[[float], Awaitable[None]]
"""What a session operation does between two tries at a held lease, given the pause's
length: by default sleep, noted as the request's wait for its session (``requestlog``);
from the session API, a sleep that ends the operation when its client leaves and ends early
when the holder frees the session (``services/client_watch.pause``, ``lease_wakeups``). A
pause that raises ends the operation, nothing written."""


CHANGE_SECONDS = 3600.0
"""The bound on each statement of a reset, delete or branch's work, once it holds the
session's row (asyncpg's per-call ``timeout``, in place of the pool's ``command_timeout``,
``CASCADE_DB_STATEMENT_TIMEOUT_SECONDS``): that work grows with the session (a cascade over
its every message and event, a copy of its history), so a long session's can outlast the
bound a request's statements get, and a cancel there would fail it at every retry. The wait
for the row keeps the request's bound; an hour still ends a statement a paused pooler holds."""


async def _sleep(seconds: float) -> None:
    with session_wait():
        await asyncio.sleep(seconds)


DELETE_SESSION = """
WITH answers AS (
    DELETE FROM memory_suggestion_answers a USING events e
    WHERE e.tenant = $1 AND e.session_id = $2 AND e.name = 'memory.suggestion'
      AND a.tenant = e.tenant AND a.suggestion_id = e.data->>'suggestion_id'
), gone AS (DELETE FROM sessions WHERE tenant = $1 AND id = $2 RETURNING tenant, id)
SELECT pg_notify($3, json_build_object('t', tenant, 's', id, 'gone', true)::text) FROM gone
"""


async def delete_session(
    conn: Executor,
    *,
    tenant: str,
    session_id: str,
    pause: Pause | None = None,
    agents: Container[str] | None = None,
) -> bool:
    """Delete a session and, by ON DELETE CASCADE, everything it owns; the answers to its
    memory suggestions too, which name a suggestion (its ``memory.suggestion`` event, read
    before the cascade takes the events), not the session. The same statement
    tells every replica's event bus, at commit, that the session is gone, so the event
    streams open on it end (``bus.SESSION_GONE``)."""
    async with _locked(conn, tenant, session_id, pause or _sleep, agents) as tx:
        status = await tx.execute(
            DELETE_SESSION, tenant, session_id, NOTIFY_CHANNEL, timeout=CHANGE_SECONDS
        )
    return bool(status.endswith(" 1"))


LOCKED_AGENT = "SELECT agent FROM sessions WHERE tenant = $1 AND id = $2"


@contextlib.asynccontextmanager
async def _locked(
    conn: Executor,
    tenant: str,
    session_id: str,
    pause: Pause,
    agents: Container[str] | None = None,
) -> AsyncIterator[Connection]:
    """A transaction on ``conn`` (a pool, what API handlers hold, lends one connection)
    holding the session's row lock once no request holds its lease: reset, delete and branch
    wait for a request in flight on the session (it holds the lease until its reply is
    stored), so they never cut its step, and the next request's first statement, which
    takes the lease by updating the row, waits for them. While the lease is held the
    connection goes back to the pool between tries (``leases.poll_delays``), the operation
    keeping its place in the session's queue of waiters under one owner id, so requests that
    follow one another on another replica do not keep it waiting (migration 0022). Between
    tries it awaits ``pause(seconds)`` (``Pause``), the transaction ended and the connection
    back in the pool: one that raises (the client left) ends the operation there, and its
    place in the queue with it (``leave_queue``), so the waiter behind it goes once the
    session is free, not once the place lapsed.

    With ``agents`` (a proxy key's, None: any), a session whose agent, read under the row
    lock, is not among them raises ``AgentRefused``, nothing done: the key's check as the
    request arrived saw the session before it waited, and a request of another key may
    have moved it to another agent since. Its turn is given up as a finished operation's."""
    delays, owner, refused = poll_delays(), uuid.uuid4(), None
    while True:
        async with contextlib.AsyncExitStack() as stack:
            lent: Connection = await stack.enter_async_context(lend(conn))
            stack.enter_context(unavailable_when_lost())
            await stack.enter_async_context(lent.transaction())
            if await free_for_update(lent, tenant=tenant, session_id=session_id, owner=owner):
                agent = (
                    None
                    if agents is None
                    else await lent.fetchval(LOCKED_AGENT, tenant, session_id)
                )
                if agent is None or agent in (agents or ()):
                    yield lent
                    return
                refused = agent
        if refused is not None:  # after the commit: the turn taken is given up
            raise AgentRefused(refused)
        try:
            await pause(next(delays))
        except Exception:
            with contextlib.suppress(Exception):  # else the place lapses, as it used to
                await leave_queue(conn, tenant=tenant, session_id=session_id, owner=owner)
            raise


async def wait_turn(
    conn: Executor,
    *,
    tenant: str,
    session_id: str,
    pause: Pause | None = None,
    agents: Container[str] | None = None,
) -> None:
    """Wait for the session's turn as reset, delete and branch do (``_locked``), then give
    it back at once, having changed nothing: a forced compaction waits so for the request
    in flight, whose reply is stored before it frees the lease, and folds that reply, while
    its summariser call holds no lease and blocks no request. With ``agents``, a session
    moved meanwhile to an agent not among them raises ``AgentRefused``."""
    async with _locked(conn, tenant, session_id, pause or _sleep, agents):
        pass


RESET_SESSION = [
    "DELETE FROM messages WHERE tenant = $1 AND session_id = $2",
    "DELETE FROM tool_raw_outputs WHERE tenant = $1 AND session_id = $2",
    "DELETE FROM tool_raw_output_versions WHERE tenant = $1 AND session_id = $2",
    "DELETE FROM summaries WHERE tenant = $1 AND session_id = $2",
    """UPDATE sessions SET head_len = 0, head_hash = NULL, system_count = 0,
       last_prompt_tokens = NULL, last_estimate = NULL, calibration = 1.0,
       reclaimed_tokens = 0, reclaimed_truncation = 0, reclaimed_summarisation = 0,
       handoff_above = false, turn_key = NULL, turn_blocks = NULL, promotion_from = NULL,
       promotion_to = NULL, promotion_due = NULL, updated_at = now()
       WHERE tenant = $1 AND id = $2""",
]


async def reset_session(
    conn: Executor,
    *,
    tenant: str,
    session_id: str,
    pause: Pause | None = None,
    agents: Container[str] | None = None,
) -> bool:
    """Forget the history (messages, raw outputs, summaries) and what each stage reclaimed
    from it; the session and events stay. False when there is no session: a delete that
    went first while this waited."""
    async with _locked(conn, tenant, session_id, pause or _sleep, agents) as tx:
        for sql in RESET_SESSION:
            status = await tx.execute(sql, tenant, session_id, timeout=CHANGE_SECONDS)
    return bool(status.endswith(" 1"))  # the last statement updates the session's row


COPY_SESSION = [
    """INSERT INTO sessions (tenant, id, agent, model, parent_id, head_len, head_hash,
           system_count, last_prompt_tokens, last_estimate, calibration, reclaimed_tokens,
           reclaimed_truncation, reclaimed_summarisation)
       SELECT tenant, $3, agent, model, id, head_len, head_hash, system_count,
           last_prompt_tokens, last_estimate, calibration, reclaimed_tokens,
           reclaimed_truncation, reclaimed_summarisation
       FROM sessions WHERE tenant = $1 AND id = $2""",
    """INSERT INTO messages (tenant, session_id, pos, hash, role, message, tool_call_id, tokens,
           redacted, evicted_at, trimmed_at, source, verbatim, placeholder, created_at)
       SELECT tenant, $3, pos, hash, role, message, tool_call_id, tokens, redacted, evicted_at,
           trimmed_at, source, verbatim, placeholder, created_at
       FROM messages WHERE tenant = $1 AND session_id = $2 AND superseded_at IS NULL""",
    """INSERT INTO tool_raw_outputs (tenant, session_id, tool_call_id, content, original_bytes,
           capped, created_at)
       SELECT tenant, $3, tool_call_id, content, original_bytes, capped, created_at
       FROM tool_raw_outputs WHERE tenant = $1 AND session_id = $2""",
    """INSERT INTO tool_raw_output_versions (tenant, session_id, tool_call_id, content,
           original_bytes, capped, created_at, replaced_at)
       SELECT tenant, $3, tool_call_id, content, original_bytes, capped, created_at, replaced_at
       FROM tool_raw_output_versions WHERE tenant = $1 AND session_id = $2""",
    """INSERT INTO summaries (tenant, session_id, version, boundary, boundary_hash, content,
           tokens, model)
       SELECT tenant, $3, version, boundary, boundary_hash, content, tokens, model
       FROM summaries WHERE tenant = $1 AND session_id = $2 AND invalidated_at IS NULL""",
]


async def copy_session(
    conn: Executor,
    *,
    tenant: str,
    source: str,
    target: str,
    pause: Pause | None = None,
    agents: Container[str] | None = None,
) -> bool:
    """Branch: independent copies of the live history, raw outputs (the ones a reused tool
    call id replaced too: an older result's sent form is one) and valid summaries, with
    what each stage reclaimed from the rows it copies (the events stay the source's). False,
    nothing made, when there is no source: a delete that went first while this waited.
    Rows and spills keep when they were written: a read by bare tool call id tells by it
    whether the id's newest result is its spill or its row (``raw_outputs``)."""
    async with _locked(conn, tenant, source, pause or _sleep, agents) as tx:
        first, *rest = COPY_SESSION
        if not (await tx.execute(first, tenant, source, target, timeout=CHANGE_SECONDS)).endswith(
            " 1"
        ):
            return False
        for sql in rest:
            await tx.execute(sql, tenant, source, target, timeout=CHANGE_SECONDS)
    return True
