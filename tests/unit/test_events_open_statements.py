"""What opening an event stream costs the database before its replay: one statement finds
the session and, resumed after a Last-Event-ID, where the stream starts. A reconnect is the
statement run most at once (every stream a replica ends for a new listener comes back), and
the session's read and the resume's used to be two."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from starlette.requests import Request

from proxy.api import events
from proxy.errors import NotFound


class _Pool:
    def __init__(self, row: dict[str, Any] | None) -> None:
        self.row, self.statements = row, 0

    async def fetchrow(self, *_: Any) -> dict[str, Any] | None:
        self.statements += 1
        return self.row

    async def fetch(self, *_: Any) -> list[Any]:
        self.statements += 1
        return []

    async def fetchval(self, *_: Any) -> Any:
        self.statements += 1
        return None


def _request(last_event_id: str) -> Request:
    headers = [(b"last-event-id", last_event_id.encode())] if last_event_id else []
    return Request({"type": "http", "headers": headers, "query_string": b""})


@pytest.mark.parametrize("last_event_id", ["", "5"])
async def test_a_stream_opens_on_one_statement(last_event_id: str) -> None:
    pool = _Pool({"created_at": datetime.now(UTC), "last": 7, "settled": 3})
    await events.session_events("s", _request(last_event_id), pool, object(), "t")  # type: ignore[arg-type]
    assert pool.statements == 1


async def test_a_missing_session_is_a_404_after_that_one_statement() -> None:
    pool = _Pool(None)
    with pytest.raises(NotFound):
        await events.session_events("s", _request("5"), pool, object(), "t")  # type: ignore[arg-type]
    assert pool.statements == 1
