"""Liveness, readiness (DESIGN §3) and the ``migrate`` command (DESIGN §2)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import asyncpg
import httpx
import pytest

from proxy.settings import Settings
from proxy.store import readiness
from proxy.store.db import GuardedConnection
from proxy.store.migrations import MIGRATIONS_DIR
from proxy.store.readiness import REUSE_SECONDS
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, StartProxy, wait_for
from tests.integration.conftest import pooler_everywhere, run_sync

REPO = Path(__file__).resolve().parents[3]


async def _execute(dsn: str, *statements: str) -> list[object]:
    conn = await asyncpg.connect(dsn)
    try:
        return [await conn.fetchval(sql) for sql in statements]
    finally:
        await conn.close()


def sql(dsn: str, *statements: str) -> list[object]:
    return run_sync(_execute(dsn, *statements))


def _closing_the_database(pg_dsn: str, db_dsn: str) -> tuple[str, str, str]:
    """The database's name, and the statements that stop it taking connections and end
    every one it has (the test's own aside), and that let it take them again."""
    (name,) = sql(db_dsn, "SELECT current_database()")
    quoted = '"' + str(name).replace('"', '""') + '"'
    terminate = (
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
        f" WHERE datname = '{name}' AND pid <> pg_backend_pid()"
    )
    return str(name), terminate, quoted


def test_healthz_and_readyz_follow_the_process_and_database(
    http: httpx.Client, pg_dsn: str, db_dsn: str
) -> None:
    health = http.get("/healthz")
    assert health.status_code == 200
    assert health.json() == {"status": "ok"}
    ready = http.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ok", "database": "ok", "events": "ok"}

    name, terminate, quoted = _closing_the_database(pg_dsn, db_dsn)
    sql(pg_dsn, f"ALTER DATABASE {quoted} ALLOW_CONNECTIONS false", terminate)
    try:
        # within the second an answer is reused for (the next test: at once, directly)
        deadline = time.monotonic() + REUSE_SECONDS + 2
        while (down := http.get("/readyz")).status_code == 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert down.status_code == 503, down.text
        assert down.json()["status"] == "unavailable"
        # answered without a key: a status and the failure's class, not its text
        assert set(down.json()) == {"status", "database", "events"} and str(name) not in down.text
        assert "127.0.0.1" not in down.text and "localhost" not in down.text
        # liveness does not depend on the database: restarting the proxy would not help
        assert http.get("/healthz").status_code == 200
        for listed in (
            http.get("/v1/sessions"),
            http.post(
                "/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            ),
        ):
            assert listed.status_code == 503, listed.text
            assert listed.json()["error"]["code"] == "database_unavailable"
            assert listed.headers["retry-after"] == "5"
            assert str(name) not in listed.text  # the server's details stay in the log
    finally:
        sql(pg_dsn, f"ALTER DATABASE {quoted} ALLOW_CONNECTIONS true")
    deadline = time.monotonic() + 5
    while (again := http.get("/readyz")).status_code != 200:
        assert time.monotonic() < deadline, again.text
        time.sleep(0.05)
    assert again.json()["database"] == "ok"


@pytest.mark.skipif(pooler_everywhere(), reason="PgBouncer keeps the proxy's connections open")
def test_readyz_drops_its_reused_answer_once_the_database_closes_a_connection(
    start_proxy: StartProxy,
    config_path: Path,
    pg_dsn: str,
    db_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An answer that would stand for a minute: only a closed connection ends it early.
    monkeypatch.setattr(readiness, "REUSE_SECONDS", 60.0)
    proxy = start_proxy(config_path)
    _, terminate, quoted = _closing_the_database(pg_dsn, db_dsn)
    with httpx.Client(base_url=proxy.origin, timeout=10) as http:
        assert http.get("/readyz").status_code == 200
        pooled = proxy.pooled_pids()
        sql(pg_dsn, f"ALTER DATABASE {quoted} ALLOW_CONNECTIONS false", terminate)
        try:
            # pg_terminate_backend returns before the backends exit: the proxy learns of it
            # when it reads their connections close
            assert wait_for(lambda: not proxy.pooled_pids() & pooled)
            down = http.get("/readyz")
        finally:
            sql(pg_dsn, f"ALTER DATABASE {quoted} ALLOW_CONNECTIONS true")
    assert down.status_code == 503, down.text
    assert down.json()["status"] == "unavailable"


def test_concurrent_readyz_calls_share_one_database_round_trip(
    proxy: ProxyServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Anonymous callers at any rate cost at most one SELECT 1 a second, not one each.
    checks: list[str] = []
    fetchval = GuardedConnection.fetchval

    async def counted(self: GuardedConnection, query: str, *args: object, **kw: object) -> object:
        if query == "SELECT 1":
            checks.append(query)
        return await fetchval(self, query, *args, **kw)

    monkeypatch.setattr(GuardedConnection, "fetchval", counted)

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=proxy.origin, timeout=10) as http:
            return await asyncio.gather(*(http.get("/readyz") for _ in range(50)))

    answers = asyncio.run(burst())
    assert [r.status_code for r in answers] == [200] * 50
    assert {r.json()["database"] for r in answers} == {"ok"}
    assert 1 <= len(checks) <= 2, len(checks)  # 2: the burst straddled a window's end


def migrate(dsn: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    return subprocess.run(
        [sys.executable, "-m", "proxy", "migrate", "--database-url", dsn],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_migrate_command_applies_every_migration(empty_db_dsn: str) -> None:
    files = sorted(p.name for p in MIGRATIONS_DIR.glob("[0-9][0-9][0-9][0-9]_*.sql"))
    assert files
    result = migrate(empty_db_dsn)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"applied {len(files)} migration(s): {', '.join(files)}"
    applied, sessions = sql(
        empty_db_dsn,
        "SELECT array_agg(name ORDER BY version) FROM schema_migrations",
        "SELECT to_regclass('public.sessions') IS NOT NULL",
    )
    assert applied == files
    assert sessions is True


def test_migrate_command_reports_none_pending(db_dsn: str) -> None:
    result = migrate(db_dsn)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "applied 0 migration(s): none pending"


def test_readyz_is_503_while_no_pooled_connection_is_free(
    db_dsn: str, config_path: Path, fake_upstream: FakeUpstream
) -> None:
    # One connection, held by a request whose first statement waits for the session row
    # the test locks (a request waiting on a slow provider holds none: issue 24).
    settings = Settings(
        database_url=db_dsn, config=config_path, pool_max_size=1, watch_config=False
    )
    body = {"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"authorization": "Bearer sk-test-client", "x-session-id": "held"}
    server = ProxyServer(settings).start()

    async def run(http: httpx.Client) -> tuple[httpx.Response, float]:
        admin = await asyncpg.connect(db_dsn)
        try:
            deadline = time.monotonic() + 5
            free = "SELECT lease_owner IS NULL FROM sessions WHERE id = 'held'"
            while not await admin.fetchval(free):  # the first reply is stored after it is sent
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
            async with admin.transaction():
                await admin.execute("SELECT 1 FROM sessions WHERE id = 'held' FOR UPDATE")
                busy = threading.Thread(
                    target=http.post, args=("/v1/chat/completions",), kwargs={"json": body}
                )
                busy.start()
                waiting = (
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock'"
                )
                while not await admin.fetchval(waiting):
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.02)
                started = time.monotonic()
                ready = await asyncio.to_thread(http.get, "/readyz")
                waited = time.monotonic() - started
            busy.join(15)
            return ready, waited
        finally:
            await admin.close()

    try:
        with httpx.Client(base_url=server.origin, timeout=15, headers=headers) as http:
            assert http.post("/v1/chat/completions", json=body).status_code == 200
            ready, waited = asyncio.run(run(http))
            after = http.get("/readyz")
    finally:
        server.stop()
    assert ready.status_code == 503 and ready.json()["status"] == "unavailable"
    assert waited < 4.5  # answered while the request still held the connection
    assert after.status_code == 200
