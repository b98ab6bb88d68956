"""An event stream whose client fell ``bus.MAX_QUEUED`` events behind ends, with no last
frame, and its reconnect with Last-Event-ID replays what is persisted: a client that reads
nothing holds no more than the bound on the server, and loses no stored event."""

from __future__ import annotations

import threading

import pytest

from proxy import bus as bus_module
from proxy.bus import BusEvent
from proxy.cascade.types import EVICTED
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.test_events import chat, is_usage, open_events, user

BOUND = 2


def _flood(server: ProxyServer, key: tuple[str, str], n: int) -> None:
    """Hand ``n`` transient events to the session's subscribers in one turn of the proxy's
    loop, so no stream takes one off its queue in between: what a client that stopped
    reading leaves behind."""
    bus = server.state("bus")
    done = threading.Event()

    def deliver() -> None:
        for i in range(n):
            bus._deliver(key, BusEvent(EVICTED, {"session_id": key[1], "count": i}))
        done.set()

    bus._task.get_loop().call_soon_threadsafe(deliver)
    assert done.wait(5)


def test_a_stream_too_far_behind_ends_and_its_reconnect_replays(
    proxy: ProxyServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bus_module, "MAX_QUEUED", BOUND)
    answer = chat(proxy.origin, "slow", [user("u1")])
    with open_events(proxy.origin, "slow") as events:
        last = events.until(is_usage)[-1].id
        key = next(k for k in proxy.state("bus")._subs if k[1] == "slow")
        _flood(proxy, key, BOUND + 1)
        with pytest.raises(AssertionError, match="event stream ended"):
            frame = events.next()
            raise AssertionError(f"a frame after the drop: {frame.raw}")
    chat(proxy.origin, "slow", [user("u1"), answer, user("u2")])
    with open_events(proxy.origin, "slow", last_event_id=last) as events:
        again = events.until(is_usage)
    assert [int(f.id or 0) for f in again] == list(range(int(last or 0) + 1, int(last or 0) + 4))
