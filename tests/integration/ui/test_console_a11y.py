"""The console audited for accessibility: axe-core, run in the page, finds no serious or
critical violation on any of its views (sign-in, the session list full and empty, a session
with its events, a raw output paged back, the memory prompt, the confirm dialog, an outage's
alert and a failed list, a session not started yet).

axe-core comes from the ``axe-playwright-python`` package (the test extra), which ships its
``axe.min.js``: nothing is fetched at run time. The ``console`` fixture checks that the page
raised no error and asked no host but the proxy.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.ui.conftest import Page
from tests.integration.ui.test_console import inject, posted, sign_in, tool_round, wait_for
from tests.integration.ui.test_console_audit import started

pytestmark = pytest.mark.timeout(60)

# WCAG 2.x A and AA, and axe's best practices (landmarks, one main heading, ...)
_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]


def violations(page: Any) -> list[str]:
    """axe-core's serious and critical violations on the page as it is now, one line each
    (the rule, its help text, and the elements it names)."""
    from axe_playwright_python.sync_playwright import Axe

    options = {"resultTypes": ["violations"], "runOnly": {"type": "tag", "values": _TAGS}}
    found = Axe().run(page, options=options).response["violations"]
    return [
        f"{v['id']} ({v['impact']}): {v['help']}: " + " | ".join(n["html"] for n in v["nodes"])
        for v in found
        if v["impact"] in ("serious", "critical")
    ]


def clean(page: Any) -> None:
    found = violations(page)
    assert not found, "\n".join(found)


def test_sign_in_and_the_session_lists_have_no_serious_violation(
    console: Page, console_proxy: ProxyServer
) -> None:
    page = console.page
    page.goto(f"{console.origin}/ui#/")
    page.get_by_test_id("login-key").wait_for()
    clean(page)
    page = sign_in(console)
    page.locator("#list-empty").filter(has_text="No sessions").wait_for()
    clean(page)  # the empty list
    started(console_proxy, "listed")
    page.reload()
    page.get_by_test_id("session-list").get_by_text("listed").wait_for()
    clean(page)


def test_a_session_with_its_events_raw_output_and_memory_prompt_has_no_serious_violation(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    fake_upstream.script(reply("Read them all.", usage=(1900, 4)))
    posted(console_proxy, "audited", [*tool_round(1, 1200), *tool_round(2, 5000)])
    page = sign_in(console, "#/s/audited")
    listing = page.get_by_test_id("message-list")
    cut = listing.locator("[data-tool-call-id=call_2]")
    cut.locator("[data-mark=truncated]").wait_for()
    clean(page)
    cut.get_by_test_id("raw-page").click()
    cut.get_by_test_id("raw-status").filter(has_text="All shown").wait_for()
    inject(db_dsn, "audited", "context.compaction.failed", {"reason": "provider down"})
    page.get_by_test_id("status-line").filter(has_text="provider down").wait_for()
    inject(db_dsn, "audited", "context.handoff_suggested", {"fraction": 0.93})
    page.get_by_test_id("toast").filter(has_text="handing off").wait_for()
    inject(db_dsn, "audited", "memory.suggestion", {"suggestion_id": "s-1", "facts": ["A", "B"]})
    page.get_by_test_id("memory-prompt").wait_for()
    clean(page)
    page.get_by_test_id("action-reset").click()
    page.get_by_test_id("confirm").wait_for()
    clean(page)
    page.get_by_test_id("confirm-cancel").click()


def test_an_outage_a_failed_list_and_a_session_not_started_have_no_serious_violation(
    console: Page, console_proxy: ProxyServer
) -> None:
    started(console_proxy, "away")
    console.page.route("**/v1/sessions?*", lambda route: route.abort())
    page = sign_in(console)
    page.get_by_test_id("sessions-retry").wait_for()
    clean(page)
    console.page.route("**/v1/sessions/away", lambda route: route.abort())
    console.page.route("**/v1/sessions/away/events", lambda route: route.abort())
    page.goto(f"{console.origin}/ui#/s/away")
    alerts = page.locator("[data-testid=toast][data-kind=error]")
    alerts.first.wait_for()
    clean(page)
    page.unroute("**/v1/sessions/away")
    page.unroute("**/v1/sessions/away/events")
    page.goto(f"{console.origin}/ui#/s/not-yet")
    page.get_by_test_id("usage-text").filter(has_text="No usage yet").wait_for()
    wait_for(lambda: alerts.count() == 0, page)
    clean(page)
    console.errors.clear()  # the aborted requests' own console lines
