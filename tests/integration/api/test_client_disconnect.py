"""A request whose client disconnects before its answer starts stops (audit 24).

A request that waits for its session (queued on this replica behind another request, or
polling the lease another replica holds) and whose client gives up never reaches the
provider. It says so in one log line, beside its access line's 499 (a stream's 200: its
keep-alive comments began one interval in, and the client leaves after the first).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.session_id import tenant_from_bearer
from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, Records, StartProxy, wait_for
from tests.integration.api.held_session import HEADERS, hold

TENANT = tenant_from_bearer(HEADERS["authorization"])


def _user(*texts: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": t} for t in texts]


def _post(
    origin: str, sid: str, messages: list[dict[str, Any]], *, stream: bool = False, **kw: Any
) -> httpx.Response:
    with httpx.Client(base_url=origin, headers=HEADERS, timeout=kw.pop("timeout", 10)) as c:
        body = {"model": "gpt-fake", "messages": messages, "stream": stream}
        return c.post("/v1/chat/completions", json=body, headers={"x-session-id": sid})


def _give_up(origin: str, sid: str, messages: list[dict[str, Any]], *, stream: bool) -> None:
    """The client closes its connection while its request waits: on its read timeout, or,
    for a stream, which keep-alive comments fill while it waits, after the first of them."""
    if not stream:
        with pytest.raises(httpx.ReadTimeout):  # the client's timeout: it closes the connection
            _post(origin, sid, messages, timeout=0.4)
        return
    body = {"model": "gpt-fake", "messages": messages, "stream": True}
    with httpx.Client(base_url=origin, headers=HEADERS, timeout=10) as c:
        sent = c.stream("POST", "/v1/chat/completions", json=body, headers={"x-session-id": sid})
        with sent as resp:
            assert resp.status_code == 200
            assert next(resp.iter_raw()).startswith(b": keep-alive")


def _asked(fake: FakeUpstream) -> list[str]:
    return [b["messages"][-1]["content"] for b in fake.bodies()]


def _went_away(records: Records, why: str, *, stream: bool) -> None:
    """One line says the client went away, and the request's access line has 499 (a stream
    the client left after its 200 and keep-alives began: 200, the status it got)."""
    lines = [r.getMessage() for r in records.records if "client went away" in r.getMessage()]
    assert len(lines) == 1 and why in lines[0], lines
    statuses = [a["status"] for a in records.access(2)]
    assert (200 if stream else 499) in statuses, statuses
    assert statuses.count(200) == (2 if stream else 1), statuses


def _noticed(records: Records) -> None:
    """Until the proxy logged that the waiting client went away: only then may the holder
    end, or the waiter, not told yet, could take the session it is leaving."""

    def went() -> bool:
        return any("client went away" in r.getMessage() for r in records.records)

    assert wait_for(went, timeout=10), "the proxy never noticed the client went away"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_request_whose_client_gives_up_in_the_queue_never_reaches_the_provider(
    proxy: ProxyServer, fake_upstream: FakeUpstream, records: Records, stream: bool
) -> None:
    holder, out, pacer = hold(proxy.origin, "queued", fake_upstream)
    _give_up(proxy.origin, "queued", _user("first", "second"), stream=stream)
    _noticed(records)
    # it left the queue: only the holder is in it
    assert wait_for(lambda: proxy.queued(TENANT, "queued") == 1), proxy.queued(TENANT, "queued")
    pacer.allow(10)
    holder.join()
    assert out[0].status_code == 200
    time.sleep(0.5)  # without the watch, the queued request goes upstream as the first ends
    assert _asked(fake_upstream) == ["first"]
    _went_away(records, "waited for the session; the provider was not called", stream=stream)
    # the session's next request goes through
    fake_upstream.script(reply("third answer"))
    again = _post(proxy.origin, "queued", _user("first", "third"))
    assert again.json()["choices"][0]["message"]["content"] == "third answer"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_request_whose_client_gives_up_polling_another_replicas_lease_never_reaches_it(
    start_proxy: StartProxy,
    config_path: Path,
    fake_upstream: FakeUpstream,
    records: Records,
    stream: bool,
) -> None:
    a, b = start_proxy(config_path), start_proxy(config_path)
    holder, out, pacer = hold(a.origin, "polled", fake_upstream)
    _give_up(b.origin, "polled", _user("first", "second"), stream=stream)
    _noticed(records)
    pacer.allow(10)
    holder.join()
    assert out[0].status_code == 200
    time.sleep(1.0)  # a poll lands at most 0.5 s after the lease is freed
    assert _asked(fake_upstream) == ["first"]
    _went_away(records, "waited for the session; the provider was not called", stream=stream)
