"""The console's stream ended by the proxy once its event listener listens again
(``bus.RELISTENED``): what was notified meanwhile reached no stream, a transient
``context.evicted`` for good, so the console reconnects with Last-Event-ID and reads its
rows again, each shown once, the one changed in the gap as it is now."""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any

import pytest

from proxy.api import reconnect
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.test_health import sql
from tests.integration.ui.conftest import Page
from tests.integration.ui.test_console import api, sign_in, stream_live, tool_round, wait_for
from tests.integration.ui.test_console_audit import started
from tests.integration.ui.test_console_events import events_requests, evict_row

pytestmark = pytest.mark.timeout(60)


def _end_listener(proxy: ProxyServer, db_dsn: str) -> None:
    pid = proxy.state("bus")._listener.get_server_pid()
    # on its own thread: sync Playwright keeps an event loop running on this one
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(sql, db_dsn, f"SELECT pg_terminate_backend({pid})").result(timeout=10)


def test_a_stream_ended_as_the_listener_comes_back_reconnects_and_reads_the_rows_again(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    history = [m for i in range(2) for m in tool_round(i, 400)]
    with api(console_proxy) as h:
        resp = h.post("/s/gap/v1/chat/completions", json={"model": "m", "messages": history})
        assert resp.status_code == 200, resp.text
    page = sign_in(console, "#/s/gap")
    rows = page.locator("[data-testid=message]")
    row = page.locator("[data-testid=message][data-pos='2']")  # the first round's result
    row.wait_for()
    shown = rows.count()
    bus = console_proxy.state("bus")
    wait_for(lambda: len(events_requests(console, "gap")) == 1 and bool(bus._subs), page)
    stream_live(page)  # past `: live`
    _end_listener(console_proxy, db_dsn)
    evict_row(db_dsn, "gap", 2)  # as an eviction whose transient event the gap swallowed
    wait_for(lambda: len(events_requests(console, "gap")) == 2, page)
    row.locator("[data-mark=evicted]").wait_for()
    assert rows.count() == shown
    positions = [rows.nth(i).get_attribute("data-pos") for i in range(shown)]
    assert len(set(positions)) == shown, positions
    assert page.locator("[data-testid=toast][data-kind=error]").count() == 0


def test_a_stream_ended_as_the_listener_comes_back_reconnects_when_it_was_told(
    console: Page, console_proxy: ProxyServer, db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream's last frame says when to reconnect (``retry:``, spread over the streams a
    new listener ends at once: ``api/reconnect.py``); the console waits that long, not its
    own second, which every console open on the replica waited alike."""
    monkeypatch.setattr(reconnect, "_SPREAD", reconnect.Spread(3000, 1))  # told: 3 s
    with api(console_proxy) as h:
        resp = h.post(
            "/s/told/v1/chat/completions", json={"model": "m", "messages": tool_round(0, 400)}
        )
        assert resp.status_code == 200, resp.text
    page = sign_in(console, "#/s/told")
    page.locator("[data-testid=message][data-pos='2']").wait_for()
    bus = console_proxy.state("bus")
    wait_for(lambda: len(events_requests(console, "told")) == 1 and bool(bus._subs), page)
    stream_live(page)  # past `: live`
    _end_listener(console_proxy, db_dsn)
    wait_for(lambda: not bus._subs, page)  # the stream ended
    ended = time.monotonic()
    wait_for(lambda: len(events_requests(console, "told")) == 2, page)
    assert time.monotonic() - ended >= 2.5


def test_the_id_of_the_last_frame_which_carries_no_event_is_resumed_after(
    console: Page, console_proxy: ProxyServer
) -> None:
    """A stream that held back an event ends with the id to resume after on its last frame,
    which carries no event (``reconnect.last_frames``): an ``EventSource`` takes a frame's
    ``id:`` with or without data, and so does the console. The first stream is served by
    the test: an event, then that last frame, below it; the next one is the proxy's."""
    started(console_proxy, "held")
    calls: list[str] = []
    body = (
        ": live\n\nid: 999999\nevent: context.usage\n"
        'data: {"session_id": "held", "ts": "t"}\n\n: reconnect\nid: 7\nretry: 100\n\n'
    )

    def events(route: Any) -> None:
        calls.append(route.request.headers.get("last-event-id") or "")
        if len(calls) == 1:
            route.fulfill(status=200, content_type="text/event-stream", body=body)
        else:
            route.continue_()

    console.page.route("**/v1/sessions/held/events", events)
    page = sign_in(console, "#/s/held")
    page.get_by_test_id("message").first.wait_for()
    wait_for(lambda: len(calls) == 2, page)
    assert calls == ["", "7"]
