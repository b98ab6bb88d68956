"""Raw outputs in the console, by what the API says of each row: a redacted result keeps no
copy (its secret is never stored), so the page offers no "Show the raw output" for it, which
could only answer 404; and under an id a client reuses (``call_0`` every turn), a result is
marked cut only when it was, whatever another result under the id went through.

The ``console`` fixture checks that the page raised no error and asked no host but the proxy.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.ui.conftest import Page
from tests.integration.ui.test_console import api, sign_in, tool_round

pytestmark = pytest.mark.timeout(60)

SECRET = "sk-abcdefghijklmnopqrstuvwxyz0123456789ABCD"


def _post(proxy: ProxyServer, session_id: str, messages: list[dict[str, Any]]) -> None:
    with api(proxy) as h:
        resp = h.post(
            f"/s/{session_id}/v1/chat/completions", json={"model": "m", "messages": messages}
        )
        assert resp.status_code == 200, resp.text


def test_a_redacted_result_offers_no_raw_output(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    secret = tool_round(1, 800)  # under MAX_CHARS: not cut, redacted, then evicted
    secret[2]["content"] = f"token {SECRET}\n" + secret[2]["content"]
    plain = tool_round(2, 800)  # the same, with nothing to redact: its body is kept
    fake_upstream.script(reply("ok", usage=(1900, 4)))
    _post(console_proxy, "secret", [*secret, *plain, *tool_round(3, 5000), *tool_round(4, 300)])
    with api(console_proxy) as h:
        rows = {r["pos"]: r for r in h.get("/v1/sessions/secret/messages").json()["data"]}
        assert rows[2]["redacted"] and rows[2]["evicted"]
        assert h.get("/v1/sessions/secret/tool-outputs/call_1@2").status_code == 404
        assert rows[5]["evicted"] and not rows[5]["redacted"]
    page = sign_in(console, "#/s/secret")
    listing = page.get_by_test_id("message-list")
    kept = listing.locator("[data-pos='5']")
    kept.locator("[data-mark=evicted]").wait_for()
    kept.get_by_test_id("raw-page").click()
    kept.get_by_test_id("raw-output").filter(has_text="file 2 line 0000").wait_for()
    redacted = listing.locator("[data-pos='2']")
    assert redacted.locator("[data-mark=redacted]").count() == 1
    assert redacted.locator("[data-mark=evicted]").count() == 1
    assert redacted.get_by_test_id("raw-page").count() == 0
    assert page.get_by_test_id("toast").count() == 0
    assert [e for e in console.errors if "404" in e] == []
