"""A result cut with no copy kept (``persistRaw`` off) is marked truncated, as the messages API
marks it (the model got less than the whole output), and offers no "Show the raw output":
the tool-outputs endpoint has nothing for it, so the button could only fail. Its marker says
so (re-run the tool)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.api.conftest import ProxyServer
from tests.integration.ui.conftest import Page
from tests.integration.ui.test_console import api, sign_in, tool_round

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def console_config(console_config: Path) -> Path:
    """The console's config with no copy kept of a cut result."""
    cfg = json.loads(console_config.read_text())
    cfg["context"]["toolOutput"]["persistRaw"] = False
    console_config.write_text(json.dumps(cfg))
    return console_config


def test_a_cut_without_a_copy_offers_no_raw_output(
    console: Page, console_proxy: ProxyServer
) -> None:
    with api(console_proxy) as h:
        body = {"model": "m", "messages": tool_round(1, 4000)}
        resp = h.post("/s/nocopy/v1/chat/completions", json=body)
        assert resp.status_code == 200, resp.text
    page = sign_in(console, "#/s/nocopy")
    cut = page.get_by_test_id("message-list").locator("[data-tool-call-id=call_1]")
    cut.locator("[data-mark=truncated]").wait_for()
    assert "re-run the tool" in cut.locator("pre.body").inner_text()
    assert cut.get_by_test_id("raw-page").count() == 0
