"""A session operation waiting at another replica's lease is held, under the row lock, to
the agents a reload limited its key to while it waited.

After each pause the operation asks the key again and, its agents changed, reads the
session's agent; the session may move between that read and the row lock (the holder's
step ends, another key's request takes it to another agent), so the lock's check of the
agent must be made against the key's agents in force, not those of the turn's start."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import pytest

from proxy.errors import PermissionDenied
from proxy.services import session_changes
from proxy.services.session_locks import SessionLocks
from proxy.store import sessions
from proxy.store.steps import AgentRefused
from tests.integration.store.helpers import create_session

T, S = "t-narrowed", "s"
HOLDER = uuid.UUID(int=7)
MOVE = """UPDATE sessions SET agent = 'default', lease_owner = NULL, lease_expires = NULL
WHERE tenant = $1 AND id = $2"""


@pytest.mark.parametrize("at_start", [["default", "coder"], None])
async def test_a_session_moved_between_the_agents_read_and_the_lock_is_refused(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch, at_start: list[str] | None
) -> None:
    async with pool.acquire() as c:
        await create_session(c, tenant=T, session_id=S, agent="coder", model="m")
        await c.execute(
            "UPDATE sessions SET lease_owner = $3, lease_expires = clock_timestamp()"
            " + interval '1 minute' WHERE tenant = $1 AND id = $2",
            T,
            S,
            HOLDER,
        )
    asked: list[int] = []

    def admit() -> list[str] | None:
        asked.append(1)
        return at_start if len(asked) == 1 else ["coder"]  # a reload narrows it meanwhile

    read = sessions.fetchval_agent

    async def read_then_moved(conn: Any, *, tenant: str, session_id: str) -> str | None:
        agent = await read(conn, tenant=tenant, session_id=session_id)
        await conn.execute(MOVE, tenant, session_id)  # the holder's step ends; moved
        return agent

    monkeypatch.setattr(sessions, "fetchval_agent", read_then_moved)
    with pytest.raises((AgentRefused, PermissionDenied)):
        await session_changes.delete_session(
            pool, SessionLocks(), tenant=T, session_id=S, agents=at_start, admit=admit
        )
    assert len(asked) >= 2, "the operation never paused at the held lease"
    assert await pool.fetchval("SELECT agent FROM sessions WHERE id = $1", S) == "default"
