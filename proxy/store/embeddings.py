"""The ``message_embeddings`` table (migration 0015): claim, fill, search.

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
    "Claimed",
    "Found",
    "claim_unembedded",
    "release_stale_claims",
    "release_claims",
    "update_embeddings",
    "search_outside_prompt",
    "count_embedded",
]

CLAIM_STALE_SECONDS = 60
"""A claim older than this belongs to a replica that died mid-batch; it is released."""


@dataclass(frozen=True, slots=True)
class Claimed:
    """A message this replica claimed to embed."""

    message_id: int
    message: Any


@dataclass(frozen=True, slots=True)
class Found:
    """A search hit: where the message is, what it was, and its cosine similarity."""

    pos: int
    role: str
    tool_call_id: str | None
    message: Any
    origin: str
    score: float


# The candidates: live, non-system messages of sessions whose agent has retrieval on (an
# agent the config does not name runs the default context: $5), past the scan cursor, with
# no row for this model yet. Ordered by id, so the cursor moves through the table once.
CLAIM = """
WITH cand AS (
    SELECT m.id, m.tenant, m.session_id, m.pos, m.message
    FROM messages m JOIN sessions s ON s.tenant = m.tenant AND s.id = m.session_id
    WHERE m.id > $1 AND m.superseded_at IS NULL AND m.role <> 'system'
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
)
SELECT c.id, c.message, (SELECT max(id) FROM cand) AS last_id
FROM cand c JOIN claimed k ON k.message_id = c.id
UNION ALL
SELECT NULL, NULL, (SELECT max(id) FROM cand)
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
) -> tuple[list[Claimed], int | None]:
    """Claim up to ``limit`` messages past ``after_id`` that have no ``model`` row; returns
    them and the last id the scan looked at (None: nothing past ``after_id``)."""
    rows = await conn.fetch(
        CLAIM, after_id, model, list(agents), list(configured), default_on, limit
    )
    claimed = [Claimed(r["id"], r["message"]) for r in rows if r["id"] is not None]
    return claimed, rows[-1]["last_id"] if rows else None


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


# The latest valid summary's boundary: messages before it are folded into the summary.
_BOUNDARY = """
coalesce((SELECT s.boundary FROM summaries s
          WHERE s.tenant = $1 AND s.session_id = $2 AND s.invalidated_at IS NULL
          ORDER BY s.version DESC LIMIT 1), 0)
"""

# Two kinds of candidates, each read the cheap way: the rows before the boundary, ranked on
# message_embeddings alone (the best OVERFETCH x $6 of them, so a superseded message among
# them does not leave the answer short), and the rows after it that eviction or the
# overflow guard took out of the prompt, found from messages (the window: a few rows).
# messages is read by id only for those candidates.
_SEARCH = """
WITH b AS (SELECT {boundary} AS boundary),
folded AS (
    SELECT e.message_id, e.embedding::vector({dim}) <=> $4::vector({dim}) AS d
    FROM message_embeddings e
    WHERE e.tenant = $1 AND e.session_id = $2 AND e.model = $3 AND e.dim = {dim}
      AND e.embedding IS NOT NULL AND e.pos < (SELECT boundary FROM b)
    ORDER BY d
    LIMIT {overfetch} * $6
),
dropped AS (
    SELECT e.message_id, e.embedding::vector({dim}) <=> $4::vector({dim}) AS d
    FROM messages m
    JOIN message_embeddings e ON e.message_id = m.id AND e.model = $3 AND e.dim = {dim}
    WHERE m.tenant = $1 AND m.session_id = $2 AND m.superseded_at IS NULL
      AND m.pos >= (SELECT boundary FROM b)
      AND (m.placeholder IS NOT NULL OR m.trimmed_at IS NOT NULL)
      AND e.embedding IS NOT NULL
)
SELECT m.pos, m.role, m.tool_call_id, m.message,
       CASE WHEN m.trimmed_at IS NOT NULL THEN 'trimmed'
            WHEN m.placeholder IS NOT NULL THEN 'evicted'
            ELSE 'summarised' END AS origin,
       1 - c.d AS score
FROM (SELECT * FROM folded UNION ALL SELECT * FROM dropped) c
JOIN messages m ON m.id = c.message_id
WHERE m.superseded_at IS NULL AND c.d <= 1 - $5::float8
ORDER BY c.d
LIMIT $6
"""
OVERFETCH = 4
_SEARCHES: dict[int, str] = {}


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
    trimmed. The dimension is written into the statement so the planner can use the HNSW
    index of that dimension (one statement text per dimension)."""
    dim = len(vector)
    sql = _SEARCHES.get(dim)
    if sql is None:
        sql = _SEARCHES[dim] = _SEARCH.format(dim=int(dim), boundary=_BOUNDARY, overfetch=OVERFETCH)
    rows = await conn.fetch(sql, tenant, session_id, model, list(vector), min_score, limit)
    return [
        Found(
            r["pos"],
            r["role"],
            None if r["tool_call_id"] is None else decode(r["tool_call_id"]),
            r["message"],
            r["origin"],
            float(r["score"]),
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
