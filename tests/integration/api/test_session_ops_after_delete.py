"""Reset and branch that waited behind a delete of their session answer 404, as they would
have had they come after it: they used to answer 200 for a session no longer there, the
branch naming a new session that was never made."""

from __future__ import annotations

import logging
import threading
from typing import Any

import httpx
import pytest

from proxy.bus import EventBus
from proxy.cascade.types import SESSION_RESET
from proxy.session_id import tenant_from_bearer
from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, wait_for

HEADERS = {"authorization": "Bearer sk-test-client"}


def _in_thread(call: Any) -> tuple[threading.Thread, list[httpx.Response]]:
    out: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: out.append(call()))
    thread.start()
    return thread, out


def test_reset_and_branch_queued_behind_a_delete_find_no_session(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(reply("slow answer", first_byte_delay=1.5))
    with httpx.Client(base_url=proxy.origin, headers=HEADERS, timeout=20) as c:
        body = {"model": "gpt-fake", "messages": [{"role": "user", "content": "first"}]}
        holder, _ = _in_thread(
            lambda: c.post("/v1/chat/completions", json=body, headers={"x-session-id": "s"})
        )
        fake_upstream.wait_for_requests(1)  # the session exists and is held by its request
        deleting, deleted = _in_thread(lambda: c.delete("/v1/sessions/s"))
        # the delete waits first in the session's queue, behind the request
        tenant = tenant_from_bearer(HEADERS["authorization"])
        assert wait_for(lambda: proxy.queued(tenant, "s") == 2, timeout=20)
        resetting, reset = _in_thread(lambda: c.post("/v1/sessions/s/reset"))
        branching, branched = _in_thread(
            lambda: c.post("/v1/sessions/s/branch", json={"id": "s-copy"})
        )
        for thread in (holder, deleting, resetting, branching):
            thread.join(20)
        assert deleted[0].status_code == 200, deleted[0].text
        assert reset[0].status_code == 404, reset[0].text
        assert branched[0].status_code == 404, branched[0].text
        assert reset[0].json()["error"]["code"] == "not_found"
        assert c.get("/v1/sessions/s-copy").status_code == 404
        assert c.get("/v1/sessions/s").status_code == 404


def test_a_reset_whose_notice_to_open_streams_fails_still_answers_that_it_reset(
    http: httpx.Client,
    fake_upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The reset is done before its ``session.reset`` notice goes out; a notice that fails
    (the database gone between the two) is logged, and the answer stays the reset's."""
    fake_upstream.script(reply("hello"))
    body = {"model": "gpt-fake", "messages": [{"role": "user", "content": "first"}]}
    sid = {"x-session-id": "told"}
    assert http.post("/v1/chat/completions", json=body, headers=sid).status_code == 200
    publish = EventBus.publish

    async def failing(self: EventBus, conn: Any, **kw: Any) -> int | None:
        if kw["name"] == SESSION_RESET:
            raise ConnectionResetError("the database went away")
        return await publish(self, conn, **kw)

    monkeypatch.setattr(EventBus, "publish", failing)
    caplog.set_level(logging.WARNING, logger="cascade.sessions")
    reset = http.post("/v1/sessions/told/reset")
    assert reset.status_code == 200, reset.text
    assert reset.json() == {"id": "told", "object": "session", "reset": True}
    assert http.get("/v1/sessions/told/messages").json()["data"] == []
    assert any("told was reset" in r.getMessage() for r in caplog.records)
