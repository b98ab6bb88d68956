"""An event stream says when it is live: the comment ``: live`` follows the replay, at once,
so a client knows that an event published from then on reaches it (a transient
``session.reset`` among them, which no replay brings) and that what it reads after the
comment is current. Without it, a stream on a quiet session said nothing for the first
ping's 15 s, and a client could not tell a stream still subscribing from a live one."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx

from tests.integration.api.conftest import ProxyServer, replied
from tests.integration.api.test_events import chat, user
from tests.integration.transcripts import api

HEADERS = {"authorization": "Bearer sk-test-client", "accept": "text/event-stream"}
LIVE = ": live"


def _lines(origin: str, sid: str, last_event_id: str | None = None) -> Iterator[str]:
    """The stream's lines as they come; a silence of 2 s fails the test (ReadTimeout)."""
    headers = HEADERS | ({"last-event-id": last_event_id} if last_event_id else {})
    with (
        httpx.Client(base_url=origin, timeout=httpx.Timeout(2.0)) as c,
        c.stream("GET", f"/v1/sessions/{sid}/events", headers=headers) as resp,
    ):
        assert resp.status_code == 200, resp.read()
        yield from resp.iter_lines()


def _until_live(lines: Iterator[str]) -> list[str]:
    """The lines before the first ``: live``, blank ones left out."""
    before = []
    for line in lines:
        if line == LIVE:
            return before
        if line:
            before.append(line)
    raise AssertionError(f"the stream ended before it said it was live: {before}")


def test_the_live_comment_follows_the_replay(proxy: ProxyServer) -> None:
    answer = chat(proxy.origin, "marked", [user("u1")])
    with api(proxy) as http:  # the reply and its usage are stored just after the answer
        replied(http, "marked")
    lines = _lines(proxy.origin, "marked")
    replay = _until_live(lines)
    assert [line for line in replay if line.startswith("event:")] == [
        "event: session.message.appended",
        "event: session.message.appended",
        "event: context.usage",
    ]
    last = [line for line in replay if line.startswith("id:")][-1].removeprefix("id: ")
    chat(proxy.origin, "marked", [user("u1"), answer, user("u2")])
    live = [line for line in (next(lines) for _ in range(5)) if line]
    assert live[0] == f"id: {int(last) + 1}" and live[1] == "event: session.message.appended"
    lines.close()


def test_a_stream_with_nothing_to_replay_says_it_is_live_at_once(proxy: ProxyServer) -> None:
    chat(proxy.origin, "quiet", [user("u1")])
    t0 = time.monotonic()
    lines = _lines(proxy.origin, "quiet", last_event_id="3")  # every event of the session
    assert _until_live(lines) == []
    assert time.monotonic() - t0 < 1.0
    lines.close()
