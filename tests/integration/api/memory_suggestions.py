"""Memory suggestions put straight into a test's database, as the proxy's summarizer would
emit them: the memory API's tests answer them without running a compaction first."""

from __future__ import annotations

from typing import Any

from proxy.session_id import tenant_from_bearer
from proxy.store.db import create_pool
from proxy.store.events import insert_event
from tests.integration.conftest import run_sync

CLIENT_TENANT = tenant_from_bearer("Bearer sk-test-client")
"""The tenant of the integration tests' client key (``sk-test-client``)."""


def suggest(
    dsn: str,
    session_id: str,
    sid: str,
    facts: list[Any],
    agent: str = "default",
    tenant: str = CLIENT_TENANT,
    **extra: Any,
) -> None:
    """A pending ``memory.suggestion`` ``sid`` of ``facts`` on ``tenant``'s session
    ``session_id`` (created for ``agent`` if new: an event belongs to a session); ``extra``
    goes into the event's data (``scope``)."""

    async def go() -> None:
        pool = await create_pool(dsn, min_size=1, max_size=1)
        try:
            await pool.execute(
                "INSERT INTO sessions (tenant, id, agent) VALUES ($1, $2, $3)"
                " ON CONFLICT DO NOTHING",
                tenant,
                session_id,
                agent,
            )
            await insert_event(
                pool,
                tenant=tenant,
                session_id=session_id,
                name="memory.suggestion",
                data={"session_id": session_id, "suggestion_id": sid, "facts": facts, **extra},
            )
        finally:
            await pool.close()

    run_sync(go())
