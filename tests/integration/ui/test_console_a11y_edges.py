"""The console's accessibility fixes at their edges: a live update never moves a focus the
person did not lose, a box of text that scrolls is a Tab stop whatever the shape of its text,
and an alert is said at once.

The ``console`` fixture checks that the page raised no error and asked no host but the proxy.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.api.conftest import ProxyServer
from tests.integration.ui.conftest import Page
from tests.integration.ui.test_console import sign_in

pytestmark = pytest.mark.timeout(60)

# a toast raised from the page's own module (the one instance the page runs)
_TOAST = (
    "([text, kind, key]) => import('/ui/static/app.js')"
    ".then((m) => { m.toast(text, kind, 0, key); })"
)


def _active(page: Any) -> str:
    return str(
        page.evaluate(
            "document.activeElement === document.body ? 'body'"
            " : document.activeElement.dataset.testid || document.activeElement.id"
        )
    )


def test_an_alert_updated_under_its_key_says_the_new_text_at_once(
    console: Page, console_proxy: ProxyServer
) -> None:
    """A status may wait its turn (one text a second); an alert may not: what it says now
    is what the person must hear now."""
    page = sign_in(console)
    page.evaluate(_TOAST, ["The proxy is away.", "error", "outage"])
    alert = page.locator("[data-testid=toast][role=alert]")
    alert.filter(has_text="The proxy is away.").wait_for()
    page.evaluate(_TOAST, ["The proxy is back; reading again.", "error", "outage"])
    assert alert.inner_text().startswith("The proxy is back"), alert.inner_text()
