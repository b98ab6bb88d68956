"""A streamed request whose client hangs up before the provider's headers came, within the
first keep-alive interval (15 s by default): nothing listened for the hang-up until the
proxy's response began at the interval's end, so the provider went on answering nobody and
the session stayed held that long, delaying the client's retry. The wait is now watched: the
call is cancelled and the session freed at once, logged as a 499."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.fakes.replies import Pacer, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import Records, StartProxy, wait_for, write_config


def test_a_client_gone_before_the_providers_headers_frees_the_session_at_once(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path, records: Records
) -> None:
    proxy = start_proxy(write_config(tmp_path / "a.json", fake_upstream.url), keepalive_seconds=30)
    held = Pacer(40, first=True)  # the provider thinks until the test lets it answer
    fake_upstream.script(reply("late", pacer=held))
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"authorization": "Bearer sk-test-client", "x-session-id": "gone-early"}
    with httpx.Client(base_url=proxy.origin, headers=headers) as http:
        fake_upstream_seen = len(fake_upstream.requests)
        with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes
            http.post("/v1/chat/completions", json=body, timeout=httpx.Timeout(10, read=0.5))
        assert len(fake_upstream.requests) == fake_upstream_seen + 1
        left = time.monotonic()

        assert wait_for(lambda: fake_upstream.disconnects, timeout=5) == [0]
        fake_upstream.script(reply("again"))
        again = http.post("/v1/chat/completions", json={**body, "stream": False}, timeout=5)
        assert again.json()["choices"][0]["message"]["content"] == "again"
        assert time.monotonic() - left < 5  # not the 30 s keep-alive interval
    held.allow(100)
    access = records.access(2)
    assert access[0]["status"] == 499, access
    gone = [r.getMessage() for r in records.errors() if "went away" in r.getMessage()]
    assert len(gone) == 1, gone
