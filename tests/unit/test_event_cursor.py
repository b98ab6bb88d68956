"""A stream's cursor remembers the ids it sent above its mark only: a replay of a long
session's events (every one settled) holds no set of them all while it runs."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from proxy.api import event_cursor


def test_a_long_replay_keeps_no_set_of_its_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    total, seen = 2500, []

    async def fetch(_pool: Any, *, after_id: int, limit: int = 1000, **_: Any) -> Any:
        ids = range(after_id + 1, min(after_id + 1 + limit, total + 1))
        rows = [{"id": i, "name": "context.usage", "data": "{}", "settled": True} for i in ids]
        return None, rows

    monkeypatch.setattr("proxy.store.events.fetch_session_events_after", fetch)
    cursor = event_cursor.Cursor(0, datetime.now(UTC), lambda agent: True)

    async def replay() -> None:
        async for frame in cursor.catch_up(None, "t", "s"):
            seen.append((int(frame["id"]), len(cursor.sent)))

    asyncio.run(replay())
    assert [i for i, _ in seen] == list(range(1, total + 1))
    assert max(n for _, n in seen) <= 1
    assert cursor.mark == total and not cursor.take(total)
