"""A start that fails half way closes what it had opened: the pool, the bus's listener, the
lease task, the provider client, the embedded server."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import asyncpg
import httpx
import pytest

from proxy import app as app_module, bus as bus_module
from proxy.app import create_app
from proxy.services.compaction import DurableSummarizer
from proxy.settings import Settings
from proxy.store.db import DatabaseUnavailable
from proxy.store.migrations import MigrationError
from tests.integration.conftest import dsn_with_db

OUR_TASKS = ("cascade-bus", "lease-renewal", "cascade-embedding-worker")


async def _others_connected(dsn: str, settle: float = 5.0) -> int:
    """Connections to ``dsn``'s database besides this one, once closing ones have gone
    (a closed backend leaves pg_stat_activity a moment after its client hangs up)."""
    conn = await asyncpg.connect(dsn)
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + settle
        while True:
            count: int = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            if count == 0 or loop.time() > deadline:
                return count
            await asyncio.sleep(0.1)
    finally:
        await conn.close()


def _record_clients(monkeypatch: pytest.MonkeyPatch) -> list[httpx.AsyncClient]:
    clients: list[httpx.AsyncClient] = []
    build: Callable[..., httpx.AsyncClient] = app_module.build_client

    def recording(**kwargs: Any) -> httpx.AsyncClient:
        clients.append(build(**kwargs))
        return clients[-1]

    monkeypatch.setattr(app_module, "build_client", recording)
    return clients


async def _start(settings: Settings, expected: type[BaseException]) -> None:
    app = create_app(settings)
    with pytest.raises(expected):
        async with app.router.lifespan_context(app):
            pytest.fail("the start was to fail")
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith(OUR_TASKS)]


async def test_a_start_failing_at_the_bus_closes_the_pool_and_the_client(
    db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bus_module, "START_TIMEOUT", 2.0)  # whatever the reason, soon
    clients = _record_clients(monkeypatch)
    settings = Settings(
        database_url=db_dsn,
        database_listen_url=dsn_with_db(db_dsn, "no_such_db"),
        watch_config=False,
        pool_max_size=4,
    )
    await _start(settings, DatabaseUnavailable)
    assert await _others_connected(db_dsn) == 0  # the pool's 4 were left open
    [client] = clients
    assert client.is_closed


async def test_a_start_failing_after_the_bus_and_leases_closes_them_all(
    db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def fail(self: DurableSummarizer) -> None:
        raise DatabaseUnavailable("lost under the start")

    monkeypatch.setattr(DurableSummarizer, "close_interrupted", fail)
    clients = _record_clients(monkeypatch)
    settings = Settings(database_url=db_dsn, watch_config=False, pool_max_size=4)
    await _start(settings, DatabaseUnavailable)  # no lease task, no bus task left
    assert await _others_connected(db_dsn) == 0  # neither the pool's nor the listener's
    [client] = clients
    assert client.is_closed


async def test_a_failed_migration_stops_the_embedded_server(
    db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stopped: list[bool] = []

    class Embedded:
        def cleanup(self) -> None:
            stopped.append(True)

    async def tuned(dsn: str) -> list[str]:
        return []

    async def refused(dsn: str, **kwargs: Any) -> list[str]:
        raise MigrationError("migration 0003 was changed after it was applied")

    monkeypatch.setattr(app_module, "start_embedded", lambda data_dir: (db_dsn, Embedded()))
    monkeypatch.setattr(app_module, "tune_embedded", tuned)
    monkeypatch.setattr(app_module, "run_migrations", refused)
    await _start(Settings(database_url=None, watch_config=False), MigrationError)
    assert stopped == [True]
