"""The console57 changes, reviewed: what they missed. A raw output read on past the view it
was pressed in wrote into the next session's rows; a load refused after a failed one left
"trying again" said with nothing trying; the raw-output button's name, hidden in its text,
was copied with a selection.

Each test fails on the console before its fix; the ``console`` fixture checks that the page
raised no error and asked no host but the proxy.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.ui.conftest import Page
from tests.integration.ui.test_console import api, sign_in, tool_round, wait_for

pytestmark = pytest.mark.timeout(60)


def _posted(proxy: ProxyServer, sid: str, messages: list[dict[str, Any]]) -> None:
    with api(proxy) as h:
        resp = h.post(f"/s/{sid}/v1/chat/completions", json={"model": "m", "messages": messages})
        assert resp.status_code == 200, resp.text


def test_a_raw_output_read_stops_when_the_view_closes(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """A press reads page after page (about thirty-four of the proxy's 1,500-character
    pages here). The reader opens another session meanwhile: the read stops there, and
    writes nothing into the rows now shown, though the other session's cut result sits at
    the same place with the same call id."""
    fake_upstream.script(reply("ok"), reply("ok"))
    _posted(console_proxy, "spill-a", tool_round(1, 70_000))
    _posted(console_proxy, "spill-b", tool_round(1, 5000))
    asked: list[str] = []
    held: list[Any] = []

    def slow(route: Any) -> None:
        asked.append(route.request.url)
        if len(asked) == 3:
            held.append(route)  # answered once the view has gone
        else:
            route.continue_()

    console.page.route("**/v1/sessions/spill-a/tool-outputs/**", slow)
    page = sign_in(console, "#/s/spill-a")
    page.locator("[data-tool-call-id=call_1]").get_by_test_id("raw-page").click()
    wait_for(lambda: bool(held), page)
    page.evaluate("location.hash = '#/s/spill-b'")
    other = page.get_by_test_id("message-list").locator("[data-tool-call-id=call_1]")
    other.get_by_test_id("raw-page").wait_for()
    held[0].continue_()
    page.wait_for_timeout(600)
    assert len(asked) == 3  # no page read after the one under way
    assert other.get_by_test_id("raw-output").count() == 0
    assert page.get_by_test_id("toast").count() == 0
