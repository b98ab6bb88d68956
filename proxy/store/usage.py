"""What a session's context is made of, and what the cascade's stages took out of it.

Read by the session view (``GET /v1/sessions/{id}``) for the console's usage panel; nothing
here is on the chat path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from proxy.store.nul import decode, encode

if TYPE_CHECKING:
    from proxy.store.db import Executor

__all__ = ["fetch_usage_split", "RECLAIMED_COLUMNS", "reclaimed_by_stage", "fetch_spilled_ids"]

# The live window as the prompt holds it: the leading system rows, then every row from the
# summary's boundary on (the summary stands for the ones before it); trimmed rows are gone.
# ``tokens`` is the stored estimate of each row's prompt form (an evicted row's placeholder).
FETCH_USAGE_SPLIT = """
SELECT coalesce(sum(m.tokens) FILTER (WHERE m.pos < s.system_count), 0) AS system,
       coalesce(sum(m.tokens) FILTER (WHERE m.pos >= greatest(s.system_count, $3)
                                        AND m.role = 'tool'), 0) AS tool_results,
       coalesce(sum(m.tokens) FILTER (WHERE m.pos >= greatest(s.system_count, $3)
                                        AND m.role <> 'tool'), 0) AS messages
FROM sessions s
LEFT JOIN messages m ON m.tenant = s.tenant AND m.session_id = s.id
     AND m.superseded_at IS NULL AND m.trimmed_at IS NULL
WHERE s.tenant = $1 AND s.id = $2
"""


async def fetch_usage_split(
    conn: Executor, *, tenant: str, session_id: str, boundary: int
) -> dict[str, int]:
    """Estimated tokens of the window's system rows, messages and tool results (``boundary``:
    the current summary's, 0 without one)."""
    row = await conn.fetchrow(FETCH_USAGE_SPLIT, tenant, session_id, boundary)
    if row is None:
        return {"system": 0, "messages": 0, "tool_results": 0}
    return {k: int(row[k]) for k in ("system", "messages", "tool_results")}


RECLAIMED_COLUMNS = {
    "eviction": "reclaimed_tokens",
    "truncation": "reclaimed_truncation",
    "summarisation": "reclaimed_summarisation",
}
"""Each stage's total on the sessions row: what it took out of the session's current history
(a reset zeroes them, a branch copies them). Eviction adds its count in the step's write;
truncation and summarisation theirs as their event is stored (migration 0027's trigger:
truncation's characters at four to a token, as ``observe.note_step_events`` counts them; a
compaction what its completed event says the prompt lost)."""


def reclaimed_by_stage(session: Mapping[str, Any]) -> dict[str, int]:
    """Tokens each stage took out of the session's current history, from its row."""
    return {stage: int(session[column]) for stage, column in RECLAIMED_COLUMNS.items()}


FETCH_SPILLED_IDS = """
SELECT tool_call_id FROM tool_raw_outputs
WHERE tenant = $1 AND session_id = $2 AND tool_call_id = ANY($3::text[])
"""


async def fetch_spilled_ids(
    conn: Executor, *, tenant: str, session_id: str, tool_call_ids: Sequence[str]
) -> set[str]:
    """Which of these tool calls' results were cut at ingestion (a spilled raw output)."""
    if not tool_call_ids:
        return set()
    rows: list[Any] = await conn.fetch(
        FETCH_SPILLED_IDS, tenant, session_id, [encode(i) for i in tool_call_ids]
    )
    return {decode(r["tool_call_id"]) for r in rows}
