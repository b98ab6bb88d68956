"""A stream whose client stopped reading (a frozen console, a socket nobody drains) is
ended by the server once a frame has waited ``SEND_TIMEOUT_SECONDS`` to go out: it holds no
task, subscription or queue of events for good (nor keeps its session watched), says so in
one warning, not uvicorn's error, and the connection closes once what was sent is read: the
client, reading again, meets the end and reconnects, replaying what it missed."""

from __future__ import annotations

import logging
import socket
import threading
import time

import pytest

from proxy.api import events as events_api
from proxy.bus import BusEvent
from proxy.cascade.types import EVICTED
from tests.integration.api.conftest import ProxyServer, Records
from tests.integration.api.test_events import chat, user

FRAME_CHARS = 7000


def _flood(server: ProxyServer, key: tuple[str, str], n: int) -> None:
    """Hand ``n`` big transient events to the session's subscribers, a few per turn of the
    proxy's loop: more than a socket's buffers hold."""
    bus = server.state("bus")
    loop = bus._task.get_loop()
    done = threading.Event()

    def deliver(i: int) -> None:
        for _ in range(i, min(n, i + 100)):
            bus._deliver(key, BusEvent(EVICTED, {"session_id": key[1], "x": "y" * FRAME_CHARS}))
        if i + 100 < n:
            loop.call_soon(deliver, i + 100)
        else:
            done.set()

    loop.call_soon_threadsafe(deliver, 0)
    assert done.wait(5)


def test_a_client_that_reads_nothing_is_closed_after_the_send_timeout(
    proxy: ProxyServer, records: Records, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events_api, "SEND_TIMEOUT_SECONDS", 0.5)
    chat(proxy.origin, "stalled", [user("u1")])
    host, port = proxy.origin.removeprefix("http://").split(":")
    with socket.socket() as client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.connect((host, int(port)))
        client.sendall(
            b"GET /v1/sessions/stalled/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Authorization: Bearer sk-test-client\r\n\r\n"
        )
        tasks = proxy._server.server_state.tasks
        deadline = time.monotonic() + 5
        while not any(k[1] == "stalled" for k in proxy.state("bus")._subs):
            assert time.monotonic() < deadline, "the stream never subscribed"
            time.sleep(0.01)
        key = next(k for k in proxy.state("bus")._subs if k[1] == "stalled")
        _flood(proxy, key, 900)  # ~6 MB: past the kernel's buffers, and unread
        deadline = time.monotonic() + 5
        while tasks and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not tasks, "the stalled stream still runs on the server"
        assert not any(k[1] == "stalled" for k in proxy.state("bus")._subs)
        client.settimeout(5)  # the client reads again: what was sent, then the end
        while client.recv(1 << 20):
            pass
    said = [r.getMessage() for r in records.records if r.levelno >= logging.WARNING]
    assert [m for m in said if "event stream" in m or "ASGI" in m] == [
        "an event stream's client read nothing for 0.5 s; closing it (its reconnect replays)"
    ], said
