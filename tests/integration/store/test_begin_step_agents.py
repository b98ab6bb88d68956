"""``cascade_begin_step_v7`` (migration 0028): a step of a proxy key limited to some agents
(``agents``) on a stored session of another agent is refused by the statement that takes
the lease, writing nothing: no rows, no agent or model, no lease, and the owner's place in
the lease queue given up. The request's first check reads the session's agent as it
arrives; this one decides on the row as the statement locks it, so a session moved to
another agent while the request waited is not taken over, from any replica."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest

from proxy.history import chain
from proxy.services.lease_wakeups import session_hash
from proxy.store import steps
from proxy.store.leases import SessionBusy
from tests.integration.store.helpers import HISTORY, create_session, insert_messages, rows_for

T, S = "t-a", "s1"
MINE, OTHER, THIRD = (uuid.UUID(int=n) for n in (1, 2, 3))
HASHES = chain(HISTORY)
ROW = """SELECT agent, model, head_len, head_hash, lease_owner, lease_queue, xmin::text AS xmin,
    (SELECT count(*) FROM messages m WHERE m.tenant = s.tenant AND m.session_id = s.id) AS n
FROM sessions s WHERE tenant = $1 AND id = $2"""


@pytest.fixture
async def conn(pool: asyncpg.Pool) -> Any:
    async with pool.acquire() as c:
        await create_session(c, tenant=T, session_id=S, agent="coder", model="m")
        await insert_messages(c, tenant=T, session_id=S, rows=rows_for(HISTORY[:3]))
        await c.execute(
            "UPDATE sessions SET head_len = 3, head_hash = $3 WHERE tenant = $1 AND id = $2",
            T,
            S,
            HASHES[2],
        )
        yield c


async def extend(conn: Any, owner: uuid.UUID, agents: list[str] | None, **over: Any) -> Any:
    """The common request: the guessed head is the stored one, one new message after it."""
    return await steps.begin_step(
        conn,
        **{
            "tenant": T,
            "session_id": S,
            "agent": "reviewer",
            "model": "r",
            "guess": (3, HASHES[2]),
            "rows": rows_for(HISTORY[:4], start=3),
            "head_len": 4,
            "head_hash": HASHES[3],
            "owner": owner,
            "agents": agents,
            **over,
        },
    )


async def row(conn: Any) -> dict[str, Any]:
    return dict(await conn.fetchrow(ROW, T, S))


@pytest.mark.parametrize("guess", [(3, HASHES[2]), None], ids=["hit", "no-guess"])
@pytest.mark.parametrize("held", [False, True], ids=["free", "held"])
async def test_another_agents_session_is_refused_writing_nothing(
    conn: Any, guess: Any, held: bool
) -> None:
    """Both one-statement paths (a guessed head, a lease alone) and the locked path (a lease
    another replica holds) refuse; without a queue place to give up, the row keeps its
    version."""
    if held:
        await extend(conn, OTHER, None, agent="coder", model="m", guess=None, rows=())
    before = await row(conn)
    with pytest.raises(steps.AgentRefused) as refused:
        await extend(conn, MINE, ["reviewer"], guess=guess)
    assert refused.value.agent == "coder"
    assert await row(conn) == before
    assert before["agent"] == "coder" and before["n"] == 3
    assert before["lease_owner"] == (OTHER if held else None)


async def test_a_refused_waiter_gives_up_its_place_in_the_queue(
    conn: Any, pool: asyncpg.Pool
) -> None:
    """A limited request that queued while the session was its agent's, then finds it moved
    to another: refused, and the waiters behind it are not held back by its place: the next
    one is told the lease is free (migration 0023's channel) and takes it."""
    await extend(conn, OTHER, None, agent="reviewer", guess=None, rows=())
    with pytest.raises(SessionBusy):
        await extend(conn, MINE, ["reviewer"], guess=None, rows=())  # MINE queues first
    with pytest.raises(SessionBusy):
        await extend(conn, THIRD, None, guess=None, rows=())
    assert (await row(conn))["lease_queue"] == [MINE, THIRD]
    # OTHER's request moves the session to the coder (its step ends: lease free).
    await conn.execute(
        "UPDATE sessions SET agent = 'coder', lease_owner = NULL, lease_expires = NULL"
        " WHERE tenant = $1 AND id = $2",
        T,
        S,
    )
    told: asyncio.Queue[str] = asyncio.Queue()

    def heard(*notification: Any) -> None:
        told.put_nowait(notification[3])

    async with pool.acquire() as listener:
        await listener.add_listener("cascade_lease", heard)
        try:
            with pytest.raises(steps.AgentRefused):
                await extend(conn, MINE, ["reviewer"])
            assert await asyncio.wait_for(told.get(), 5) == session_hash(T, S)
        finally:
            await listener.remove_listener("cascade_lease", heard)
    after = await row(conn)
    assert (after["agent"], after["lease_owner"], after["lease_queue"], after["n"]) == (
        "coder",
        None,
        [THIRD],
        3,
    )
    begun = await extend(conn, THIRD, None)  # next in the queue: it takes the lease at once
    assert begun.window is not None and (await row(conn))["lease_queue"] is None


async def test_a_key_allowed_the_sessions_agent_stores_its_step(conn: Any) -> None:
    """The common case as before: the guessed head's update takes the lease, moves the head
    and stores the rows."""
    begun = await extend(conn, MINE, ["coder", "reviewer"], agent="coder", model="m")
    assert begun.window is not None and begun.session["head_len"] == 3
    after = await row(conn)
    assert (after["agent"], after["head_len"], after["lease_owner"], after["n"]) == (
        "coder",
        4,
        MINE,
        4,
    )


async def test_a_limited_key_makes_a_new_session_for_its_agent(conn: Any) -> None:
    begun = await extend(conn, MINE, ["reviewer"], session_id="new", guess=None)
    assert begun.session["agent"] == "reviewer"
    assert await conn.fetchval("SELECT agent FROM sessions WHERE id = 'new'") == "reviewer"


async def test_the_previous_version_stays_for_a_rolling_deploy(conn: Any) -> None:
    """A replica still on the previous code calls v6, without the key's agents."""
    records = await conn.fetch(
        "SELECT * FROM cascade_begin_step_v6($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11,"
        " $12, $13, $14, $15)",
        T,
        S,
        "reviewer",
        "r",
        MINE,
        None,
        None,
        3,
        HASHES[2],
        0,
        15.0,
        "[]",
        [],
        None,
        None,
    )
    assert records[0]["session"]["busy"] is False
    assert (await row(conn))["agent"] == "reviewer"
