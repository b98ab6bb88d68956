"""A session's lease taken, waited for and freed by several owners, one tenant's, against a
real PostgreSQL: the turns the lease queue (migration 0022) and its notification (0023) are
tested through. Each try is one committed statement, as a replica's would be."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import asyncpg

from proxy.store import leases, steps
from proxy.store.leases import SessionBusy


@dataclass(frozen=True)
class LeaseTurns:
    """The tries of lease owners (replicas' requests, session operations) on ``tenant``'s
    sessions, ``s`` unless named."""

    tenant: str

    async def begin(self, pool: asyncpg.Pool, owner: uuid.UUID, sid: str = "s") -> None:
        """``owner``'s request takes the session's lease (raises if it is held)."""
        await steps.begin_step(
            pool, tenant=self.tenant, session_id=sid, agent="a", model="m", owner=owner
        )

    async def busy(self, pool: asyncpg.Pool, owner: uuid.UUID, sid: str = "s") -> bool:
        """Whether ``owner``'s try is refused (it then holds its place in the queue)."""
        try:
            await self.begin(pool, owner, sid)
        except SessionBusy:
            return True
        return False

    async def release(self, pool: asyncpg.Pool, owner: uuid.UUID, sid: str = "s") -> None:
        """``owner``'s step is stored, which frees the lease."""
        stored = await steps.record_step(
            pool,
            tenant=self.tenant,
            session_id=sid,
            reply=None,
            prompt_tokens=1,
            estimate=1,
            calibration=1.0,
            owner=owner,
        )
        assert stored

    async def op_may_run(self, pool: asyncpg.Pool, owner: uuid.UUID, sid: str = "s") -> bool:
        """One try of a session operation (reset, delete, branch), committed."""
        async with pool.acquire() as conn, conn.transaction():
            return await leases.free_for_update(
                conn, tenant=self.tenant, session_id=sid, owner=owner
            )
