"""The console behind a prefix: a front server maps ``/cascade/…`` to the proxy, stripping
the prefix, and the proxy runs with uvicorn's ``--root-path /cascade``. The page must ask for
its modules and the API under the prefix too, or the browser asks the front server for paths
it does not map and the console stays blank. Playwright's routing plays the front server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.settings import Settings
from tests.integration.api.conftest import ProxyServer
from tests.integration.ui.conftest import KEY, KEY_ENV, Page
from tests.integration.ui.test_console_audit import started

pytestmark = pytest.mark.timeout(60)

PREFIX = "/cascade"


@pytest.fixture
def console_proxy(
    db_dsn: str, console_config: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ProxyServer]:
    monkeypatch.setenv(KEY_ENV, KEY)
    server = ProxyServer(
        Settings(database_url=db_dsn, config=console_config, keepalive_seconds=0.3),
        root_path=PREFIX,
    ).start()
    yield server
    server.stop()


def test_behind_a_prefix_the_page_asks_for_everything_under_it(
    console: Page, console_proxy: ProxyServer
) -> None:
    started(console_proxy, "prefixed")  # the API client talks to the proxy itself
    origin = console.origin
    unmapped: list[str] = []

    def front(route: Any) -> None:  # strips the prefix, as the front server does
        url = route.request.url
        if url.startswith(f"{origin}{PREFIX}/"):
            route.continue_(url=origin + url[len(origin) + len(PREFIX) :])
        else:
            unmapped.append(url)
            route.fulfill(status=404, body="not mapped by the front server")

    page = console.page
    page.route(f"{origin}/**", front)
    page.goto(f"{origin}{PREFIX}/ui#/s/prefixed")
    page.get_by_test_id("login-key").fill(KEY)
    page.get_by_test_id("login-submit").click()
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    page.get_by_test_id("usage-text").filter(has_text="tokens").wait_for()
    assert unmapped == []
