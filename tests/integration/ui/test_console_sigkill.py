"""The console following a session while the proxy is SIGKILLed mid-stream and started again
on the same database and port: it says the live updates stopped, reconnects with
Last-Event-ID (the last ``id:`` it read, a resume token's included) once the proxy is back,
says so, and shows every stored message once, the turn made meanwhile among them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import column
from tests.integration.ui.conftest import KEY, KEY_ENV, Page
from tests.integration.ui.test_console import sign_in, tool_round, wait_for
from tests.integration.ui.test_console_events import events_requests
from tests.reliability.conftest import ProxyProcess

pytestmark = pytest.mark.timeout(90)

SID = "killed-ui"


@pytest.fixture
def killable(console_config: Path, db_dsn: str, tmp_path: Path) -> Iterator[ProxyProcess]:
    """The console's proxy as a process of its own (a short lease: the killed one's)."""
    env = {KEY_ENV: KEY, "CASCADE_LEASE_TTL_SECONDS": "3"}
    p = ProxyProcess(console_config, db_dsn, tmp_path / "proxy.log", env).start()
    try:
        yield p
    finally:
        p.stop()


def _turn(p: ProxyProcess, history: list[dict[str, Any]], i: int) -> None:
    history += tool_round(i, 400)
    with httpx.Client(base_url=p.origin, headers={"authorization": f"Bearer {KEY}"}) as h:
        resp = h.post(
            f"/s/{SID}/v1/chat/completions",
            json={"model": "m", "messages": history},
            timeout=30,
        )
    assert resp.status_code == 200, resp.text
    history.append(resp.json()["choices"][0]["message"])


def test_the_console_follows_a_session_across_a_sigkill(
    killable: ProxyProcess, browser: Any
) -> None:
    history: list[dict[str, Any]] = []
    _turn(killable, history, 0)
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    context.set_default_timeout(30_000)  # the proxy's start, and the console's backoff
    console = Page(context.new_page(), killable.origin)
    resumed: list[str | None] = []
    console.page.on(
        "request",
        lambda r: (
            r.url.endswith(f"/v1/sessions/{SID}/events")
            and resumed.append(r.headers.get("last-event-id"))
        ),
    )
    try:
        page = sign_in(console, f"#/s/{SID}")
        rows = page.locator("[data-testid=message]")
        page.locator(f"[data-testid=message][data-pos='{len(history) - 1}']").wait_for()
        wait_for(lambda: len(events_requests(console, SID)) == 1, page)
        killable.kill()
        # one alert for the outage, the first failure's: the stream's, or a load's that an
        # event or a retry began before the stream noticed
        page.get_by_text(
            re.compile("The live updates stopped|Could not load the session")
        ).wait_for()
        killable.start()
        _turn(killable, history, 1)
        page.get_by_text("Live updates are back.").wait_for()
        page.locator(f"[data-testid=message][data-pos='{len(history) - 1}']").wait_for()
        positions = [rows.nth(i).get_attribute("data-pos") for i in range(rows.count())]
        assert positions == [str(i) for i in range(len(history))], positions
        stored = column(
            killable.database_url, "SELECT max(id) FROM events WHERE session_id = $1", SID
        )
        assert stored and resumed[0] is None and resumed[-1]  # the reconnect says what it has
    finally:
        context.close()
    assert [e for e in console.errors if e.startswith("page error")] == []
