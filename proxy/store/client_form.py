"""Messages as the client sent them, for a client that resends a stored history.

The store keeps each message in its prompt form (a result cut at ingestion, an evicted
result's placeholder), while the hash chain is over what the client sent. The console's
composer resends the history the way any client does, so it needs the sent form back or the
proxy would take the rewritten rows for an edited history and supersede them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from proxy.store.nul import decode

if TYPE_CHECKING:
    from proxy.store.db import Executor

__all__ = ["fetch_sent_forms"]

# An evicted row keeps its body beside the placeholder (migration 0008): ``message``. A cut
# result's whole text is its spilled raw output, unless the spill itself was capped.
FETCH_SENT_FORMS = """
SELECT m.pos, m.message, r.content AS raw, coalesce(r.capped, false) AS capped
FROM messages m
LEFT JOIN tool_raw_outputs r ON r.tenant = m.tenant AND r.session_id = m.session_id
     AND r.tool_call_id = m.tool_call_id
WHERE m.tenant = $1 AND m.session_id = $2 AND m.superseded_at IS NULL
  AND m.pos = ANY($3::int[])
"""


async def fetch_sent_forms(
    conn: Executor, *, tenant: str, session_id: str, positions: Sequence[int]
) -> dict[int, dict[str, Any]]:
    """pos -> the message as it was sent, for those of ``positions`` it can be rebuilt for
    (an evicted row; a cut result whose whole text was kept). A redacted secret is never
    stored, so a redacted row has no sent form."""
    if not positions:
        return {}
    out: dict[int, dict[str, Any]] = {}
    for r in await conn.fetch(FETCH_SENT_FORMS, tenant, session_id, list(positions)):
        message = dict(r["message"])
        if r["raw"] is not None:
            if r["capped"]:
                continue
            message["content"] = decode(r["raw"])
        out[r["pos"]] = message
    return out
