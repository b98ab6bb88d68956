"""The console's memory prompt finds its session's suggestion however many older ones of
other sessions wait unanswered (the list is oldest first, a page at most 1000 long): it asks
for its session's alone, and reads no other's."""

from __future__ import annotations

import concurrent.futures
import json

import asyncpg
import pytest

from tests.integration.api.conftest import ProxyServer
from tests.integration.conftest import run_sync
from tests.integration.ui.conftest import TENANT, Page
from tests.integration.ui.test_console import api, inject, sign_in

pytestmark = pytest.mark.timeout(60)


def _backlog(db_dsn: str, count: int) -> None:
    """``count`` unanswered suggestions of another session, older than any made after."""

    async def go() -> None:
        conn = await asyncpg.connect(db_dsn)
        try:
            await conn.execute(
                "INSERT INTO events (tenant, session_id, name, data)"
                " SELECT $1, 'elsewhere', 'memory.suggestion',"
                " jsonb_build_object('session_id', 'elsewhere', 'suggestion_id', 'old-' || i,"
                " 'facts', $3::jsonb)"
                " FROM generate_series(1, $2) AS i",
                TENANT,
                count,
                json.dumps(["An old fact"]),
            )
        finally:
            await conn.close()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # sync Playwright holds this loop
        pool.submit(run_sync, go()).result(timeout=20)


def test_a_suggestion_past_the_first_page_of_the_list_is_asked(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    with api(console_proxy) as h:
        for sid in ("elsewhere", "remember"):
            h.post(
                f"/s/{sid}/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            )
    _backlog(db_dsn, 1000)
    page = sign_in(console, "#/s/remember")
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    inject(db_dsn, "remember", "memory.suggestion", {"suggestion_id": "new-1", "facts": ["New"]})
    page.get_by_test_id("memory-prompt").filter(has_text="Remember this thing?").wait_for(
        timeout=10_000
    )


def test_the_prompt_reads_its_sessions_suggestions_alone(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    """The prompt asks the proxy for its session's suggestions (``?session_id=``): another
    session's waiting suggestions are never read, nor paged through, by the page."""
    with api(console_proxy) as h:
        for sid in ("elsewhere", "remember"):
            h.post(
                f"/s/{sid}/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            )
    inject(db_dsn, "elsewhere", "memory.suggestion", {"suggestion_id": "o-1", "facts": ["Not"]})
    page = sign_in(console, "#/s/remember")
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    inject(db_dsn, "remember", "memory.suggestion", {"suggestion_id": "mine", "facts": ["Yes"]})
    page.get_by_test_id("memory-prompt").filter(has_text="Yes").wait_for()
    asked = [u for u in console.urls if "/v1/memory/suggestions" in u]
    assert asked and all("session_id=remember&" in u for u in asked)


def test_the_prompt_reads_every_page_from_the_last_ones_next_cursor(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    """The session's suggestions a page at a time (one a page here, the ``limit`` rewritten
    on its way), each page from the last one's ``next_cursor``: an offset moved by one
    answered between two pages (another tab, the CLI) skipped the one after it."""
    with api(console_proxy) as h:
        h.post(
            "/s/remember/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        )
    console.page.route(
        "**/v1/memory/suggestions?*",
        lambda route: route.continue_(url=route.request.url.replace("limit=1000", "limit=1")),
    )
    page = sign_in(console, "#/s/remember")
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    for n in (1, 2, 3):
        inject(db_dsn, "remember", "memory.suggestion", {"suggestion_id": f"s{n}", "facts": ["F"]})
    page.get_by_test_id("memory-prompt").filter(has_text="(1 of 3 waiting)").wait_for()
    asked = [u for u in console.urls if "/v1/memory/suggestions" in u]
    assert any("cursor=" in u for u in asked) and not any("offset=" in u for u in asked)
