"""The console's event stream past the happy path: a repeated handoff nudge updates its toast
instead of stacking another."""

from __future__ import annotations

import pytest

from tests.integration.api.conftest import ProxyServer
from tests.integration.ui.conftest import Page
from tests.integration.ui.test_console import inject, sign_in
from tests.integration.ui.test_console_audit import started

pytestmark = pytest.mark.timeout(60)


def test_a_repeated_handoff_suggestion_updates_its_toast(
    console: Page, console_proxy: ProxyServer, db_dsn: str
) -> None:
    started(console_proxy, "nudged")
    page = sign_in(console, "#/s/nudged")
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    toasts = page.locator("[data-testid=toast][data-kind=handoff]")
    inject(db_dsn, "nudged", "context.handoff_suggested", {"fraction": 0.91})
    toasts.filter(has_text="91%").wait_for()
    inject(db_dsn, "nudged", "context.handoff_suggested", {"fraction": 0.95})
    toasts.filter(has_text="95%").wait_for()
    assert toasts.count() == 1
    page.reload()  # the stream replays both: still one toast, saying the latest
    page.get_by_test_id("message-list").get_by_text("hi").wait_for()
    toasts.filter(has_text="95%").wait_for()
    page.wait_for_timeout(300)
    assert toasts.count() == 1
