"""An open event stream outlives a database outage: a catch-up read that cannot reach the
database is skipped (the pool says once that it is gone), and the next one, once it is
back, sends what the stream missed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.api import events
from proxy.config import Config
from proxy.stopping import StopClock
from proxy.store.db import DatabaseUnavailable


class _Bus:
    @contextlib.asynccontextmanager
    async def subscribe(self, tenant: str, session_id: str) -> AsyncIterator[asyncio.Queue[Any]]:
        yield asyncio.Queue()


class _Request:
    scope: dict[str, Any] = {}  # pass-through: no key to revoke
    state = SimpleNamespace(
        config=SimpleNamespace(current=Config()), stop=StopClock()
    )  # nor keys to close it

    def __init__(self) -> None:
        self.gone = False

    async def is_disconnected(self) -> bool:
        return self.gone


async def test_a_catch_up_during_an_outage_is_skipped_and_the_next_one_sends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Regression: the read's DatabaseUnavailable ended the response with uvicorn's
    # "Exception in ASGI application" and a traceback at ERROR, and the client's reconnect
    # met the outage's 503, which an EventSource does not retry.
    reads = iter(
        [
            ("default", []),  # the replay as the stream opens
            DatabaseUnavailable("cannot connect to PostgreSQL"),
            ("default", [{"id": 7, "name": "context.usage", "data": {}, "settled": True}]),
        ]
    )

    async def fetch(pool: Any, **kwargs: Any) -> Any:
        read = next(reads)
        if isinstance(read, Exception):
            raise read
        return read

    monkeypatch.setattr(events.store, "fetch_session_events_after", fetch)
    monkeypatch.setattr(events, "CATCH_UP_SECONDS", 0.01)
    request = _Request()
    session = ("t", "s", datetime.now(UTC))
    frames = []
    async for frame in events._stream(request, None, _Bus(), session, 0):  # type: ignore[arg-type]
        frames.append(frame)
        request.gone = frame is not events.LIVE  # the client waits on past the replay's end
    assert frames == [events.LIVE, {"event": "context.usage", "data": "{}", "id": "7"}]
