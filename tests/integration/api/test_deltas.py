"""``session.message.delta.appended`` (DESIGN §6): a streamed reply's text, coalesced, only to
sessions someone watches, on this replica or another."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import asyncpg
import httpx
import pytest

from proxy.cascade.types import MESSAGE_APPENDED, MESSAGE_DELTA_APPENDED
from proxy.services.deltas import FLUSH_INTERVAL
from proxy.session_id import tenant_from_bearer
from proxy.settings import Settings
from proxy.store.events import NOTIFY_CHANNEL
from tests.fakes.replies import Pacer, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, wait_for
from tests.integration.api.test_events import Frame, chat, is_usage, open_events, user

TEXT = "".join(f"word{i} " for i in range(24))
CHUNKS = 24
CHUNK_DELAY = 0.05  # about 1.2 s of streaming, several flush intervals
TENANT = tenant_from_bearer("Bearer sk-test-client")


def _slow_reply(pacer: Pacer | None = None) -> Any:
    return reply(TEXT, chunks=CHUNKS, chunk_delay=CHUNK_DELAY, pacer=pacer)


def _stream(base_url: str, sid: str, messages: list[Any]) -> tuple[str, float]:
    """Stream a chat completion; the text the client got and how long the call took."""
    t0 = time.monotonic()
    text = []
    with (
        httpx.Client(headers={"authorization": "Bearer sk-test-client"}, timeout=10) as c,
        c.stream(
            "POST",
            f"{base_url}/v1/chat/completions",
            json={"model": "gpt-4o", "messages": messages, "stream": True},
            headers={"x-session-id": sid},
        ) as resp,
    ):
        assert resp.status_code == 200
        for line in resp.iter_lines():
            data = line.removeprefix("data: ")
            if line.startswith("data: ") and data != "[DONE]":
                for choice in json.loads(data).get("choices") or []:
                    text.append((choice.get("delta") or {}).get("content") or "")
    return "".join(text), time.monotonic() - t0


def _stored_reply(frame: Frame) -> bool:
    return frame.event == MESSAGE_APPENDED and frame.data.get("source") == "upstream"


def _deltas_then_stored(frames: list[Frame]) -> list[Frame]:
    """The delta frames before the stored reply's event (which ends ``frames``)."""
    assert _stored_reply(frames[-1])
    return [f for f in frames if f.event == MESSAGE_DELTA_APPENDED]


def test_a_watched_stream_sends_its_text_as_coalesced_deltas(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    answer = chat(proxy.origin, "live", [user("u1")])
    pacer = Pacer()  # the second half of the text waits until a delta event came
    with open_events(proxy.origin, "live") as events, ThreadPoolExecutor(1) as client:
        events.until(is_usage)  # replayed: the subscription is in place
        fake_upstream.script(_slow_reply(pacer))
        pacer.allow(CHUNKS // 2)  # after the role frame, which goes at once
        streamed = client.submit(_stream, proxy.origin, "live", [user("u1"), answer, user("u2")])
        first = events.until(lambda f: f.event == MESSAGE_DELTA_APPENDED)[-1]
        pacer.allow(CHUNKS)
        deltas = [first, *_deltas_then_stored(events.until(_stored_reply))]
        got, took = streamed.result(timeout=10)
    assert not pacer.expired
    assert got == TEXT
    # sent while the reply streamed (the rest of the text was held back until it came) ...
    assert first.data["delta"] and TEXT.startswith(first.data["delta"]), first.data
    assert len(deltas) >= 2
    assert "".join(f.data["delta"] for f in deltas) == TEXT
    # ... and coalesced: at most one event per interval, not one per chunk (CHUNK_DELAY apart)
    assert len(deltas) <= took / FLUSH_INTERVAL + 1, (len(deltas), took)
    for frame in deltas:
        assert frame.id is None  # transient: not stored, not replayed
        assert frame.data["session_id"] == "live" and frame.data["choice"] == 0
        assert frame.data["ts"]


def test_an_unwatched_stream_sends_no_notification(
    proxy: ProxyServer, settings: Settings, fake_upstream: FakeUpstream
) -> None:
    """Nobody watches: no NOTIFY at all on the channel. Once someone does, the same kind of
    stream does send its deltas (seen by the same LISTEN)."""
    seen: list[dict[str, Any]] = []

    async def listen_while(run: Any) -> None:
        conn = await asyncpg.connect(settings.database_url)
        try:
            await conn.add_listener(NOTIFY_CHANNEL, lambda *args: seen.append(json.loads(args[3])))
            await asyncio.to_thread(run)
            await asyncio.sleep(0.3)  # notifications still on their way
        finally:
            await conn.close()

    answer = chat(proxy.origin, "quiet", [user("u1")])
    fake_upstream.script(_slow_reply())

    def unwatched() -> None:
        assert _stream(proxy.origin, "quiet", [user("u1"), answer, user("u2")])[0] == TEXT

    asyncio.run(listen_while(unwatched))
    assert seen == []

    second = [user("u1"), answer, user("u2"), {"role": "assistant", "content": TEXT}, user("u3")]

    def watched() -> None:
        with open_events(proxy.origin, "quiet") as events:
            events.until(is_usage)
            fake_upstream.script(_slow_reply())
            assert _stream(proxy.origin, "quiet", second)[0] == TEXT
            events.until(_stored_reply)

    asyncio.run(listen_while(watched))
    deltas = [m for m in seen if m["n"] == MESSAGE_DELTA_APPENDED]
    assert deltas and "".join(m["d"]["delta"] for m in deltas) == TEXT


@pytest.fixture
def quick_keeper(monkeypatch: pytest.MonkeyPatch) -> Iterator[float]:
    """Replicas whose keeper refreshes every 0.3 s (a WATCH_TTL of 0.9 s) instead of 10 s."""
    monkeypatch.setattr("proxy.bus.WATCH_TTL", 0.9)
    yield 0.3


def test_another_replicas_watcher_gets_the_deltas(
    settings: Settings, fake_upstream: FakeUpstream, quick_keeper: float
) -> None:
    here = ProxyServer(settings).start()
    there = ProxyServer(settings.model_copy(update={"watch_config": False})).start()
    try:
        answer = chat(here.origin, "far", [user("u1")])
        with open_events(there.origin, "far") as events:
            events.until(is_usage)
            # within a refresh of ``here``'s keeper, it knows the session is watched there
            assert wait_for(lambda: here.watched(TENANT, "far"), timeout=10 * quick_keeper)
            fake_upstream.script(_slow_reply())
            got, _ = _stream(here.origin, "far", [user("u1"), answer, user("u2")])
            frames = events.until(_whole_reply_and_stored())
    finally:
        there.stop()
        here.stop()
    assert got == TEXT
    deltas = [f for f in frames if f.event == MESSAGE_DELTA_APPENDED]
    assert deltas and "".join(f.data["delta"] for f in deltas) == TEXT


def _whole_reply_and_stored() -> Callable[[Frame], bool]:
    """Accepts the frame by which the deltas spell the whole reply and the reply's stored
    event has come, in either order: the end of a stream waits only ``FINAL_WAIT`` for its
    last delta, so on a loaded machine that one may follow the stored event (the order is
    the one-replica test's to judge, where nothing but the machine stands between them)."""
    text: list[str] = []
    stored = False

    def done(frame: Frame) -> bool:
        nonlocal stored
        if frame.event == MESSAGE_DELTA_APPENDED:
            text.append(frame.data["delta"])
        stored = stored or _stored_reply(frame)
        return stored and "".join(text) == TEXT

    return done
