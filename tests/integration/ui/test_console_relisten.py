"""The console's stream ended by the proxy once its event listener listens again
(``bus.RELISTENED``): what was notified meanwhile reached no stream, a transient
``context.evicted`` for good, so the console reconnects with Last-Event-ID and reads its
rows again, each shown once, the one changed in the gap as it is now."""

from __future__ import annotations

import concurrent.futures
import time

import pytest

from proxy.api import reconnect
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.test_health import sql
from tests.integration.ui.conftest import Page
from tests.integration.ui.test_console import api, sign_in, tool_round, wait_for
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
    page.wait_for_timeout(300)  # past `: live`
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
    page.wait_for_timeout(300)  # past `: live`
    _end_listener(console_proxy, db_dsn)
    wait_for(lambda: not bus._subs, page)  # the stream ended
    ended = time.monotonic()
    wait_for(lambda: len(events_requests(console, "told")) == 2, page)
    assert time.monotonic() - ended >= 2.5
