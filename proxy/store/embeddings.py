"""The ``message_embeddings`` table (migration 0017): claim, fill, search.

Every statement here is one short transaction of its own: a claim is a row inserted with no
vector (``ON CONFLICT DO NOTHING``: a message another replica claimed is skipped), so no lock
or session state outlives a statement, and a transaction pooler in front of PostgreSQL is
fine. The search is scoped by tenant and session in SQL, and reads only vectors of one model
at one dimension.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from proxy.jsonio import dumps
from proxy.store.nul import decode

if TYPE_CHECKING:
    from proxy.store.db import Executor

__all__ = [
    "CLAIM_STALE_SECONDS",
    "CLAIM_WINDOW",
    "Claimed",
    "Found",
    "claim_unembedded",
    "release_stale_claims",
    "release_claims",
    "update_embeddings",
    "search_outside_prompt",
    "SEARCH",
    "count_embedded",
]

CLAIM_STALE_SECONDS = 60
"""A claim older than this belongs to a replica that died mid-batch; it is released."""


@dataclass(frozen=True, slots=True)
class Claimed:
    """A message this replica claimed to embed."""

    message_id: int
    message: Any
    agent: str = "default"
    """Its session's agent, whose redaction patterns the text is embedded with."""


@dataclass(frozen=True, slots=True)
class Found:
    """A search hit: where the message is, what it was, and its cosine similarity."""

    pos: int
    role: str
    tool_call_id: str | None
    message: Any
    origin: str
    score: float
    cleared: bool = False
    """Its result is evicted: a prompt carrying the row carries only its placeholder."""


CLAIM_WINDOW = 1000
"""How many ids past its cursor one claim reads of ``messages``: a poll costs this many rows
at most, whatever the table's size or statistics."""

# The window: CLAIM_WINDOW ids from the first one past the cursor, a range of the primary
# key, which every plan reads by that key alone, with statistics or without (a LIMIT over
# the id's order let the planner sort a scan of the whole table; a filter on live rows, an
# index that reads every live message); starting at the first id, a gap that deleted
# sessions left costs no poll. The candidates in it: live messages other than instructions
# (system, developer) of sessions whose agent has retrieval on (an agent the config does
# not name runs the default context: $5), with no row for this model yet, by id. The
# cursor moves to the last candidate when the batch is full (the rest of the window is read
# again next poll), else to the window's end while ids lie past it (a window with nothing
# to embed moves it on all the same), else to its last row: NULL once nothing lies past
# the cursor. ``at_end``: the poll read the table's last row (a batch short of full), so
# the worker may start its rescan there even while new messages keep arriving.
CLAIM = f"""
WITH first AS (
    SELECT min(id) AS id FROM messages WHERE id > $1
), top AS (
    SELECT max(id) AS id FROM messages
), scan AS (
    SELECT id, tenant, session_id, pos, role, message, superseded_at FROM messages
    WHERE id > $1 AND id < (SELECT id FROM first) + {CLAIM_WINDOW}
), cand AS (
    SELECT m.id, m.tenant, m.session_id, m.pos, m.message, s.agent
    FROM scan m JOIN sessions s ON s.tenant = m.tenant AND s.id = m.session_id
    WHERE m.superseded_at IS NULL
      AND m.role NOT IN ('system', 'developer')
      AND (s.agent = ANY($3::text[]) OR ($5 AND NOT s.agent = ANY($4::text[])))
      AND NOT EXISTS (SELECT 1 FROM message_embeddings e
                      WHERE e.message_id = m.id AND e.model = $2)
    ORDER BY m.id
    LIMIT $6
), claimed AS (
    INSERT INTO message_embeddings (message_id, model, tenant, session_id, pos, claimed_at)
    SELECT id, $2, tenant, session_id, pos, now() FROM cand
    ON CONFLICT DO NOTHING
    RETURNING message_id
), last AS (
    SELECT CASE WHEN (SELECT count(*) FROM cand) >= $6 THEN (SELECT max(id) FROM cand)
                WHEN (SELECT id FROM top) >= (SELECT id FROM first) + {CLAIM_WINDOW}
                THEN (SELECT id FROM first) + {CLAIM_WINDOW} - 1
                ELSE (SELECT max(id) FROM scan) END AS id,
           (SELECT count(*) FROM cand) < $6
           AND (SELECT id FROM top) < (SELECT id FROM first) + {CLAIM_WINDOW} AS at_end
)
SELECT c.id, c.message, c.agent, l.id AS last_id, l.at_end
FROM cand c JOIN claimed k ON k.message_id = c.id CROSS JOIN last l
UNION ALL
SELECT NULL, NULL, NULL, l.id, l.at_end FROM last l
ORDER BY 1 NULLS LAST
"""


async def claim_unembedded(
    conn: Executor,
    *,
    model: str,
    after_id: int,
    agents: Sequence[str],
    configured: Sequence[str],
    default_on: bool,
    limit: int,
) -> tuple[list[Claimed], int | None, bool]:
    """Claim up to ``limit`` messages past ``after_id`` that have no ``model`` row; returns
    them, the id the next claim starts after (None: nothing past ``after_id``) and whether
    this claim read the table's last row. A poll reads at most ``CLAIM_WINDOW`` messages,
    so one that claims none may still return an id: the scan goes on from there."""
    rows = await conn.fetch(
        CLAIM, after_id, model, list(agents), list(configured), default_on, limit
    )
    claimed = [Claimed(r["id"], r["message"], r["agent"]) for r in rows if r["id"] is not None]
    if not rows or rows[-1]["last_id"] is None:
        return claimed, None, True
    return claimed, rows[-1]["last_id"], bool(rows[-1]["at_end"])


RELEASE_STALE = f"""
DELETE FROM message_embeddings
WHERE claimed_at IS NOT NULL AND claimed_at < now() - interval '{CLAIM_STALE_SECONDS} seconds'
"""


async def release_stale_claims(conn: Executor) -> int:
    """Forget claims a dead replica left; returns how many."""
    status = await conn.execute(RELEASE_STALE)
    return int(status.split()[-1])


RELEASE = """
DELETE FROM message_embeddings
WHERE model = $1 AND message_id = ANY($2::bigint[]) AND embedding IS NULL
"""


async def release_claims(conn: Executor, *, model: str, ids: Sequence[int]) -> None:
    """Give up this replica's claims of a batch it could not embed."""
    await conn.execute(RELEASE, model, list(ids))


UPDATE = """
UPDATE message_embeddings e
SET embedding = v.embedding::vector, dim = v.dim, claimed_at = NULL
FROM unnest($2::bigint[], $3::text[], $4::integer[]) AS v(message_id, embedding, dim)
WHERE e.message_id = v.message_id AND e.model = $1
"""


async def update_embeddings(
    conn: Executor,
    *,
    model: str,
    ids: Sequence[int],
    vectors: Sequence[Sequence[float] | None],
) -> None:
    """Fill the claimed rows in: a None vector (a message without text) ends the claim
    with nothing to find."""
    dims = [0 if v is None else len(v) for v in vectors]
    texts = [None if v is None else dumps(list(v)).decode() for v in vectors]  # '[x,y,...]'
    await conn.execute(UPDATE, model, list(ids), texts, dims)


SEARCH = "SELECT * FROM cascade_related_v2($1, $2, $3, $4, $5, $6)"
"""The search is a function (migrations 0017, 0029): it writes the query's dimension into its
statement, for the HNSW index of that dimension, and turns pgvector's iterative scan on for
its own duration only."""


async def search_outside_prompt(
    conn: Executor,
    *,
    tenant: str,
    session_id: str,
    model: str,
    vector: Sequence[float],
    min_score: float,
    limit: int,
) -> list[Found]:
    """The ``limit`` messages of the session most like ``vector`` (cosine, at least
    ``min_score``) that are outside the prompt: folded into the summary, evicted or
    trimmed (``cascade_related_v2``). A row the current summary folds is ``summarised``
    whatever happened to it before, as ``/messages`` labels it."""
    rows = await conn.fetch(SEARCH, tenant, session_id, model, list(vector), min_score, limit)
    return [
        Found(
            r["pos"],
            r["role"],
            None if r["tool_call_id"] is None else decode(r["tool_call_id"]),
            r["message"],
            r["origin"],
            float(r["score"]),
            bool(r["cleared"]),
        )
        for r in rows
    ]


COUNT = """
SELECT count(*) FILTER (WHERE embedding IS NOT NULL) AS embedded, count(*) AS rows
FROM message_embeddings WHERE tenant = $1 AND session_id = $2 AND model = $3
"""


async def count_embedded(conn: Executor, *, tenant: str, session_id: str, model: str) -> int:
    """How many of the session's messages have a ``model`` vector (tests, the console)."""
    row = await conn.fetchrow(COUNT, tenant, session_id, model)
    return int(row["embedded"]) if row else 0
