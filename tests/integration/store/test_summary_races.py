"""A compaction's summary insert raced against a chat that edits the history (DESIGN §4).

The chat supersedes the stored tail, then invalidates the summaries whose boundary lies past
the edit: two autocommit statements. An insert whose snapshot predates the supersede and
which commits after the invalidation read the table would leave a valid summary over a
superseded span. The insert in flight is held open in a transaction (its check done, its
row written, not committed), which is that statement's window made wide; every wait is on
the database's own lock view, never a sleep of a guessed length.

The session's positions 19 and 20 are trimmed, as the overflow guard leaves the oldest
rounds after a boundary: a summary up to 21 then has its last folded message at 18, and an
edit there, between that message and the boundary, must count as one the summary folded.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest

from proxy.cascade.tokens import MemoCounter, message_cost
from proxy.config_context import ContextConfig
from proxy.history import chain
from proxy.services import incoming
from proxy.services.history import reconcile_and_load
from proxy.session_id import SessionKey
from proxy.store import leases, messages as msgs, summaries, writes
from tests.integration.store.helpers import OWNER, A, B, create_session

T, S = "t-a", "s1"
CTX = ContextConfig()
BOUNDARY = 21  # the summary folds positions below 21


def history(n: int, edited: int | None = None) -> list[dict[str, Any]]:
    """A system message and ``n`` alternating user/assistant messages; ``edited`` changes
    the message at that position, as a client editing its history does."""
    out: list[dict[str, Any]] = [{"role": "system", "content": "sys"}]
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        out.append({"role": role, "content": f"m{i} " * 20})
    if edited is not None:
        out[edited] = {**out[edited], "content": "edited"}
    return out


async def chat(conn: Any, messages: list[dict[str, Any]]) -> None:
    """What a chat request does with the history it is sent (``reconcile_and_load``)."""
    count = MemoCounter(message_cost(None))
    await reconcile_and_load(
        conn,
        SessionKey(T, S),
        incoming.read(messages, chain(messages), CTX, count, None),
        agent="default",
        model="m",
        ctx=CTX,
        count=count,
        stamp=lambda evs: ([e.name for e in evs], [dict(e.data) for e in evs]),
        owner=OWNER,
    )


async def insert(conn: Any, hash_pos: int, owner: uuid.UUID | None = None) -> int | None:
    """The compaction's insert of a summary up to ``BOUNDARY``, its last folded message at
    ``hash_pos`` (below ``BOUNDARY - 1`` when the messages between were trimmed), by the
    compaction ``owner`` when given."""
    boundary_hash = await conn.fetchval(
        "SELECT hash FROM messages WHERE tenant = $1 AND session_id = $2 AND pos = $3"
        " AND superseded_at IS NULL",
        T,
        S,
        hash_pos,
    )
    return await summaries.insert_summary(
        conn,
        tenant=T,
        session_id=S,
        boundary=BOUNDARY,
        boundary_hash=boundary_hash,
        content="briefing",
        tokens=2,
        model="fast-model",
        owner=owner,
    )


async def waiting_or_done(watcher: Any, task: asyncio.Task[Any]) -> None:
    """Until ``task`` ends or some statement of this database waits on a lock."""
    async with asyncio.timeout(10):
        while not task.done():
            waiting = await watcher.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if waiting:
                return
            await asyncio.sleep(0.01)  # a poll of the condition, not a wait for it


async def valid_over_superseded(conn: Any) -> list[Any]:
    """Valid summaries whose folded span holds a superseded message (DESIGN §4 forbids)."""
    return await conn.fetch(
        "SELECT s.version FROM summaries s WHERE s.tenant = $1 AND s.session_id = $2"
        " AND s.invalidated_at IS NULL AND EXISTS (SELECT 1 FROM messages m"
        " WHERE m.tenant = $1 AND m.session_id = $2 AND m.pos < s.boundary"
        " AND m.superseded_at IS NOT NULL)",
        T,
        S,
    )


@pytest.fixture
async def conns(pool: asyncpg.Pool) -> Any:
    async with pool.acquire() as a, pool.acquire() as b, pool.acquire() as watcher:
        await create_session(a, tenant=T, session_id=S, agent="default", model="m")
        await chat(a, history(30))
        # positions 19 and 20 trimmed: a summary up to 21 then has its last folded at 18
        await a.execute(
            "UPDATE messages SET trimmed_at = now() WHERE tenant = $1 AND session_id = $2"
            " AND pos IN (19, 20)",
            T,
            S,
        )
        yield a, b, watcher


@pytest.mark.parametrize(("hash_pos", "edited"), [(20, 11), (18, 20)])
async def test_an_edit_during_the_insert_leaves_no_valid_summary_over_superseded_rows(
    conns: Any, hash_pos: int, edited: int
) -> None:
    """The insert's check is done and its row written, uncommitted, when the edit comes:
    the edit waits for it, then invalidates what it wrote. Both an edit before the last
    folded message and one among the trimmed messages after it, below the boundary."""
    a, b, watcher = conns
    async with a.transaction():
        assert await insert(a, hash_pos) == 1
        edit = asyncio.create_task(chat(b, history(30, edited=edited)))
        await waiting_or_done(watcher, edit)
    await edit
    assert await valid_over_superseded(a) == []
    rows = await summaries.fetch_summaries(a, tenant=T, session_id=S)
    assert [r["invalidated_at"] is not None for r in rows] == [True]


@pytest.mark.parametrize(("hash_pos", "edited"), [(20, 11), (18, 20)])
async def test_an_insert_during_an_edit_writes_nothing(
    conns: Any, hash_pos: int, edited: int
) -> None:
    """The edit's supersede is done, uncommitted, when the insert comes: the insert waits
    for it and finds its span changed, so the compaction says the history changed rather
    than writing a summary that is invalid from the start."""
    a, b, watcher = conns
    async with b.transaction():
        await msgs.supersede_from(b, tenant=T, session_id=S, from_pos=edited)
        landed = asyncio.create_task(insert(a, hash_pos))
        await waiting_or_done(watcher, landed)
    assert await landed is None
    assert await summaries.fetch_summaries(a, tenant=T, session_id=S) == []


async def test_an_edit_among_the_trimmed_rows_before_the_boundary_discards_the_summary(
    conns: Any,
) -> None:
    """An edit while the fast model works, at a trimmed position between the last folded
    message and the boundary: the last folded message is untouched, so its hash alone
    passes, but the edit's own messages there would lie behind the summary, in no prompt."""
    a, b, _ = conns
    await chat(b, history(30, edited=20))
    assert await insert(a, 18) is None
    assert await summaries.fetch_summaries(a, tenant=T, session_id=S) == []


async def test_a_last_folded_message_trimmed_meanwhile_still_takes_the_summary(
    conns: Any,
) -> None:
    """The guard trims the oldest rounds of the window, the ones a compaction folds: one
    trimmed while the fast model works is still the same message, the span intact."""
    a, _, _ = conns
    await a.execute(
        "UPDATE messages SET trimmed_at = now() WHERE tenant = $1 AND session_id = $2 AND pos = 18",
        T,
        S,
    )
    assert await insert(a, 18) == 1
    assert await valid_over_superseded(a) == []


CLAIM = {"tenant": T, "session_id": S}


async def lapsed_claim(conn: Any) -> None:
    """Compaction A's claim, lapsed: its replica stalled past the lease."""
    assert await leases.claim_compaction(conn, owner=A, ttl=60.0, **CLAIM)
    await conn.execute(
        "UPDATE sessions SET compaction_expires = clock_timestamp() - interval '1 second'"
        " WHERE tenant = $1 AND id = $2",
        T,
        S,
    )


async def take(conn: Any, after: asyncio.Event | None = None) -> list[int]:
    """Compaction B takes the lapsed claim and reads the session's summaries to fold."""
    if after is not None:
        await after.wait()
    assert await leases.claim_compaction(conn, owner=B, ttl=60.0, **CLAIM)
    return [r["version"] for r in await summaries.fetch_summaries(conn, **CLAIM)]


async def waits(watcher: Any, task: asyncio.Task[Any], n: int) -> None:
    """Until ``task`` ends or ``n`` statements of this database wait on a lock (a backend's
    own pid is not the server's through a pooler)."""
    async with asyncio.timeout(10):
        while not task.done():
            waiting = await watcher.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if waiting >= n:
                return
            await asyncio.sleep(0.01)  # a poll of the condition, not a wait for it


async def test_a_claim_taken_from_a_compaction_past_its_lease_sees_what_it_wrote(
    conns: Any,
) -> None:
    """Compaction A's claim lapsed while its insert runs: the insert checked the claim,
    still A's, and wrote its row, uncommitted, when B takes the claim and reads the session
    to fold it. B's claim waits for the insert, so B reads A's summary; taken first, it
    would read none, and A's summary would land after the claim passed, under B's
    compaction, which folds as if it were not there."""
    a, b, watcher = conns
    await lapsed_claim(a)
    written = asyncio.Event()
    taken = asyncio.create_task(take(b, written))
    async with a.transaction():
        stored = await insert(a, 20, owner=A)
        written.set()
        await waiting_or_done(watcher, taken)
    seen = await taken
    assert stored == 1 and seen == [1]


async def test_a_claim_taken_while_the_insert_waits_on_the_folded_row_sees_its_summary(
    conns: Any, pool: asyncpg.Pool
) -> None:
    """The insert as one autocommit statement: it waits for the last folded message's row
    (a trim of it in flight) when B takes A's lapsed claim. Its claim check had read the
    snapshot, A's; B's claim waits for the insert, which holds the session row, and reads
    the summary it wrote."""
    a, b, watcher = conns
    await lapsed_claim(a)
    async with pool.acquire() as trim, trim.transaction():
        await trim.execute(
            "SELECT 1 FROM messages WHERE tenant = $1 AND session_id = $2 AND pos = $3 FOR UPDATE",
            T,
            S,
            BOUNDARY - 1,
        )
        stored = asyncio.create_task(insert(a, 20, owner=A))
        await waits(watcher, stored, 1)
        taken = asyncio.create_task(take(b))
        await waits(watcher, taken, 2)
    assert await stored == 1 and await taken == [1]


async def test_a_step_evicting_the_last_folded_row_while_the_insert_waits_on_the_session(
    conns: Any, pool: asyncpg.Pool
) -> None:
    """A step's marks (``persist_step``) evict the last folded message and add to the
    session's reclaimed tokens, one statement, while the compaction's insert runs: both
    wait on the session row another transaction holds. The insert goes first and waits
    for the message row the step's UPDATE holds if the step took it before the session
    row: a deadlock. The step locks the session row first, as the insert does, so both
    land (with ``persist_step``'s ``reclaimed`` CTE written before ``evicted``, this fails
    with DeadlockDetectedError)."""
    a, b, watcher = conns
    assert await leases.claim_compaction(a, owner=A, ttl=60.0, **CLAIM)
    placeholder = {"role": "assistant", "content": "[evicted]"}
    async with pool.acquire() as gate, gate.transaction():
        await gate.execute("SELECT 1 FROM sessions WHERE tenant = $1 AND id = $2 FOR UPDATE", T, S)
        stored = asyncio.create_task(insert(a, 20, owner=A))
        await waits(watcher, stored, 1)
        marked = asyncio.create_task(
            writes.persist_step(b, evicted=[(BOUNDARY - 1, placeholder, 3)], reclaimed=5, **CLAIM)
        )
        await waits(watcher, marked, 2)
    assert await stored == 1
    await marked
