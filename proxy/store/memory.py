"""The ``memory`` table: long-term facts per tenant and scope, and which of them a
session's agent reads (the suggestions a person answers before a fact is stored are
``store.memory_suggestions``'). Facts reach :func:`add_facts` only after
``cascade.memory.sanitize_fact``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from proxy.cascade.memory import fact_key
from proxy.cascade.memory_block import memory_line
from proxy.cascade.phases import kept_text

if TYPE_CHECKING:
    from proxy.store.db import Connection, Executor

__all__ = [
    "fetch_listed_facts",
    "add_facts",
    "stored_matches",
    "key_stored_facts",
    "delete_fact",
    "session_facts",
]

FACT_COLUMNS = "id, scope, fact AS text, source_session, created_at"

FETCH_LISTED = """
SELECT m.id, m.scope, m.fact AS text, m.source_session, m.created_at, s.agent AS source_agent
FROM (SELECT DISTINCT unnest($2::text[])) AS q(scope)
CROSS JOIN LATERAL (
    SELECT id, scope, fact, source_session, created_at FROM memory
    WHERE tenant = $1 AND scope >= q.scope AND scope <= q.scope AND id > $5
    ORDER BY scope, id
    LIMIT LEAST($3::bigint::numeric + $4::bigint::numeric, 9223372036854775807)::bigint
) m
LEFT JOIN sessions s ON s.tenant = $1 AND s.id = m.source_session
ORDER BY m.id LIMIT $3 OFFSET $4
"""


async def fetch_listed_facts(
    conn: Executor,
    *,
    tenant: str,
    scopes: Sequence[str],
    limit: int | None = None,
    offset: int = 0,
    after: int = 0,
) -> list[Any]:
    """The facts of ``scopes``, oldest first, a page of them (``limit`` None: all from
    ``offset`` on, of those with an id past ``after``), each with the agent its source
    session runs now (``source_agent``: None when the fact has no source session or it was
    deleted), which decides whether a key limited to some agents may see that session's id.

    Each scope is read as its own range of ``memory_scope_id``, at most ``limit + offset``
    rows past ``after``, and the ranges merged by id, as :func:`session_facts` reads: with
    ``scope = ANY(...) ORDER BY id`` the generic plan PostgreSQL may switch a prepared
    statement to (asyncpg prepares every one) guesses each scope a tenth of the table and
    walks ``memory_pkey`` in id order through the tenant's every fact for a small scope; an
    equality inside the join did the same. The range keeps ``scope`` in the order asked,
    which only that index gives without reading the whole scope (docs/perf.md,
    "FETCH_LISTED's generic plan")."""
    return list(await conn.fetch(FETCH_LISTED, tenant, list(scopes), limit, offset, after))


LOCK_SCOPE = "SELECT pg_advisory_xact_lock(hashtextextended('memory:' || $1 || ':' || $2, 0))"
UNKEYED_ROW = (
    "(fact_key IS NULL OR (right(fact_key, 1) IN ('.', '\u3002')"
    " AND rtrim(fact_key, ' .\u3002') <> ''))"
)
"""A row to key: none yet, or one of the form before migration 0033, which a replica on
that code keeps making from the rows 0033 cleared until it is replaced (a key that ends in
a closing full stop yet is not stops alone; :func:`fact_key` drops them). The partial index
``memory_unkeyed_stops`` (migration 0034) holds these rows in each scope's order, so the
test is one lookup and a batch reads its rows alone, however many the scope or the table
holds (spelled as the index's, which the planner matches, and of a kind it guesses rare:
with ``<>`` alone it guesses most rows match and reads the table)."""
UNKEYED = f"""
SELECT id, fact FROM memory WHERE tenant = $1 AND scope = $2 AND {UNKEYED_ROW}
ORDER BY id LIMIT $3
"""
STORED_KEYS = """
SELECT fact_key FROM memory WHERE tenant = $1 AND scope = $2 AND fact_key = ANY($3::text[])
"""
SET_KEYS = """
UPDATE memory m SET fact_key = k.key FROM unnest($2::bigint[], $3::text[]) AS k(id, key)
WHERE m.tenant = $1 AND m.id = k.id
"""
INSERT_FACTS = f"""
INSERT INTO memory (tenant, scope, fact, source_session, fact_key)
SELECT $1, $2, f, $4, k FROM unnest($3::text[], $5::text[]) WITH ORDINALITY AS t(f, k, o)
ORDER BY o
ON CONFLICT (tenant, scope, fact_key) DO NOTHING
RETURNING {FACT_COLUMNS}
"""

REPEATED = "\x01repeated:"
"""The key of a stored fact that repeats an older one of its scope (stored before keys
existed, when the comparison was looser): unique per row, and never a :func:`fact_key`,
which holds no control character."""


async def stored_matches(
    conn: Executor, *, tenant: str, scope: str, texts: Sequence[str]
) -> tuple[set[str], list[str]]:
    """What a check of ``texts`` against the scope's stored facts reads, without the lock a
    write takes: the keys of ``texts`` the scope stores, and the text of each fact not yet
    keyed (:data:`UNKEYED_ROW`; none once a write has keyed the scope)."""
    keys = [fact_key(text) for text in texts]
    stored = await conn.fetch(STORED_KEYS, tenant, scope, keys)
    unkeyed = await conn.fetch(UNKEYED, tenant, scope, None)  # LIMIT NULL: every one
    return {row["fact_key"] for row in stored}, [row["fact"] for row in unkeyed]


async def _key_unkeyed(conn: Connection, tenant: str, scope: str, limit: int | None) -> int:
    """Give the scope's oldest ``limit`` facts that have none (None: all) their key (rows
    stored before migration 0030, or by a replica still on older code, which may key them
    in the form before 0033: :data:`UNKEYED_ROW`); a fact whose key an
    older one holds gets a :data:`REPEATED` one. Called under the scope's lock; a scope with
    no such row costs one lookup in a partial index. The number of rows keyed is returned."""
    rows = await conn.fetch(UNKEYED, tenant, scope, limit)
    if not rows:
        return 0
    keys = [fact_key(row["fact"]) for row in rows]
    taken = {r["fact_key"] for r in await conn.fetch(STORED_KEYS, tenant, scope, keys)}
    given = []
    for row, key in zip(rows, keys, strict=True):
        given.append(key if key not in taken else f"{REPEATED}{row['id']}")
        taken.add(key)
    await conn.execute(SET_KEYS, tenant, [row["id"] for row in rows], given)
    return len(rows)


NEXT_UNKEYED = f"""
SELECT tenant, scope FROM memory WHERE (tenant, scope) > ($1, $2) AND {UNKEYED_ROW}
ORDER BY tenant, scope LIMIT 1
"""


async def key_stored_facts(pool: Any, *, batch: int = 500) -> int:
    """Key every fact stored without a key, ``batch`` of one scope per transaction under the
    scope's lock, as a write keys them: what the proxy runs once it starts, so that no
    write or suggestion reads the old rows of a scope. Scopes are taken in order, each to
    its end, and then from the first again until none has such a row (a replica on older
    code may have stored one behind), so each lookup is one step of the index. Each batch
    is committed, so a stop loses none and the next start goes on; the number of batches
    is returned."""
    batches, after = 0, ("", "")  # no scope is named ""
    while True:
        async with pool.acquire() as conn:
            found = await conn.fetchrow(NEXT_UNKEYED, *after)
        if found is None:
            if after == ("", ""):
                return batches
            after = ("", "")
            continue
        after = (found["tenant"], found["scope"])
        keyed = batch
        while keyed == batch:
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute(LOCK_SCOPE, *after)
                keyed = await _key_unkeyed(conn, *after, batch)
            batches += 1 if keyed else 0


async def add_facts(
    conn: Connection,
    *,
    tenant: str,
    scope: str,
    texts: Sequence[str],
    vet: Callable[[set[str]], list[str]],
    source_session: str | None = None,
) -> list[Any]:
    """Store the facts ``vet`` returns when given the keys (:func:`fact_key`) of ``texts``
    the scope already stores; ``vet`` raises to store nothing. The duplicate check is the
    database's: a lookup of those keys, and an insert that skips a key the scope holds (the
    unique index ``memory_fact_key``), so a write reads the rows it compares with, not the
    whole scope. The rows returned are the facts stored. The scope is locked meanwhile, as
    a replica on the previous code (which reads the scope and stores no key) expects."""
    async with conn.transaction():
        await conn.execute(LOCK_SCOPE, tenant, scope)
        await _key_unkeyed(conn, tenant, scope, None)
        keys = [fact_key(text) for text in texts]
        stored = await conn.fetch(STORED_KEYS, tenant, scope, keys)
        facts = vet({row["fact_key"] for row in stored})
        if not facts:
            return []
        keys = [fact_key(fact) for fact in facts]
        return list(await conn.fetch(INSERT_FACTS, tenant, scope, facts, source_session, keys))


async def delete_fact(
    conn: Connection, *, tenant: str, fact_id: int, check: Callable[[str], None]
) -> bool:
    """Delete one fact after ``check`` has seen its scope (it raises to keep the fact), and
    have the turns whose kept ``<memory>`` block shows it make their block again
    (:func:`_forget_in_turns`); ``False`` when the tenant has no such fact."""
    async with conn.transaction():
        row = await conn.fetchrow(
            "SELECT scope, fact FROM memory WHERE tenant = $1 AND id = $2 FOR UPDATE",
            tenant,
            fact_id,
        )
        if row is None:
            return False
        check(row["scope"])
        await conn.execute("DELETE FROM memory WHERE tenant = $1 AND id = $2", tenant, fact_id)
        await _forget_in_turns(conn, tenant, row["scope"], row["fact"])
    return True


def _reads_scope(scope: str, agent: str) -> str:
    """SQL: a session of ``agent`` reads the facts of ``scope`` (SQL expressions both), those
    of ``global`` and of its agent's ``agent:<name>``; the ``default`` agent has no scope of
    its own, so a fact stored in ``agent:default`` is read by none."""
    return f"({scope} = 'global' OR ({agent} <> 'default' AND {scope} = 'agent:' || {agent}))"


SHOWING_TURNS = """
SELECT id, turn_blocks FROM sessions
WHERE tenant = $1 AND strpos(turn_blocks, '"memory":{') > 0 AND strpos(turn_blocks, $3) > 0
  AND """ + _reads_scope("$2", "agent")
FORGET_IN_TURNS = """
UPDATE sessions s SET turn_blocks = t.blocks
FROM unnest($2::text[], $3::text[], $4::text[]) AS t(id, was, blocks)
WHERE s.tenant = $1 AND s.id = t.id AND s.turn_blocks = t.was
"""


async def _forget_in_turns(conn: Connection, tenant: str, scope: str, fact: str) -> None:
    """Leave the memory block out of what each turn of the scope's sessions keeps when the
    block shows ``fact``, so the turn's next step reads the facts again and sends the block
    without it (README Decisions, "A deleted fact"); a turn written meanwhile is left as
    it is. A turn whose block does not show the fact keeps its bytes: the block's line for
    it (:func:`~proxy.cascade.memory_block.memory_line`) is looked for, not its text, which
    a longer fact may hold, and the database reads it first in the JSON the turn is kept as
    (:func:`~proxy.cascade.phases.kept_text`), so only the turns that may show it are read."""
    line = "\n" + memory_line(fact)
    ids, was, blocks = [], [], []
    found = kept_text({"": line})[5:-2]  # the line as the kept JSON spells it
    for row in await conn.fetch(SHOWING_TURNS, tenant, scope, found):
        try:
            kept = json.loads(row["turn_blocks"])
        except ValueError:
            continue
        shown = kept.get("memory") if isinstance(kept, dict) else None
        block = shown.get("block") if isinstance(shown, dict) else None
        if isinstance(block, str) and line in block:
            del kept["memory"]
            ids.append(row["id"])
            was.append(row["turn_blocks"])
            blocks.append(kept_text(kept))
    if ids:
        await conn.execute(FORGET_IN_TURNS, tenant, ids, was, blocks)


SESSION_FACTS = """
SELECT fact FROM (
    (SELECT id, fact FROM memory
     WHERE tenant = $1 AND scope >= 'global' AND scope <= 'global'
       AND EXISTS (SELECT FROM sessions WHERE tenant = $1 AND id = $2)
     ORDER BY scope, id
     LIMIT LEAST($3::bigint::numeric + $4::bigint::numeric, 9223372036854775807)::bigint)
    UNION ALL
    (SELECT id, fact FROM memory
     WHERE tenant = $1
       AND scope >= (SELECT 'agent:' || agent FROM sessions
                     WHERE tenant = $1 AND id = $2 AND agent <> 'default')
       AND scope <= (SELECT 'agent:' || agent FROM sessions
                     WHERE tenant = $1 AND id = $2 AND agent <> 'default')
     ORDER BY scope, id
     LIMIT LEAST($3::bigint::numeric + $4::bigint::numeric, 9223372036854775807)::bigint)
) f
ORDER BY id LIMIT $3 OFFSET $4
"""


async def session_facts(
    conn: Executor, *, tenant: str, session_id: str, limit: int | None = None, offset: int = 0
) -> list[str]:
    """The facts a session's prompt carries: its agent's scope and ``global``
    (:func:`_reads_scope`), oldest first, in one statement (the session row names the
    agent); ``limit`` of them
    from ``offset`` on (None: all), since the block holds only the oldest few of a large
    scope.

    Each scope is read as its own range of ``memory_scope_id`` (migration 0035), at most
    ``limit + offset`` rows, and the two merged by id: the facts of the tenant's other scopes
    are never read. The ranges are written ``scope >= x AND scope <= x``, not ``=``: the
    agent's scope comes from the session row, a value the planner does not know, and with
    an equality, in a tenant whose ``global`` scope is large, it took the id order for
    granted from ``memory_pkey`` and walked the tenant's every fact for the agent's small
    scope (or none), under every ``plan_cache_mode``, custom plans included (docs/perf.md,
    "memory_scope unused"); a range keeps ``scope`` in the order asked, which only the index
    gives without a sort. Where the large scope is an agent's, both forms plan the index."""
    rows = await conn.fetch(SESSION_FACTS, tenant, session_id, limit, offset)
    return [row["fact"] for row in rows]
