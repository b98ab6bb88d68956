"""The session API's operations take their turn in the replica's queue (README, Decisions).

Reset, delete and branch wait for the request in flight on their session, not for the
session to fall idle: a request that arrives on the same replica while one of them waits
queues behind it, as it would behind another request. Polling the lease alone, the
operation lost every race to an agent's back-to-back requests (the next request takes the
lease the moment the last one frees it) and waited until the agent paused.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from proxy.session_id import tenant_from_bearer
from tests.fakes.replies import Pacer, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, wait_for
from tests.integration.api.sessions_helpers import chat, settled, user


@pytest.mark.parametrize("action", ["reset", "delete", "branch"])
def test_a_request_arriving_while_an_operation_waits_goes_after_it(
    action: str, http: httpx.Client, proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    chat(http, [user("one")], sid="queued")
    settled(http, "queued", 2)
    # Each answer's frames after the first wait for the test: the first request stays in
    # flight until the operation and the second request are seen queued behind it, and the
    # second request's answer ends only once the operation's client has its reply.
    first_pacer, second_pacer = Pacer(), Pacer()
    fake_upstream.script(
        reply("first answer", chunks=6, pacer=first_pacer),
        reply("second answer", chunks=2, pacer=second_pacer),
    )
    first = [user("one"), {"role": "assistant", "content": "ok"}, user("two")]
    second = [user("three")]
    done: dict[str, float] = {}

    def stream(name: str, history: list[dict[str, object]]) -> None:
        with httpx.Client(base_url=proxy.origin, headers=http.headers, timeout=10) as c:
            chat(c, history, sid="queued", stream=True)
        done[name] = time.monotonic()

    def operate() -> None:
        with httpx.Client(base_url=proxy.origin, headers=http.headers, timeout=10) as c:
            if action == "reset":
                resp = c.post("/v1/sessions/queued/reset")
            elif action == "delete":
                resp = c.delete("/v1/sessions/queued")
            else:
                resp = c.post("/v1/sessions/queued/branch", json={"id": "queued-copy"})
        assert resp.status_code == 200, resp.text
        done["operation"] = time.monotonic()

    workers = [threading.Thread(target=stream, args=("first", first))]
    workers[0].start()
    fake_upstream.wait_for_requests(2)  # the first request is under way upstream
    workers.append(threading.Thread(target=operate))
    workers[1].start()
    # the operation waits for the first request, in the session's queue
    tenant = tenant_from_bearer(http.headers["authorization"])
    assert wait_for(lambda: proxy.queued(tenant, "queued") == 2, timeout=10)
    workers.append(threading.Thread(target=stream, args=("second", second)))
    workers[2].start()
    assert wait_for(lambda: proxy.queued(tenant, "queued") == 3, timeout=10)
    assert not done  # all three still wait on the first answer
    first_pacer.allow(20)
    # The second request waits for the operation: were it let through first, the operation
    # would wait for its answer, held here, and its reply would never come.
    assert wait_for(lambda: "operation" in done, timeout=10), done
    second_pacer.allow(20)
    for w in workers:
        w.join(15)
    assert not first_pacer.expired and not second_pacer.expired
    assert set(done) == {"first", "operation", "second"}
    # The operation ran after the first request's step was stored: the session (or the copy)
    # shows it below. Its client's end is no witness: a stream's body ends after its step is
    # stored, so the operation's reply may reach its own client first.
    assert done["operation"] < done["second"]
    # The second request ran after the operation: its history is what the session holds.
    view = settled(http, "queued", 2)
    assert view["message_count"] == 2
    if action == "branch":  # the copy holds the first request's step, not the second's
        assert settled(http, "queued-copy", 4)["message_count"] == 4
