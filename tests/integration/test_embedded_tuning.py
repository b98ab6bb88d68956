"""The proxy tunes the embedded server it starts (``pgembed.tune_embedded``): the settings are
kept in the data directory and applied by a reload, once."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from proxy.app import create_app
from proxy.pgembed import EMBEDDED_SETTINGS, start_embedded, tune_embedded
from proxy.settings import Settings
from proxy.store.db import DatabaseUnavailable


async def _setting(dsn: str, name: str) -> str:
    conn = await asyncpg.connect(dsn)
    try:
        return str(await conn.fetchval("SELECT current_setting($1)", name))
    finally:
        await conn.close()


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A data directory outside pytest's ``pytest-of-<user>``, whose permissions another pytest
    session resets to 0700 when it starts, locking out the server's own user mid-initdb."""
    with tempfile.TemporaryDirectory(prefix="cascade-embedded-") as path:
        yield Path(path)


async def test_the_embedded_server_zero_fills_no_wal_segment(data_dir: Path) -> None:
    tmp_path = data_dir
    app = create_app(Settings(database_url=None, data_dir=tmp_path, watch_config=False))
    async with app.router.lifespan_context(app):
        dsn, _ = start_embedded(tmp_path)  # the running server's handle (the app's own)
        for _ in range(100):  # the reload reaches new backends shortly after it is sent
            if await _setting(dsn, "wal_init_zero") == "off":
                break
            await asyncio.sleep(0.05)
        assert await _setting(dsn, "wal_init_zero") == "off"  # PostgreSQL's default is on
        conf = (tmp_path / "pgdata" / "postgresql.auto.conf").read_text()
        assert "wal_init_zero = 'off'" in conf  # kept for the next start
        assert set(EMBEDDED_SETTINGS) == {"wal_init_zero"}
        assert await tune_embedded(dsn) == []  # a later start changes nothing


async def test_an_unreachable_server_is_reported_as_the_migrations_report_it() -> None:
    # Port 1 on loopback refuses: the same DatabaseUnavailable, with its clear message.
    with pytest.raises(DatabaseUnavailable, match="cannot connect to PostgreSQL"):
        await tune_embedded("postgresql://postgres@127.0.0.1:1/postgres")
