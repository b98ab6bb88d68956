"""Every connection Cascade opens carries its ``application_name`` unless the database URL
names it, so ``serve``'s stop before a breaking migration can tell a replica from a ``psql``
in ``pg_stat_activity`` (README: Upgrading)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from proxy import bus
from proxy.bus import EventBus
from proxy.store import db
from proxy.store.db import APPLICATION_NAME, DatabaseUnavailable


class _Asked(Exception):
    """What the stand-in for asyncpg.connect raises once it has heard the arguments."""


def _hearing(seen: list[dict[str, Any]]) -> Any:
    async def connect(dsn: str | None = None, *args: Any, **kwargs: Any) -> None:
        seen.append(kwargs.get("server_settings") or {})
        raise ValueError("heard")  # read as a URL asyncpg cannot read: no retry

    return connect


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("postgresql://u@h/db", True),
        ("postgresql://u@h/db?sslmode=disable", True),
        ("postgresql://u@h/db?application_name=blue", False),
        ("postgresql://u@h/db?options=-c%20application_name%3Dblue", False),
        ("postgresql://u@h/db?options=-c+application_name=blue", False),
    ],
)
async def test_a_connection_is_named_unless_its_url_names_it(
    url: str, named: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(db.asyncpg, "connect", _hearing(seen))
    with pytest.raises(DatabaseUnavailable):
        await db.connect(url)
    assert seen == [{"application_name": APPLICATION_NAME} if named else {}]


async def test_a_url_no_one_can_read_is_still_refused_in_one_line() -> None:
    """Reading the URL for its name raises nothing of its own: the refusal names the URL."""
    with pytest.raises(DatabaseUnavailable, match=r"^cannot connect to PostgreSQL at "):
        await db.connect("postgresql://u@[::1/db")


async def test_the_listener_is_named_as_the_pool_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """The LISTEN connection (DATABASE_LISTEN_URL, or the pool's URL) is a replica's too."""
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(bus.asyncpg, "connect", _hearing(seen))
    listener = EventBus(cast(Any, None), "postgresql://u@h/db", "DATABASE_LISTEN_URL")
    with pytest.raises(DatabaseUnavailable):
        await listener.start(timeout=5)
    assert seen == [{"application_name": APPLICATION_NAME}]
