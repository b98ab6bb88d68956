"""A stop (SIGTERM) with a chat stream whose provider answers slowly: uvicorn's stop waits
for every request, so the stream held the process open for as long as the provider went
on, without bound, and an orchestrator's SIGKILL cut it with nothing of it stored. The stop
now gives the streams ``CASCADE_STOP_GRACE_SECONDS`` (``proxy/stopping.py``); past it a
stream still open ends with an OpenAI-shaped error frame and ``[DONE]``, and its turn is
stored, as a stream that broke off is."""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from proxy.settings import Settings
from tests.fakes.replies import Pacer, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, wait_for
from tests.integration.api.sessions_helpers import live_messages

HEADERS = {"authorization": "Bearer sk-test-client"}
GRACE = 0.5


@pytest.fixture
def proxy(settings: Settings) -> Iterator[ProxyServer]:
    server = ProxyServer(settings.model_copy(update={"stop_grace_seconds": GRACE})).start()
    try:
        yield server
    finally:
        server.stop()


def _frames(raw: bytes) -> list[Any]:
    out: list[Any] = []
    for event in raw.split(b"\n\n"):
        if event.startswith(b"data: "):
            data = event[6:].decode()
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


@contextlib.contextmanager
def _streaming(origin: str, sid: str, content: str) -> Iterator[httpx.Response]:
    body = {"model": "gpt-fake", "messages": [{"role": "user", "content": content}], "stream": True}
    with httpx.Client(base_url=origin, headers=HEADERS, timeout=10) as http:
        sent = http.stream("POST", "/v1/chat/completions", json=body, headers={"x-session-id": sid})
        with sent as resp:
            assert resp.status_code == 200
            yield resp


@contextlib.contextmanager
def _feeding(pacer: Pacer, on: bool) -> Iterator[None]:
    """With ``on``, a provider that goes on sending, a frame every 50 ms: slower than the
    grace allows for its answer, but never silent."""
    done = threading.Event()

    def feed() -> None:
        while not done.is_set():
            pacer.allow()
            time.sleep(0.05)

    if on:
        threading.Thread(target=feed, daemon=True).start()
    try:
        yield
    finally:
        done.set()


@pytest.mark.parametrize("silent", [True, False], ids=["provider-silent", "provider-sending"])
def test_a_stop_ends_a_slow_stream_after_its_grace(
    proxy: ProxyServer, fake_upstream: FakeUpstream, silent: bool
) -> None:
    pacer = Pacer(patience=30)
    words = [f"w{i} " for i in range(400)]
    fake_upstream.script(reply("".join(words), chunks=len(words), pacer=pacer))
    got = bytearray()
    with _streaming(proxy.origin, "slow", "tell me a long story") as resp:
        chunks = resp.iter_raw()
        while b"data: " not in got:  # the provider's first frame reached the client
            got += next(chunks)
        # the stop's signal, as uvicorn takes it (sse-starlette's hook sets its flag)
        proxy._server.handle_exit(signal.SIGTERM, None)
        stopped_at = time.monotonic()
        with _feeding(pacer, not silent):
            for piece in chunks:
                got += piece
        took = time.monotonic() - stopped_at
    frames = _frames(bytes(got))
    assert frames[-1] == "[DONE]", frames[-3:]
    error = frames[-2]["error"]
    assert error["code"] == "server_stopping" and error["type"] == "server_error", error
    assert GRACE <= took < GRACE + 2, took
    assert not pacer.expired
    proxy._thread.join(timeout=10)
    assert not proxy._thread.is_alive(), "the stop did not end"


def test_the_stopped_turn_is_stored(
    proxy: ProxyServer, fake_upstream: FakeUpstream, settings: Settings
) -> None:
    fake_upstream.script(reply("one two three", pacer=Pacer(patience=30)))
    with _streaming(proxy.origin, "kept", "keep me") as resp:
        proxy._server.handle_exit(signal.SIGTERM, None)
        raw = b"".join(resp.iter_raw())
    assert _frames(raw)[-1] == "[DONE]"
    proxy._thread.join(timeout=10)
    # a new replica on the same database reads the session the stopped one stored
    again = ProxyServer(settings).start()
    try:
        with httpx.Client(base_url=again.origin, headers=HEADERS, timeout=10) as http:
            stored = wait_for(lambda: live_messages(http, "kept"))
            assert stored == [{"role": "user", "content": "keep me"}], stored
    finally:
        again.stop()
