"""Raw outputs in the console, by what the API says of each row: a redacted result keeps no
copy (its secret is never stored), so the page offers no "Show the raw output" for it, which
could only answer 404; nor does a result cut with ``persistRaw`` off, marked truncated all the
same (the model got less than the whole output), whose marker says no copy was kept; and a
copy capped at ``rawCapBytes`` is said to be one, not "All shown".

The ``console`` fixture checks that the page raised no error and asked no host but the proxy.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.ui.conftest import KEY_ENV, LIMIT, MAX_CHARS, TENANT, Page
from tests.integration.ui.test_console import api, posted, sign_in, tool_round

pytestmark = pytest.mark.timeout(60)

SECRET = "sk-abcdefghijklmnopqrstuvwxyz0123456789ABCD"
RAW_CAP = 2000


@pytest.fixture
def console_config(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    """The console tests' config (conftest), with spills capped at RAW_CAP bytes, and an
    agent (``nocopy``, a request's model) that keeps no copy of a cut result."""
    nocopy = {"toolOutput": {"maxChars": MAX_CHARS, "persistRaw": False}}
    return write_config(
        tmp_path / "agents.json",
        fake_upstream.url,
        models={"default": {"contextLimit": LIMIT, "reservedOutput": 500}},
        agents={
            "default": {"provider": "openai", "fastModel": "fast-model"},
            "nocopy": {"provider": "openai", "context": nocopy},
        },
        auth={"keys": [{"keyEnv": KEY_ENV, "tenant": TENANT}]},
        context={
            "toolOutput": {"maxChars": MAX_CHARS, "rawCapBytes": RAW_CAP},
            "eviction": {
                "enabled": True,
                "atFraction": 0.1,
                "keepRecentRounds": 1,
                "clearAtLeast": 10,
                "minResultTokens": 10,
            },
            "summarize": {"keepRecent": 2},
        },
    )


def test_a_redacted_result_offers_no_raw_output(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    secret = tool_round(1, 800)  # under MAX_CHARS: not cut, redacted, then evicted
    secret[2]["content"] = f"token {SECRET}\n" + secret[2]["content"]
    plain = tool_round(2, 800)  # the same, with nothing to redact: its body is kept
    fake_upstream.script(reply("ok", usage=(1900, 4)))
    posted(console_proxy, "secret", [*secret, *plain, *tool_round(3, 5000), *tool_round(4, 300)])
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


def test_a_capped_copy_is_said_to_be_one(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(reply("ok", usage=(1900, 4)))
    round_ = tool_round(1, 5000)  # cut, its copy capped at RAW_CAP
    size = len(round_[2]["content"])
    posted(console_proxy, "capped", round_)
    with api(console_proxy) as h:
        out = h.get("/v1/sessions/capped/tool-outputs/call_1@2").json()
        assert out["capped"] and out["original_bytes"] == size > RAW_CAP
    page = sign_in(console, "#/s/capped")
    cut = page.get_by_test_id("message-list").locator("[data-pos='2']")
    button = cut.get_by_test_id("raw-page")
    button.click()  # one press reads the proxy's pages on to the copy's end
    cut.get_by_test_id("raw-output").filter(has_text="file 1 line 0099").wait_for()
    said = cut.get_by_test_id("raw-status")
    said.filter(has_text="All the proxy kept").wait_for()
    assert button.is_disabled()
    text = said.inner_text()
    assert "All shown" not in text
    assert f"{RAW_CAP:,} of {size:,} bytes" in text, text


def test_a_cut_without_a_copy_offers_no_raw_output(
    console: Page, console_proxy: ProxyServer
) -> None:
    with api(console_proxy) as h:
        body = {"model": "nocopy", "messages": tool_round(1, 4000)}
        assert h.post("/s/nocopy/v1/chat/completions", json=body).status_code == 200
        assert h.get("/v1/sessions/nocopy/tool-outputs/call_1@2").status_code == 404
    page = sign_in(console, "#/s/nocopy")
    cut = page.get_by_test_id("message-list").locator("[data-pos='2']")
    cut.locator("[data-mark=truncated]").wait_for()
    assert "re-run the tool" in cut.locator("pre.body").inner_text()
    assert cut.get_by_test_id("raw-page").count() == 0
