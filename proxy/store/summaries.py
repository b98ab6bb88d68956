"""``summaries``: versioned briefings with the boundary they cover."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from proxy.store.db import lend
from proxy.store.nul import decode, encode

if TYPE_CHECKING:
    from proxy.store.db import Executor

__all__ = [
    "fetchrow_latest",
    "insert_summary",
    "invalidate_after",
    "fetch_summaries",
    "fetchrow_stored_by",
    "OWED_SECONDS",
    "take_owed",
    "settle_owed",
    "due_now",
]

OWED_SECONDS = 300.0
"""How long a stored summary's own memory promotion is trusted to run before a request of
the session takes it over (``take_owed``): a fast-model call ends well within it, so the
span is promoted twice only when the process that stored it is gone."""

FETCHROW_LATEST = """
SELECT version, boundary, boundary_hash, content, tokens, model, created_at FROM summaries
WHERE tenant = $1 AND session_id = $2 AND invalidated_at IS NULL
ORDER BY version DESC LIMIT 1
"""


def _decoded(row: Any) -> dict[str, Any]:
    """A summaries row as a dict, its content as the fast model wrote it (``nul``)."""
    out = dict(row)
    out["content"] = decode(out["content"])
    if out.get("model") is not None:
        out["model"] = decode(out["model"])
    return out


async def fetchrow_latest(conn: Executor, *, tenant: str, session_id: str) -> dict[str, Any] | None:
    """The newest summary still valid for the live history."""
    row = await conn.fetchrow(FETCHROW_LATEST, tenant, session_id)
    return None if row is None else _decoded(row)


INSERT_SUMMARY = """
INSERT INTO summaries (tenant, session_id, version, boundary, boundary_hash, content, tokens,
                       model)
SELECT $1, $2, coalesce((SELECT max(version) FROM summaries
                         WHERE tenant = $1 AND session_id = $2), 0) + 1, $3, $4, $5, $6, $7
WHERE ($4::text IS NULL OR (EXISTS (
    SELECT 1 FROM messages WHERE tenant = $1 AND session_id = $2 AND superseded_at IS NULL
      AND pos < $3 AND pos >= coalesce((
          SELECT max(pos) FROM messages WHERE tenant = $1 AND session_id = $2
            AND superseded_at IS NULL AND trimmed_at IS NULL AND pos < $3), -1)
      AND hash = $4)
  AND EXISTS (
    SELECT 1 FROM messages WHERE tenant = $1 AND session_id = $2 AND superseded_at IS NULL
      AND pos = $3 - 1 FOR SHARE)))
  AND ($8::uuid IS NULL OR EXISTS (
    SELECT 1 FROM sessions WHERE tenant = $1 AND id = $2 AND compaction_owner = $8
      AND ($9::text IS NULL OR agent = $9)))
RETURNING version
"""

LOCK_CLAIM = """
SELECT true FROM sessions WHERE tenant = $1 AND id = $2 AND compaction_owner = $3 FOR SHARE
"""


async def insert_summary(
    conn: Executor,
    *,
    tenant: str,
    session_id: str,
    boundary: int,
    boundary_hash: str | None,
    content: str,
    tokens: int,
    model: str | None,
    owner: uuid.UUID | None = None,
    agent: str | None = None,
    owe_from: int | None = None,
) -> int | None:
    """Insert the next version; None when the last folded message is no longer live, or
    when ``owner`` (a compaction) no longer holds the session's compaction claim, or the
    session no longer runs ``agent`` (with ``owner``: the agent the summary was made for).

    ``boundary_hash`` is the chain hash of the last folded message; a chain hash covers the
    whole prefix before it, so one live row with that hash proves the folded span is intact.
    That row sits just below ``boundary``: at or after the last live untrimmed row below it
    (only trimmed rows can lie between; an untrimmed one past it is a message an edit stored
    since, which the summary's boundary would hide from every prompt). The check looks for
    the hash within that range of positions only: no index on ``messages`` leads with the
    hash, and a lookup by the hash alone let the planner read the whole table.

    The fast model takes seconds; if the client edited history in the meantime, the folded
    span no longer describes the live history and the summary must not be written.
    ``content`` and ``model`` are stored through ``nul.encode`` (a model can echo a NUL).

    The live row just below ``boundary`` is locked (``FOR SHARE``) for the statement: a
    divergence that the summary must not survive (``boundary > from_pos``) supersedes that
    row, and the supersede and ``invalidate_after`` are separate statements. Without the
    lock an insert whose snapshot predates the supersede could commit after the
    invalidation read the table, leaving a valid summary over superseded rows. With it
    the two serialise: a supersede already under way makes the insert wait and then find
    the row superseded (None); an insert under way makes the supersede wait, and the
    invalidation that follows sees the summary. The row is a ``messages_live_pos`` lookup.

    The claim check keeps a compaction of a session deleted meanwhile out of a new session
    made under the same id: a client resending the same history makes the hash check pass
    there, and the deleted session's summary would outlive its delete. With ``owner`` the
    session row is locked first (``LOCK_CLAIM``, ``FOR SHARE``) in the insert's transaction:
    a claim read in the statement's snapshot alone passed for a compaction whose lease
    lapsed while another took the claim and read the session, and its summary then landed
    under the new holder's claim. With the lock the taker's ``claim_compaction`` waits for
    the insert and reads its summary, or the insert finds the claim gone (None). The lock
    order is a step's and the taker's: the session row, then the message row.

    The agent check reads the row in the statement's snapshot, not locked by the statement
    (locking it after the message row would order the locks against a step's, which takes
    the session row first): a move that commits while the statement runs orders after the
    summary, as one made just after it would, which the new agent's prompts then carry.

    With ``owner`` and ``owe_from``, the session owes the memory promotion of the span from
    ``owe_from`` to ``boundary`` (``OWE``), in the insert's transaction: a stop or a kill
    after the insert leaves it owed for the next request (``take_owed``), not lost.
    """
    args: tuple[Any, ...] = (tenant, session_id, boundary, boundary_hash, encode(content))
    args += (tokens, None if model is None else encode(model), owner, agent)
    if owner is None:
        version = await conn.fetchval(INSERT_SUMMARY, *args)
        return None if version is None else int(version)
    async with contextlib.AsyncExitStack() as stack:
        lent = await stack.enter_async_context(lend(conn))
        await stack.enter_async_context(lent.transaction())
        if not await lent.fetchval(LOCK_CLAIM, tenant, session_id, owner):
            return None
        version = await lent.fetchval(INSERT_SUMMARY, *args)
        if version is not None and owe_from is not None:
            await lent.execute(OWE, tenant, session_id, owe_from, boundary, OWED_SECONDS)
    return None if version is None else int(version)


# A span owed already (its promotion running, or cut) is widened, not replaced: the owed
# span's start is the older one's, so nothing owed is forgotten by the next compaction. Its
# due time stays the older one's (least() passes over a NULL): pushed back by each summary,
# a session summarized more often than OWED_SECONDS never had a cut promotion taken over.
OWE = """
UPDATE sessions SET promotion_from = least(promotion_from, $3), promotion_to = $4,
    promotion_due = least(promotion_due, now() + make_interval(secs => $5))
WHERE tenant = $1 AND id = $2
"""

TAKE_OWED = """
UPDATE sessions SET promotion_due = now() + make_interval(secs => $3)
WHERE tenant = $1 AND id = $2 AND promotion_due < now()
RETURNING promotion_from, promotion_to
"""


async def take_owed(conn: Executor, *, tenant: str, session_id: str) -> tuple[int, int] | None:
    """The span whose promotion the session owes, once that is past its due time (its own
    promotion stopped, or its process is gone), taken for another ``OWED_SECONDS``: a
    request on another replica at the same time finds it taken."""
    row = await conn.fetchrow(TAKE_OWED, tenant, session_id, OWED_SECONDS)
    return None if row is None else (int(row["promotion_from"]), int(row["promotion_to"]))


# What is owed less the span [$3, $4) whose promotion ended: nothing when it covers it, the
# rest when it covers one end (a span widened by a later summary: each of the two promotions
# settles its own part, in either order); a span inside or apart from it leaves it.
SETTLE_OWED = """
UPDATE sessions SET
    promotion_from = CASE WHEN promotion_to <= $4 AND $3 <= promotion_from THEN NULL
        WHEN $3 <= promotion_from THEN $4 ELSE promotion_from END,
    promotion_to = CASE WHEN $3 <= promotion_from AND promotion_to <= $4 THEN NULL
        WHEN promotion_to <= $4 THEN $3 ELSE promotion_to END,
    promotion_due = CASE WHEN $3 <= promotion_from AND promotion_to <= $4 THEN NULL
        ELSE promotion_due END
WHERE tenant = $1 AND id = $2 AND promotion_from < $4 AND $3 < promotion_to
  AND ($3 <= promotion_from OR promotion_to <= $4)
"""


async def settle_owed(
    conn: Executor, *, tenant: str, session_id: str, span: tuple[int, int]
) -> None:
    """The promotion of ``span`` ended (its facts stored, suggested, or its failure logged):
    what the session owes is ``span`` less (``SETTLE_OWED``), so a span a later summary
    widened stays owed for the part the other promotion has not ended, and no more."""
    await conn.execute(SETTLE_OWED, tenant, session_id, *span)


# The owed promotion is cut too, in the same statement (a diverging request costs none
# more), at the boundary of the newest summary left (at or before the divergence): the
# positions past it are folded again from there, their text before the divergence too, and
# promoted with that fold; taken over, the old span would promote them twice (and read the
# other text from the divergence on).
INVALIDATE_AFTER = """
WITH kept AS (
    SELECT coalesce((SELECT boundary FROM summaries WHERE tenant = $1 AND session_id = $2
        AND invalidated_at IS NULL AND boundary <= $3 ORDER BY version DESC LIMIT 1), 0) AS upto
), owed AS (
    UPDATE sessions SET promotion_to = CASE WHEN promotion_from < upto THEN upto END,
        promotion_from = CASE WHEN promotion_from < upto THEN promotion_from END,
        promotion_due = CASE WHEN promotion_from < upto THEN promotion_due END
    FROM kept WHERE tenant = $1 AND id = $2 AND promotion_to > upto
)
UPDATE summaries SET invalidated_at = now()
WHERE tenant = $1 AND session_id = $2 AND invalidated_at IS NULL AND boundary > $3
"""


async def invalidate_after(conn: Executor, *, tenant: str, session_id: str, pos: int) -> None:
    """A history that diverged at ``pos`` invalidates summaries that folded messages past it,
    and owes no promotion of the positions the summaries left do not fold
    (``INVALIDATE_AFTER``): a later compaction folds and promotes them."""
    await conn.execute(INVALIDATE_AFTER, tenant, session_id, pos)


FETCH_SUMMARIES = """
SELECT version, boundary, content, tokens, model, invalidated_at, created_at FROM summaries
WHERE tenant = $1 AND session_id = $2 ORDER BY version
"""


async def fetch_summaries(conn: Executor, *, tenant: str, session_id: str) -> list[dict[str, Any]]:
    return [_decoded(r) for r in await conn.fetch(FETCH_SUMMARIES, tenant, session_id)]


# The summary a compaction's started event (``$1``) led to: the one at the boundary it named,
# stored after it and before the session's next started event (a compaction of the same span
# after it stores at the same boundary). Compactions of a session hold its claim in turn, and
# each writes its started event before its summary, so no other stores one in that window.
# Its version is not the one the event read plus one: versions count invalidated summaries
# too, and a reset starts them again. The boundary is compared as text: a ``to_pos`` that
# is no integer (not this release's) names no summary, where a cast would refuse the pass.
FETCHROW_STORED_BY = """
SELECT sm.version,
       (extract(epoch FROM sm.created_at - s.created_at) * 1000)::bigint AS duration_ms
FROM events s JOIN summaries sm ON sm.tenant = s.tenant AND sm.session_id = s.session_id
WHERE s.id = $1
  AND sm.boundary::text = s.data->>'to_pos'
  AND sm.created_at >= s.created_at
  AND NOT EXISTS (
    SELECT 1 FROM events n
    WHERE n.tenant = s.tenant AND n.session_id = s.session_id AND n.id > s.id
      AND n.name = 'context.compaction.started' AND n.created_at <= sm.created_at)
ORDER BY sm.version DESC LIMIT 1
"""


async def fetchrow_stored_by(conn: Executor, started_id: int) -> dict[str, Any] | None:
    """The version of the summary the compaction started by event ``started_id`` stored,
    and how long after its start (ms): a compaction cut between the two (a stop, a kill)
    has no completed event though its summary is there."""
    row = await conn.fetchrow(FETCHROW_STORED_BY, started_id)
    return None if row is None else dict(row)


DUE_NOW = """
UPDATE sessions SET promotion_due = now()
WHERE (tenant, id) IN (SELECT * FROM unnest($1::text[], $2::text[]))
  AND promotion_due > now()
"""


async def due_now(conn: Executor, keys: Collection[tuple[str, str]]) -> None:
    """The promotions owed by ``keys``' sessions (tenant, id), cut by a stop: due at once,
    for the sessions' next requests to take over without waiting out ``OWED_SECONDS``."""
    await conn.execute(DUE_NOW, [k[0] for k in keys], [k[1] for k in keys])
