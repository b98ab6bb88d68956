"""The console after "Change key": the key signed in next may be another tenant's, so nothing
the page read with the key before (its sessions' rows, the list's next page, a filter) stays
on the page or is asked for again with the new key, whether or not the new key's first read
of the list succeeds.

The ``console`` fixture checks that the page raised no error and asked no host but the proxy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.replies import Pacer, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.ui.conftest import KEY, KEY_ENV, LIMIT, TENANT, Page
from tests.integration.ui.test_console import wait_for
from tests.integration.ui.test_console_audit import started

pytestmark = pytest.mark.timeout(60)

OTHER = "sk-console-other-tenant-key"
OTHER_ENV = "CASCADE_KEY_CONSOLE_OTHER"
SAME = "sk-console-same-tenant-key"
SAME_ENV = "CASCADE_KEY_CONSOLE_SAME"


@pytest.fixture
def console_config(
    tmp_path: Path, fake_upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """The console test key's tenant, SAME's too, and OTHER's, another."""
    monkeypatch.setenv(OTHER_ENV, OTHER)
    monkeypatch.setenv(SAME_ENV, SAME)
    return write_config(
        tmp_path / "agents.json",
        fake_upstream.url,
        models={"default": {"contextLimit": LIMIT}},
        auth={
            "keys": [
                {"keyEnv": KEY_ENV, "tenant": TENANT},
                {"keyEnv": OTHER_ENV, "tenant": "other-tenant"},
                {"keyEnv": SAME_ENV, "tenant": TENANT},
            ]
        },
    )


def _sign_in(console: Page, key: str) -> Any:
    page = console.page
    page.get_by_test_id("login-key").fill(key)
    page.get_by_test_id("login-submit").click()
    return page


def _shared_run(proxy: ProxyServer) -> None:
    """``shared-run``, a session of the console key's tenant, and OTHER's under the same id."""
    started(proxy, "shared-run")
    with httpx.Client(base_url=proxy.origin, timeout=10) as http:
        made = http.post(
            "/s/shared-run/v1/chat/completions",
            headers={"authorization": f"Bearer {OTHER}"},
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert made.status_code == 200, made.text


def test_another_keys_sign_in_shows_none_of_the_last_keys_sessions(
    console: Page, console_proxy: ProxyServer
) -> None:
    """The next key's first read of the list fails (the network, the proxy away): the list
    it shows is empty, not the last key's rows, and offers no next page of them."""
    started(console_proxy, "first-tenants-private")
    page = console.page
    page.goto(f"{console.origin}/ui#/")
    _sign_in(console, KEY)
    rows = page.get_by_test_id("session-row")
    rows.first.wait_for()
    assert rows.first.get_attribute("data-session-id") == "first-tenants-private"
    with page.expect_response(lambda r: "/v1/sessions?" in r.url and "q=first" in r.url):
        page.get_by_test_id("session-filter").fill("first")  # the filter's read, answered
    page.locator("#forget-key").click()
    page.get_by_test_id("login-key").wait_for()
    page.route("**/v1/sessions?*", lambda route: route.abort())
    _sign_in(console, OTHER)
    page.locator("#list-empty").filter(has_text="Could not list the sessions").wait_for()
    assert rows.count() == 0
    assert page.get_by_test_id("sessions-more").is_hidden()
    assert page.get_by_test_id("session-filter").input_value() == ""
    assert "first-tenants-private" not in page.locator("#list-view").inner_text()
    console.errors.clear()  # the aborted read's own console line


def test_another_keys_sign_in_shows_none_of_the_last_keys_toasts(
    console: Page, console_proxy: ProxyServer
) -> None:
    """A toast the last key's work raised (a branch's new id, a delete, an error naming its
    session) goes with the key, not on showing for its seconds over the next key's page."""
    started(console_proxy, "first-tenants-private")
    page = console.page
    page.goto(f"{console.origin}/ui#/s/first-tenants-private")
    _sign_in(console, KEY)
    page.get_by_test_id("usage-text").filter(has_text="tokens").wait_for()
    page.evaluate(  # the page's own module (imported once): as the branch action says it
        "import('/ui/static/app.js').then((m) => m.toast('Branched into first-tenants-copy'))"
    )
    toasts = page.get_by_test_id("toast")
    toasts.filter(has_text="first-tenants-copy").wait_for()
    page.locator("#forget-key").click()
    page.get_by_test_id("login-key").wait_for()
    assert toasts.count() == 0
    page.goto(f"{console.origin}/ui#/")
    _sign_in(console, OTHER)
    page.locator("#list-empty").wait_for()
    assert "first-tenants" not in page.locator("body").inner_text()


def test_another_keys_session_under_the_same_id_shows_none_of_the_last_keys_draft(
    console: Page, console_proxy: ProxyServer
) -> None:
    """A draft typed and left unsent in the last key's session ``shared-run`` is the last
    key's: the next key's session under the same id, another tenant's, opens with an empty
    composer."""
    _shared_run(console_proxy)
    page = console.page
    page.goto(f"{console.origin}/ui#/s/shared-run")
    _sign_in(console, KEY)
    composer = page.get_by_test_id("composer-input")
    page.get_by_test_id("usage-text").filter(has_text="tokens").wait_for()
    composer.fill("the first tenant's unsent plan")
    page.locator("#forget-key").click()
    page.get_by_test_id("login-key").wait_for()
    _sign_in(console, OTHER)
    page.get_by_test_id("usage-text").filter(has_text="tokens").wait_for()
    assert composer.input_value() == ""


def test_a_message_the_last_key_sent_is_not_sent_with_the_next_key(
    console: Page, console_proxy: ProxyServer
) -> None:
    """A message sent from the last key's session whose history read is still under way when
    the key changes (a read held here; a turn before it waits up to five seconds for its
    last event too) is not sent with the next key: before, the resend of the last key's
    history and the message went to the next key's session under that id, another
    tenant's."""
    started(console_proxy, "shared-run")
    page = console.page
    page.goto(f"{console.origin}/ui#/s/shared-run")
    _sign_in(console, KEY)
    page.get_by_test_id("usage-text").filter(has_text="tokens").wait_for()
    held: list[Any] = []
    reads = "**/v1/sessions/shared-run/messages?form=sent*"  # the resend's
    page.route(reads, lambda route: route.continue_() if held else held.append(route))
    page.get_by_test_id("composer-input").fill("the first tenant's message")
    page.get_by_test_id("composer-send").click()
    wait_for(lambda: held, page)  # the first read held, the next key's let through
    page.locator("#forget-key").click()
    page.get_by_test_id("login-key").wait_for()
    _sign_in(console, OTHER)
    page.locator("#list-empty").wait_for(state="attached")
    held[0].continue_()
    # a fixed wait: the send, had it gone on, reaches the proxy with no state of the page's
    # to wait for (its view is closed)
    page.wait_for_timeout(1500)
    with httpx.Client(base_url=console_proxy.origin, timeout=10) as http:
        http.headers["authorization"] = f"Bearer {OTHER}"
        assert http.get("/v1/sessions").json()["data"] == []
    assert page.get_by_test_id("toast").count() == 0


ANSWER = "the last key's answer " * 4


def _send(page: Any, text: str) -> None:
    page.get_by_test_id("usage-text").filter(has_text="tokens").wait_for()  # the view read
    page.get_by_test_id("composer-input").fill(text)
    page.get_by_test_id("composer-send").click()


def _turn_then_key_change(console: Page, fake_upstream: FakeUpstream, key: str) -> Pacer:
    """KEY's turn in ``shared-run`` streams (its pacer, returned, holds the rest back) when
    ``key`` signs in and sends its own message there, whose answer is the next reply."""
    pacer = Pacer()
    fake_upstream.script(
        reply(ANSWER, chunks=4, pacer=pacer), reply("Ours." if key == SAME else "Theirs.")
    )
    page = console.page
    page.goto(f"{console.origin}/ui#/s/shared-run")
    _sign_in(console, KEY)
    _send(page, "one")
    pacer.allow(1)
    page.get_by_test_id("assistant-message").filter(has_text="the last").wait_for()
    page.locator("#forget-key").click()
    page.get_by_test_id("login-key").wait_for()
    _sign_in(console, key)
    _send(page, "two")
    return pacer


def test_the_next_keys_message_waits_for_none_of_the_last_keys_turns(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """A turn the last key sent in its ``shared-run`` still streams when the key changes:
    the next key's message in its own session under that id goes at once. It waited for the
    last key's turn, queued under the same session id, and then for its last event, which
    the next key's stream, another tenant's session, never brings."""
    _shared_run(console_proxy)
    pacer = _turn_then_key_change(console, fake_upstream, OTHER)
    try:
        done = console.page.locator("[data-testid=assistant-message][data-state=done]")
        done.filter(has_text="Theirs.").wait_for(timeout=3000)
    finally:
        pacer.allow(10)  # the last key's turn ends


def test_the_next_keys_message_waits_for_the_last_keys_turn_in_their_tenants_session(
    console: Page, console_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """Keys of one tenant share its sessions: a turn the last key sent still streams when
    SAME signs in, and SAME's message waits for it, so the history it resends holds that
    turn's reply. Sent at once, without it, the history reads as an edit of the session's,
    and the reply stored meanwhile is superseded."""
    started(console_proxy, "shared-run")
    pacer = _turn_then_key_change(console, fake_upstream, SAME)
    pacer.allow(10)  # the last key's turn ends
    done = console.page.locator("[data-testid=assistant-message][data-state=done]")
    done.filter(has_text="Ours.").wait_for()
    sent = fake_upstream.bodies()[-1]["messages"]
    assert [m["content"] for m in sent[-3:]] == ["one", ANSWER, "two"]
