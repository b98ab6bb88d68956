"""A session held by a request in flight, for the tests of what waits for it
(test_client_disconnect.py, test_session_ops_client_gone.py)."""

from __future__ import annotations

import threading
from typing import Any

import httpx

from tests.fakes.replies import Pacer, reply
from tests.fakes.upstream import FakeUpstream

__all__ = ["HEADERS", "hold"]

HEADERS = {"authorization": "Bearer sk-test-client"}


def hold(origin: str, sid: str, fake: FakeUpstream) -> tuple[threading.Thread, list[Any], Pacer]:
    """A first request on ``sid``, streamed on a thread (``out`` gets its response), whose
    provider's answer waits for the test (``pacer.allow``): it makes the session and holds it
    until its answer (user and assistant message) is stored. Returns once the request is at
    the provider, the fake's requests counted before it can arrive: counted after, one
    already there would be waited for as the next."""
    pacer = Pacer()  # the answer stops after its first frame until the test lets it end
    fake.script(reply("slow answer", chunks=2, pacer=pacer))
    out: list[Any] = []
    body = {"model": "gpt-fake", "messages": [{"role": "user", "content": "first"}], "stream": True}

    def post() -> None:
        with httpx.Client(base_url=origin, headers=HEADERS, timeout=10) as c:
            out.append(c.post("/v1/chat/completions", json=body, headers={"x-session-id": sid}))

    holder = threading.Thread(target=post)
    asked = len(fake.requests)
    holder.start()
    fake.wait_for_requests(asked + 1)  # at the provider: the session is held
    return holder, out, pacer
