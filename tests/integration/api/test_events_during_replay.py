"""What a stream gets of the events published while its replay runs (docs/events.md, Order):
a transient one (``session.reset``, which no replay brings) comes just after ``: live``, once,
and so does every persisted one the replay's read did not see, in the order they were
published; a later catch-up of the table sends none of them again. Here the replay is held
after its read until a chat and a reset are done, through a real proxy and an SSE client."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from proxy.api import events as events_api
from tests.integration.api.conftest import replied
from tests.integration.api.test_events import chat, user

AUTH = {"authorization": "Bearer sk-test-client"}
LIVE = ": live"


def _names(lines: Iterator[str], until: str, count: int = 1) -> list[str]:
    """The stream's event names and comments (pings left out) up to the ``count``-th
    ``until``; each read is bounded by the client's timeout."""
    out: list[str] = []
    for line in lines:
        if line.startswith("event: ") or line == LIVE:
            out.append(line.removeprefix("event: "))
            if out.count(until) == count:
                return out
    raise AssertionError(f"the stream ended: {out}")


@pytest.mark.parametrize("where", ["same", "other"], ids=["same-replica", "other-replica"])
def test_events_published_during_the_replay_come_once_after_live(
    where: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``other``: the chat and the reset go to a second replica of the deployment, whose
    notifications reach the stream's through the database."""
    if where == "same":
        stream_at = writes_at = request.getfixturevalue("proxy").origin
    else:
        stream_at, writes_at = request.getfixturevalue("replicas")
    answer = chat(writes_at, "held", [user("u1")])
    with httpx.Client(base_url=writes_at, headers=AUTH, timeout=5) as http:
        replied(http, "held")  # the replay holds u1's whole turn, stored after its answer
    replaying, resume = threading.Event(), threading.Event()
    read = events_api.store.fetch_session_events_after

    async def held_read(conn: Any, **kwargs: Any) -> Any:
        rows = await read(conn, **kwargs)
        if not replaying.is_set():  # the replay: held once its rows are read
            replaying.set()
            await asyncio.to_thread(resume.wait, 5)
        return rows

    monkeypatch.setattr(events_api.store, "fetch_session_events_after", held_read)
    monkeypatch.setattr(events_api, "CATCH_UP_SECONDS", 0.05)  # many catch-ups, at once
    headers = AUTH | {"accept": "text/event-stream"}
    with (
        httpx.Client(base_url=stream_at, headers=AUTH, timeout=5) as http,
        http.stream("GET", "/v1/sessions/held/events", headers=headers) as resp,
    ):
        assert resp.status_code == 200
        assert replaying.wait(5), "the stream never read its replay"
        chat(writes_at, "held", [user("u1"), answer, user("u2")])
        assert httpx.post(f"{writes_at}/v1/sessions/held/reset", headers=AUTH).status_code == 200
        resume.set()
        lines = resp.iter_lines()
        appended, usage = "session.message.appended", "context.usage"
        assert _names(lines, "session.reset") == [
            *(appended, appended, usage),  # the replay: u1's turn
            LIVE,
            *(appended, appended, usage),  # u2's turn, published during the replay
            "session.reset",  # published during the replay too, after it
        ]
        chat(writes_at, "held", [user("u3")])  # after the catch-ups: none sends one again
        assert _names(lines, usage) == [appended, appended, usage]
