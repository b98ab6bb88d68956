"""The console with a proxy key limited to some agents: it lists only their sessions, and a
session of another agent (a link, a typed id) is refused once, said once, and not asked
again: its event stream answers 403 to every try, which no reconnect changes. Nothing of the
session viewed before stays on the page under the refused one's title.

The ``console`` fixture checks that the page raised no error and asked no host but the proxy.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.fakes.replies import error
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.ui.conftest import KEY_ENV, LIMIT, TENANT, Page
from tests.integration.ui.settle import settled
from tests.integration.ui.test_console import api, sign_in
from tests.integration.ui.test_console_audit import started

pytestmark = pytest.mark.timeout(60)

LIMITED = "sk-console-limited-key"
LIMITED_ENV = "CASCADE_KEY_CONSOLE_LIMITED"


@pytest.fixture
def console_config(
    tmp_path: Path, fake_upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Two agents; the console test key reaches both, LIMITED only ``coder``."""
    monkeypatch.setenv(LIMITED_ENV, LIMITED)
    return write_config(
        tmp_path / "agents.json",
        fake_upstream.url,
        models={"default": {"contextLimit": LIMIT}},
        agents={
            "default": {"provider": "openai", "fastModel": "fast-model"},
            "coder": {"provider": "openai", "fastModel": "fast-model"},
        },
        auth={
            "keys": [
                {"keyEnv": KEY_ENV, "tenant": TENANT},
                {"keyEnv": LIMITED_ENV, "tenant": TENANT, "agents": ["coder"]},
            ]
        },
    )


def _start(proxy: ProxyServer, session_id: str, model: str) -> None:
    with api(proxy) as h:
        resp = h.post(
            f"/s/{session_id}/v1/chat/completions",
            json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
        )
        assert resp.status_code == 200, resp.text


def test_a_limited_key_is_refused_another_agents_session_once(
    console: Page, console_proxy: ProxyServer
) -> None:
    _start(console_proxy, "theirs", "m")  # routes to default
    _start(console_proxy, "ours", "coder")
    page = console.page
    page.clock.install()  # its time flows, and is run on below past the retries' pauses
    page.goto(f"{console.origin}/ui#/")
    page.get_by_test_id("login-key").fill(LIMITED)
    page.get_by_test_id("login-submit").click()
    page.get_by_test_id("session-row").first.wait_for()
    assert [
        r.get_attribute("data-session-id") for r in page.get_by_test_id("session-row").all()
    ] == ["ours"]
    page.get_by_test_id("session-row").first.click()
    page.get_by_test_id("usage-text").filter(has_text="/ 8,000 tokens").wait_for()
    page.goto(f"{console.origin}/ui#/s/theirs")
    page.get_by_test_id("toast").filter(has_text="may not use session 'theirs'").first.wait_for()
    # nothing of the session shown before stays under this one's title
    assert page.get_by_test_id("usage-text").inner_text() == ""
    assert page.get_by_test_id("usage-bar").locator(".seg").count() == 0
    assert page.get_by_test_id("summary").inner_text() == ""
    for _ in range(8):  # a retry would have come after 1 s, then 2
        page.clock.run_for(1_000)
        settled(page, frames=False)  # a try that second armed is under way
    events = [u for u in console.urls if u.endswith("/v1/sessions/theirs/events")]
    assert len(events) == 1, events
    assert page.get_by_test_id("toast").filter(has_text="reconnecting").count() == 0
    assert all(LIMITED not in u for u in console.urls)  # the key only ever in a header
    with httpx.Client(base_url=console_proxy.origin, timeout=10) as h:  # as the page asked
        resp = h.get("/v1/sessions/theirs/events", headers={"authorization": f"Bearer {LIMITED}"})
        assert resp.status_code == 403


def test_a_refused_session_says_so_in_its_view_after_the_toast(
    console: Page, console_proxy: ProxyServer
) -> None:
    """The refusal stays said where the session's details go: once its toast went, the view
    showed an empty session under the title, as if there were nothing in it."""
    _start(console_proxy, "not-ours", "m")  # routes to default
    page = console.page
    page.goto(f"{console.origin}/ui#/s/not-ours")
    page.get_by_test_id("login-key").fill(LIMITED)
    page.get_by_test_id("login-submit").click()
    toast = page.get_by_test_id("toast").filter(has_text="may not use session 'not-ours'")
    toast.first.wait_for()
    toast.first.get_by_role("button", name="Close").click()
    meta = page.locator("#session-meta")
    assert "may not use session 'not-ours'" in meta.inner_text()


def test_a_providers_401_is_said_not_taken_for_the_consoles_key(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """The proxy's own 401 carries ``WWW-Authenticate`` and signs the console out; the
    provider's, relayed without it, refused the provider's key: said in a toast, the key and
    the page kept."""
    started(console_proxy, "refused")
    page = sign_in(console, "#/s/refused")
    page.get_by_test_id("usage-text").filter(has_text="tokens").wait_for()
    fake_upstream.script(error(401, {"error": {"message": "Incorrect API key provided."}}))
    page.get_by_test_id("composer-input").fill("one")
    page.get_by_test_id("composer-send").click()
    page.get_by_test_id("toast").filter(has_text="answered 401").first.wait_for()
    assert page.get_by_test_id("login-key").is_hidden()
    assert "Incorrect API key provided." in page.get_by_test_id("toast").first.inner_text()
    # the proxy's own 401, to a key it does not know, still asks for a key: the page loaded
    # again with it (the failed turn's refresh of the view may already be answered so, which
    # raced a send made after the key was swapped)
    page.evaluate("sessionStorage.setItem('cascade.console.key', 'sk-not-a-proxy-key')")
    page.reload()
    page.get_by_test_id("login-key").wait_for()
