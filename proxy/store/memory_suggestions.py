"""Memory suggestions: facts a session's turns offered for long-term memory, waiting for a
person's answer before they are stored (``store.memory``).

A suggestion is a persisted ``memory.suggestion`` event; the answer a person gives it is a row
of ``memory_suggestion_answers`` (migration 0014), so a suggestion is pending while it has no
answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from proxy.cascade.types import MEMORY_SUGGESTION
from proxy.store.nul import decode_json

if TYPE_CHECKING:
    from proxy.store.db import Executor

__all__ = [
    "answer_suggestion",
    "fetch_pending_facts",
    "fetch_pending_suggestions",
    "fetch_suggestion",
]

FETCH_PENDING = """
SELECT e.id AS event_id, e.session_id, e.data, e.created_at, s.agent FROM events e
LEFT JOIN sessions s ON s.tenant = e.tenant AND s.id = e.session_id
WHERE e.tenant = $1 AND e.name = $2 AND e.id > $4{session} AND NOT EXISTS (
    SELECT 1 FROM memory_suggestion_answers a
    WHERE a.tenant = e.tenant AND a.suggestion_id = e.data->>'suggestion_id')
ORDER BY e.id LIMIT $3
"""
# Two statements, not ``($5 IS NULL OR …)``: a prepared statement's generic plan for that
# would not use the session's index.
_PENDING_ALL = FETCH_PENDING.format(session="")
_PENDING_OF_SESSION = FETCH_PENDING.format(session=" AND e.session_id = $5")


def _facts(value: Any) -> list[str]:
    """A suggestion's stored ``facts``: the strings of a list, none from anything else (a
    string would be read letter by letter)."""
    return [f for f in value if isinstance(f, str)] if isinstance(value, list) else []


def _suggestion(row: Any) -> dict[str, Any]:
    """A suggestion event's fields, its ``facts`` read by ``_facts``."""
    data = decode_json(row["data"])
    return {
        "suggestion_id": data.get("suggestion_id"),
        "session_id": row["session_id"],
        "facts": _facts(data.get("facts")),
        "scope": data.get("scope"),
        "created_at": row["created_at"],
    }


async def fetch_pending_suggestions(
    conn: Executor,
    *,
    tenant: str,
    limit: int = 100,
    after_event: int = 0,
    session_id: str | None = None,
) -> list[dict[str, Any]]:
    """Suggestions without an answer, oldest first, from the event after ``after_event``
    on (only ``session_id``'s, when given), each with its ``event_id`` (where the next page
    starts) and the ``agent`` of its session."""
    args: tuple[Any, ...] = (tenant, MEMORY_SUGGESTION, limit, after_event)
    if session_id is None:
        rows = await conn.fetch(_PENDING_ALL, *args)
    else:
        rows = await conn.fetch(_PENDING_OF_SESSION, *args, session_id)
    return [_suggestion(row) | {"event_id": row["event_id"], "agent": row["agent"]} for row in rows]


PENDING_FACTS = """
SELECT e.data->'facts' AS facts FROM events e
WHERE e.tenant = $1 AND e.name = $2 AND e.data->>'scope' = $3 AND NOT EXISTS (
    SELECT 1 FROM memory_suggestion_answers a
    WHERE a.tenant = e.tenant AND a.suggestion_id = e.data->>'suggestion_id')
"""


async def fetch_pending_facts(conn: Executor, *, tenant: str, scope: str) -> list[str]:
    """The facts of the suggestions for ``scope`` nobody has answered yet: promotion leaves
    them out of a new suggestion, as it leaves out the scope's stored facts."""
    rows = await conn.fetch(PENDING_FACTS, tenant, MEMORY_SUGGESTION, scope)
    return [fact for row in rows for fact in _facts(decode_json(row["facts"]))]


FETCH_SUGGESTION = """
SELECT e.session_id, e.data, e.created_at, a.answer, s.agent FROM events e
LEFT JOIN memory_suggestion_answers a
       ON a.tenant = e.tenant AND a.suggestion_id = e.data->>'suggestion_id'
LEFT JOIN sessions s ON s.tenant = e.tenant AND s.id = e.session_id
WHERE e.tenant = $1 AND e.name = $2 AND e.data->>'suggestion_id' = $3
ORDER BY e.id LIMIT 1
"""


async def fetch_suggestion(
    conn: Executor, *, tenant: str, suggestion_id: str
) -> dict[str, Any] | None:
    """One suggestion with its ``answer`` (``None`` while pending) and the ``agent`` of its
    session (``None`` when the session is gone); ``None`` when the tenant has no such one,
    and for an id holding a NUL, which no id the proxy makes holds and PostgreSQL's text
    refuses (a ``%00`` in the path)."""
    if "\x00" in suggestion_id:
        return None
    row = await conn.fetchrow(FETCH_SUGGESTION, tenant, MEMORY_SUGGESTION, suggestion_id)
    if row is None:
        return None
    out = _suggestion(row)
    out["answer"], out["agent"] = row["answer"], row["agent"]
    return out


ANSWER = """
INSERT INTO memory_suggestion_answers (tenant, suggestion_id, answer, facts)
VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING RETURNING answer
"""


async def answer_suggestion(
    conn: Executor, *, tenant: str, suggestion_id: str, answer: str, facts: Sequence[str] = ()
) -> bool:
    """Record the answer; ``False`` when the suggestion was answered already."""
    return await conn.fetchval(ANSWER, tenant, suggestion_id, answer, list(facts)) is not None
