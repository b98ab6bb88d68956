"""The access line of a request whose client left before its last byte says so: a stream the
user stopped has the 200 its answer began with, and its line read as one answered whole, so
an operator could not count stopped answers (nginx's 499 comes too late for a stream)."""

from __future__ import annotations

import httpx

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, Records

BODY = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def _headers(sid: str) -> dict[str, str]:
    return {"authorization": "Bearer sk-test-client", "x-session-id": sid}


def test_a_stream_its_client_left_is_marked_on_its_access_line(
    proxy: ProxyServer, fake_upstream: FakeUpstream, records: Records
) -> None:
    fake_upstream.script(reply("one two three four five six", chunks=6, chunk_delay=0.3))
    url = f"{proxy.origin}/v1/chat/completions"
    with httpx.stream("POST", url, json=BODY, headers=_headers("stopped"), timeout=10) as resp:
        assert resp.status_code == 200
        next(resp.iter_lines())  # the answer began; the user stops it
    (line,) = records.access(1)
    assert line["status"] == 200
    assert line["client_gone"] is True


def test_a_stream_read_to_its_end_is_not_marked(
    proxy: ProxyServer, fake_upstream: FakeUpstream, records: Records
) -> None:
    fake_upstream.script(reply("whole", chunks=3))
    url = f"{proxy.origin}/v1/chat/completions"
    resp = httpx.post(url, json=BODY, headers=_headers("whole"), timeout=10)
    assert resp.status_code == 200 and "[DONE]" in resp.text
    (line,) = records.access(1)
    assert "client_gone" not in line


def test_a_stream_its_client_closed_at_done_is_not_marked(
    proxy: ProxyServer, fake_upstream: FakeUpstream, records: Records
) -> None:
    fake_upstream.script(reply("whole", chunks=3))
    url = f"{proxy.origin}/v1/chat/completions"
    with httpx.stream("POST", url, json=BODY, headers=_headers("at-done"), timeout=10) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():  # a client stops at [DONE] and closes the connection
            if line == "data: [DONE]":
                break
    (line,) = records.access(1)
    assert "client_gone" not in line
