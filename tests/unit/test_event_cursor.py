"""A stream's cursor remembers the ids it sent above its mark only: a replay of a long
session's events (every one settled) holds no set of them all while it runs."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from proxy.api import event_cursor, events


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


def test_a_resumed_stream_sends_an_id_below_the_clients_that_its_replay_did_not_find(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # resumed after 5 (the client's Last-Event-ID), from 2, the last event settled up to it:
    # 3 and 5 are the client's, 4 commits after the replay (two writers), 6 is new
    table = [3, 5, 6]

    async def fetch(_pool: Any, *, after_id: int, **_: Any) -> Any:
        ids = sorted(i for i in table if i > after_id)
        return None, [{"id": i, "name": "n", "data": "{}", "settled": False} for i in ids]

    monkeypatch.setattr("proxy.store.events.fetch_session_events_after", fetch)
    cursor = event_cursor.Cursor(5, datetime.now(UTC), lambda agent: True, floor=2)

    async def read() -> list[int]:
        return [int(f["id"]) async for f in cursor.catch_up(None, "t", "s")]

    assert asyncio.run(read()) == [6]
    table.append(4)
    assert asyncio.run(read()) == [4]
    assert asyncio.run(read()) == []


def test_a_resume_token_lists_the_ids_sent_above_the_mark_when_one_below_is_not() -> None:
    cursor = event_cursor.Cursor(10, datetime.now(UTC), lambda agent: True)
    assert cursor.token() is None  # nothing sent above the mark
    cursor.take(11)
    cursor.take(12)
    assert cursor.token() == "12"  # no gap: the highest id says it all
    cursor.take(15)
    assert cursor.token() == "10.1.2.5"  # 13 and 14 may yet commit
    for i in range(16, 16 + event_cursor.TOKEN_IDS):
        cursor.take(i)
    listed = [1, 2, *range(5, 5 + event_cursor.TOKEN_IDS - 2)]  # the lowest 64 above 10
    assert cursor.token() == ".".join(map(str, [10, *listed]))  # the reconnect sends the rest
    resumed = event_cursor.Cursor(10, datetime.now(UTC), lambda agent: True, got=frozenset({15}))
    assert resumed.seen(15) and not resumed.seen(13)


def test_a_late_id_sent_after_a_higher_one_leaves_the_client_past_the_higher() -> None:
    # 12 is sent, then 11 (two writers): the client's last frame must not name 11, whose
    # reconnect would send 12 again, nor leave the token that lists 12 but not 11
    cursor = event_cursor.Cursor(10, datetime.now(UTC), lambda agent: True)

    async def frames() -> Any:
        for i in (12, 11):
            cursor.take(i)
            yield {"event": "test", "data": "{}", "id": str(i)}

    async def stream() -> list[dict[str, Any]]:
        return [f async for f in events._resumable(frames(), cursor)]

    sent = asyncio.run(stream())
    assert [f["id"] for f in sent] == ["12", "10.2", "11", "12"]


def test_two_ids_committed_late_both_come_on_the_reconnect_with_the_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the stream sent 13 and 15 above its mark, 10; 11 and 14 commit after its last frame
    table = [13, 15]

    async def fetch(_pool: Any, *, after_id: int, **_: Any) -> Any:
        ids = sorted(i for i in table if i > after_id)
        return None, [{"id": i, "name": "n", "data": "{}", "settled": False} for i in ids]

    monkeypatch.setattr("proxy.store.events.fetch_session_events_after", fetch)
    first = event_cursor.Cursor(10, datetime.now(UTC), lambda agent: True)
    first.take(13)
    first.take(15)
    token = first.token()
    assert token == "10.3.5"
    table += [11, 14]
    mark, *above = (int(part) for part in token.split("."))
    resumed = event_cursor.Cursor(
        mark, datetime.now(UTC), lambda agent: True, got=frozenset(mark + i for i in above)
    )

    async def read() -> list[int]:
        return [int(f["id"]) async for f in resumed.catch_up(None, "t", "s")]

    assert asyncio.run(read()) == [11, 14]
    assert resumed.token() == "10.1.3.4.5"  # 12 is not the client's: it may yet commit
