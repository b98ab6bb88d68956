"""A stop (SIGTERM) with an event stream open whose client reads nothing, the socket's
buffers full (a frozen console): the stream ends at the stop, but its connection, closed
with bytes still unsent, stayed open until the client read them, and uvicorn's stop waits
for every connection: the process never exited before the orchestrator's SIGKILL, which
skipped the lifespan's cleanup (the embedded PostgreSQL left running). A chat stream whose
client stopped reading held it the same way, its send waiting on the client. The stop now
cuts such a connection once its client has read nothing for ``server.UNREAD_SECONDS``
(proxy/server.py)."""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from proxy import server as server_mod
from proxy.settings import Settings
from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, Records
from tests.integration.api.test_events import chat, user
from tests.integration.api.test_events_stalled_client import _flood
from tests.integration.conftest import column


class _Serving(server_mod._Server):
    def install_signal_handlers(self) -> None:  # running in a thread; the test signals
        pass


@pytest.fixture(params=["httptools", "h11"])
def served(settings: Settings, request: pytest.FixtureRequest) -> Iterator[ProxyServer]:
    """A proxy run by ``serve``'s own server class, in a thread, on each of uvicorn's HTTP
    protocols (``serve`` takes httptools, installed with uvicorn's standard extra; h11
    without it)."""
    proxy = ProxyServer(settings)
    assert not proxy._server.config.loaded
    proxy._server.config.http = request.param
    proxy._server = _Serving(proxy._server.config)
    proxy._thread = threading.Thread(target=proxy._server.run, daemon=True)
    try:
        proxy.start()
        protocol = proxy._server.config.http_protocol_class.__name__
        assert protocol == {"httptools": "HttpToolsProtocol", "h11": "H11Protocol"}[request.param]
        yield proxy
    finally:
        proxy.stop()


def test_a_stop_cuts_an_event_streams_unread_bytes_after_a_bound(
    served: ProxyServer, records: Records, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_mod, "UNREAD_SECONDS", 0.5)
    chat(served.origin, "frozen", [user("u1")])
    with _slow_reader(served) as client:
        client.sendall(
            b"GET /v1/sessions/frozen/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Authorization: Bearer sk-test-client\r\n\r\n"
        )
        deadline = time.monotonic() + 5
        while not any(k[1] == "frozen" for k in served.state("bus")._subs):
            assert time.monotonic() < deadline, "the stream never subscribed"
            time.sleep(0.01)
        key = next(k for k in served.state("bus")._subs if k[1] == "frozen")
        _flood(served, key, 900)  # past the kernel's buffers, and unread
        while not _paused(served):  # the stream wrote them: a stop now leaves bytes unsent
            assert time.monotonic() < deadline + 5, "the stream never filled the buffers"
            time.sleep(0.02)
        _stop_within(served, 3)
    said = [r.getMessage() for r in records.records if r.levelno >= logging.WARNING]
    assert said == ["stopping: cut 1 connection(s) whose client read nothing for 0.5 s"], said


@contextlib.contextmanager
def _slow_reader(served: ProxyServer) -> Iterator[socket.socket]:
    """A client socket connected to ``served`` whose small receive buffer fills at once, so
    the proxy's writes wait on what it reads."""
    host, port = served.origin.removeprefix("http://").split(":")
    with socket.socket() as client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.connect((host, int(port)))
        yield client


def _post_chat(client: socket.socket, session: str, *, stream: bool) -> None:
    body = json.dumps(
        {"model": "gpt-fake", "stream": stream, "messages": [{"role": "user", "content": "go"}]}
    ).encode()
    client.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Authorization: Bearer sk-test-client\r\nx-session-id: %s\r\n"
        b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
        % (session.encode(), len(body), body)
    )


def _stop_within(served: ProxyServer, seconds: float) -> None:
    """SIGTERM ``served`` and see its stop end within ``seconds``."""
    stopped = time.monotonic()
    served._server.handle_exit(signal.SIGTERM, None)
    served._thread.join(timeout=6)
    took = time.monotonic() - stopped
    assert not served._thread.is_alive(), "the stop still waits for the unread stream"
    assert took < seconds, took


def _paused(served: ProxyServer) -> bool:
    return any(
        getattr(getattr(c, "flow", None), "write_paused", False)
        for c in list(served._server.server_state.connections)
    )


def test_a_stop_cuts_a_chat_stream_whose_client_reads_nothing_after_a_bound(
    served: ProxyServer,
    fake_upstream: FakeUpstream,
    db_dsn: str,
    records: Records,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A chat stream's client that stopped reading (a paused debugger, a frozen process) held
    the stop as long as it held its socket: the send waits on it with no end of its own."""
    monkeypatch.setattr(server_mod, "UNREAD_SECONDS", 0.5)
    fake_upstream.script(reply("y" * 8_000_000, chunks=4000))  # past the kernel's buffers
    with _slow_reader(served) as client:
        _post_chat(client, "frozen-chat", stream=True)
        deadline = time.monotonic() + 10
        while not _paused(served):  # the proxy's writes wait on the client
            assert time.monotonic() < deadline, "the stream never filled the buffers"
            time.sleep(0.02)
        _stop_within(served, 3)
    said = [r.getMessage() for r in records.records if r.levelno >= logging.WARNING]
    assert any("stopping: cut 1 connection(s)" in m for m in said), said
    # the cut reply is not stored, the user's message is, and the session is free
    stored = "SELECT role FROM messages WHERE session_id = 'frozen-chat' ORDER BY pos"
    assert column(db_dsn, stored) == ["user"]


def _unsent(served: ProxyServer) -> int:
    return sum(
        c.transport.get_write_buffer_size()
        for c in list(served._server.server_state.connections)
        if getattr(c, "transport", None) is not None
    )


def test_a_stop_waits_for_a_large_answer_its_client_reads_slowly(
    served: ProxyServer,
    fake_upstream: FakeUpstream,
    records: Records,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An answer not streamed is written at once: the writes stay paused (the transport
    closing with bytes unsent, once the stop closes it) for as long as the client takes to
    read it all, so a client on a slow link reading steadily was cut as a frozen one."""
    monkeypatch.setattr(server_mod, "UNREAD_SECONDS", 0.3)
    fake_upstream.script(reply("y" * 3_000_000))
    with _slow_reader(served) as client:
        _post_chat(client, "slow-link", stream=False)
        deadline = time.monotonic() + 10
        while not _paused(served) or _unsent(served) < 100_000:  # the rest waits on the client
            assert time.monotonic() < deadline, "the answer never filled the buffers"
            time.sleep(0.02)
        served._server.handle_exit(signal.SIGTERM, None)
        got, slow = b"", time.monotonic() + 1.0
        while chunk := client.recv(8192 if time.monotonic() < slow else 1 << 20):
            got += chunk
            if time.monotonic() < slow:  # a second at some 400 KB/s, then at once
                time.sleep(0.02)
        served._thread.join(timeout=6)
        assert not served._thread.is_alive()
    said = [r.getMessage() for r in records.records if r.levelno >= logging.WARNING]
    assert not any("stopping: cut" in m for m in said), said
    assert b"y" * 3_000_000 in got and got.endswith(b"}}")  # the whole answer, not cut
