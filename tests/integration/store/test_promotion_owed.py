"""The memory promotion a stored summary owes (migration 0032, ``summaries.insert_summary``,
``take_owed``, ``settle_owed``, ``due_now``): set in the insert's transaction, taken over
by one request once past its due time, settled for the part each promotion's span covers,
cut where the history diverges, forgotten by a reset, not copied to a branch."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import pytest

from proxy.store import leases, sessions, summaries
from tests.integration.store.helpers import create_session

T, S = "t-a", "s1"
KEY = {"tenant": T, "session_id": S}


@pytest.fixture
async def conn(pool: asyncpg.Pool) -> Any:
    async with pool.acquire() as c:  # no messages: a summary without a boundary hash
        await create_session(c, tenant=T, session_id=S, agent="default", model="m")
        yield c


async def fold(conn: Any, boundary: int, owe_from: int | None) -> int | None:
    owner = uuid.uuid4()
    assert await leases.claim_compaction(conn, **KEY, owner=owner, ttl=30)
    try:
        return await summaries.insert_summary(
            conn,
            **KEY,
            boundary=boundary,
            boundary_hash=None,
            content=f"brief {boundary}",
            tokens=3,
            model="fast-model",
            owner=owner,
            owe_from=owe_from,
        )
    finally:
        await leases.release_compaction(conn, **KEY, owner=owner)


async def owed(conn: Any) -> tuple[Any, ...]:
    row = await conn.fetchrow(
        "SELECT promotion_from, promotion_to, promotion_due > now() AS later FROM sessions"
        " WHERE tenant = $1 AND id = $2",
        T,
        S,
    )
    return tuple(row)


async def test_a_summary_owes_its_span_until_its_promotion_settles_it(conn: Any) -> None:
    assert await fold(conn, 6, owe_from=None) == 1
    assert await owed(conn) == (None, None, None)  # promotion off: nothing owed
    assert await fold(conn, 10, owe_from=6) == 2
    assert await owed(conn) == (6, 10, True)
    assert await summaries.take_owed(conn, **KEY) is None  # its own promotion may still run
    await summaries.settle_owed(conn, **KEY, span=(6, 10))
    assert await owed(conn) == (None, None, None)


async def test_a_later_summary_widens_what_is_owed_and_its_promotion_settles_only_its_own(
    conn: Any,
) -> None:
    await fold(conn, 6, owe_from=2)
    await fold(conn, 12, owe_from=6)  # the first one's promotion was cut
    assert await owed(conn) == (2, 12, True)
    await summaries.settle_owed(conn, **KEY, span=(6, 12))  # the second's own: the first's is
    assert await owed(conn) == (2, 6, True)  # owed still
    await summaries.due_now(conn, {(T, S), ("t-b", "other")})  # a stop cut it
    assert await summaries.take_owed(conn, **KEY) == (2, 6)
    assert await owed(conn) == (2, 6, True)  # taken: another request does not take it
    assert await summaries.take_owed(conn, **KEY) is None
    await summaries.settle_owed(conn, **KEY, span=(2, 6))
    assert await owed(conn) == (None, None, None)


async def test_a_reset_forgets_what_its_history_owed(conn: Any) -> None:
    await fold(conn, 10, owe_from=2)
    assert await sessions.reset_session(conn, **KEY)
    assert await owed(conn) == (None, None, None)


async def test_a_widened_span_is_settled_by_the_two_promotions_that_owe_it(conn: Any) -> None:
    await fold(conn, 6, owe_from=2)
    await fold(conn, 12, owe_from=6)  # while the first one's promotion still runs
    await summaries.settle_owed(conn, **KEY, span=(2, 6))  # the first one ends
    assert await owed(conn) == (6, 12, True)  # the second one's span is still owed
    await summaries.settle_owed(conn, **KEY, span=(6, 12))
    assert await owed(conn) == (None, None, None)  # nothing left for a takeover to run again
    await fold(conn, 16, owe_from=12)
    await fold(conn, 20, owe_from=16)
    await summaries.settle_owed(conn, **KEY, span=(16, 20))  # the later one ends first
    assert await owed(conn) == (12, 16, True)
    await summaries.settle_owed(conn, **KEY, span=(12, 16))
    assert await owed(conn) == (None, None, None)


async def test_a_diverged_history_owes_no_promotion_past_where_it_diverged(conn: Any) -> None:
    await fold(conn, 10, owe_from=2)
    await summaries.invalidate_after(conn, **KEY, pos=10)  # positions 10.. hold other text now
    assert await owed(conn) == (2, 10, True)  # the summary stands, and what it owes
    await summaries.invalidate_after(conn, **KEY, pos=6)
    assert await owed(conn) == (None, None, None)
    await summaries.settle_owed(conn, **KEY, span=(2, 10))  # its own promotion, of the old text
    assert await owed(conn) == (None, None, None)
    await summaries.invalidate_after(conn, **KEY, pos=0)  # nothing owed: nothing to cut
    assert await owed(conn) == (None, None, None)


async def test_a_diverged_history_owes_nothing_a_later_compaction_folds_again(
    conn: Any,
) -> None:
    """The span of a summary the divergence invalidates is folded again from the last
    summary left, and promoted then, its text before the divergence too: owed, a takeover
    asked the fast model for it twice. What the summaries left folded stays owed."""
    await fold(conn, 6, owe_from=2)
    await fold(conn, 12, owe_from=6)  # the first one's promotion was cut
    await summaries.invalidate_after(conn, **KEY, pos=8)
    assert await owed(conn) == (2, 6, True)
    await summaries.settle_owed(conn, **KEY, span=(6, 12))  # the second's, of the old text
    assert await owed(conn) == (2, 6, True)
    await summaries.settle_owed(conn, **KEY, span=(2, 6))
    assert await owed(conn) == (None, None, None)


async def test_a_branch_owes_nothing_its_source_owes(conn: Any) -> None:
    """The source's next request takes it over; its facts go to the scope both share, so a
    branch owing it too would ask the fast model for the span twice."""
    await fold(conn, 10, owe_from=2)
    assert await sessions.copy_session(conn, tenant=T, source=S, target="s2")
    assert await owed(conn) == (2, 10, True)
    row = await conn.fetchrow(
        "SELECT promotion_from, promotion_due FROM sessions WHERE tenant = $1 AND id = 's2'", T
    )
    assert tuple(row) == (None, None)


async def test_summaries_at_a_high_rate_do_not_push_a_takeover_back(conn: Any) -> None:
    await fold(conn, 6, owe_from=2)  # its promotion is cut by a kill: nothing settles it
    await conn.execute(  # its due time, passed as OWED_SECONDS would pass
        "UPDATE sessions SET promotion_due = now() - interval '1 second'"
        " WHERE tenant = $1 AND id = $2",
        T,
        S,
    )
    for boundary in range(10, 50, 4):  # a summary every few seconds, each promotion its own
        await fold(conn, boundary, owe_from=boundary - 4)
        await summaries.settle_owed(conn, **KEY, span=(boundary - 4, boundary))
    # due since the first owe, whatever landed since (one span: from the older start to
    # where the latest settled part begins)
    assert await owed(conn) == (2, 42, False)
    assert await summaries.take_owed(conn, **KEY) == (2, 42)
    await fold(conn, 54, owe_from=50)  # while the takeover runs: not due before it could end
    assert await owed(conn) == (2, 54, True)
    assert await summaries.take_owed(conn, **KEY) is None
