"""The console's per-event work on a session holding many rows: a streaming reply's delta
touches its own items, never a search of the whole message list."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import replied
from tests.integration.ui.conftest import Page
from tests.integration.ui.test_console import (
    api,
    inject,
    sign_in,
    stream_live,
    tool_round,
    wait_for,
)

pytestmark = pytest.mark.timeout(60)

SID = "many-rows"

# counts the searches run over the message list (querySelectorAll/querySelector on it)
COUNTER = """
window.listSearches = 0;
for (const name of ["querySelectorAll", "querySelector"]) {
  const orig = Element.prototype[name];
  Element.prototype[name] = function (s) {
    if (this.id === "message-list") window.listSearches++;
    return orig.call(this, s);
  };
}
"""


def test_a_streaming_delta_does_not_search_the_message_list(
    console: Page, console_proxy: Any, fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    history = [m for i in range(20) for m in tool_round(i, 100)]
    fake_upstream.script(reply("done"))
    with api(console_proxy) as h:
        resp = h.post(f"/s/{SID}/v1/chat/completions", json={"model": "m", "messages": history})
        assert resp.status_code == 200, resp.text
        replied(h, SID)
    console.page.add_init_script(COUNTER)
    page = sign_in(console, f"#/s/{SID}")
    listed = page.get_by_test_id("message-list")
    listed.get_by_text("done").wait_for()
    stream_live(page)  # the events the stream replays as it opens are in
    page.evaluate("window.listSearches = 0")
    for i in range(5):
        inject(db_dsn, SID, "session.message.delta.appended", {"choice": 0, "delta": f"tok{i} "})
    wait_for(lambda: "tok4" in listed.inner_text(), page)
    assert page.evaluate("window.listSearches") == 0


def test_the_message_list_is_laid_out_as_blocks(console: Page) -> None:
    """A grid sizes its tracks over every row whenever one is added or removed (each streamed
    delta replaces the reply's item): the list's rows are blocks, each laid out alone."""
    page = sign_in(console, f"#/s/{SID}")
    shown = page.get_by_test_id("message-list").evaluate("e => getComputedStyle(e).display")
    assert shown == "block"
