"""A Last-Event-ID past every event of the session (one kept from a database since restored
from a backup, whose sequence went back) starts the stream after the session's last event:
it used to move the stream's mark there, and every live event, its id lower, was dropped
as already sent, without a word, until the sequence caught up."""

from __future__ import annotations

from tests.integration.api.conftest import ProxyServer, replied
from tests.integration.api.test_events import chat, is_usage, open_events, user
from tests.integration.transcripts import api


def test_an_id_past_the_sessions_events_still_gets_the_live_ones(proxy: ProxyServer) -> None:
    answer = chat(proxy.origin, "restored", [user("u1")])
    with api(proxy) as http:  # u1's turn, stored after its answer, holds the last event
        replied(http, "restored")
    with open_events(proxy.origin, "restored", last_event_id="4000000") as events:
        chat(proxy.origin, "restored", [user("u1"), answer, user("u2")])
        live = events.until(is_usage)
    assert [int(f.id or 0) for f in live] == [4, 5, 6]  # none of the replayed three again
