"""proxy.httpserver: a response's head goes out with its first body bytes, and never later
than the end of the event-loop turn it was written in.

The first tests drive uvicorn's real httptools protocol over a transport that records each
``write`` (the count of socket writes is what the module changes, and a client cannot see it
on a stream socket). The last one serves over a real loopback socket.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from proxy.httpserver import CoalescingHttpToolsProtocol, HeadHoldingTransport

REQUEST = b"GET /x HTTP/1.1\r\nhost: test\r\n\r\n"


class _Recorder(asyncio.Transport):
    """The socket side of a connection: what was written, in how many writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def write_eof(self) -> None:
        self.writes.append(b"<eof>")

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(
            name, default
        )

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _answer(start: dict[str, Any], *bodies: dict[str, Any], protocol: type) -> list[bytes]:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send(start)
        for body in bodies:
            await send(body)

    config = uvicorn.Config(app, lifespan="off", log_config=None)
    proto = protocol(config=config, server_state=ServerState(), app_state={},
                     _loop=asyncio.get_running_loop())
    transport = _Recorder()
    proto.connection_made(transport)
    proto.data_received(REQUEST)
    for _ in range(200):
        await asyncio.sleep(0)
        if proto.cycle is not None and proto.cycle.response_complete:
            break
    await asyncio.sleep(0)
    return transport.writes


START = {"type": "http.response.start", "status": 200,
         "headers": [(b"content-type", b"application/json"), (b"content-length", b"2")]}
BODY = {"type": "http.response.body", "body": b"{}"}


async def test_head_and_body_leave_in_one_write() -> None:
    writes = await _answer(START, BODY, protocol=CoalescingHttpToolsProtocol)
    assert len(writes) == 1
    assert writes[0].startswith(b"HTTP/1.1 200 OK\r\n") and writes[0].endswith(b"\r\n\r\n{}")


async def test_plain_uvicorn_writes_them_apart() -> None:
    """Why the module exists; if uvicorn starts joining them itself, it can go."""
    writes = await _answer(START, BODY, protocol=HttpToolsProtocol)
    assert len(writes) == 2 and writes[1] == b"{}"


async def test_chunks_after_the_first_are_written_as_they_come() -> None:
    start = {"type": "http.response.start", "status": 200,
             "headers": [(b"content-type", b"text/event-stream")]}
    chunks = [{"type": "http.response.body", "body": b"data: %d\n\n" % i, "more_body": True}
              for i in range(3)]
    writes = await _answer(start, *chunks, {"type": "http.response.body", "body": b""},
                           protocol=CoalescingHttpToolsProtocol)
    assert len(writes) == 4  # head + chunk 0, chunks 1 and 2, the closing zero-length chunk
    assert writes[0].startswith(b"HTTP/1.1 200 OK") and writes[0].endswith(b"data: 0\n\n\r\n")
    assert writes[1:3] == [b"9\r\ndata: 1\n\n\r\n", b"9\r\ndata: 2\n\n\r\n"]
    assert writes[3] == b"0\r\n\r\n"


async def test_a_head_alone_is_sent_at_the_end_of_the_turn() -> None:
    transport = _Recorder()
    holder = HeadHoldingTransport(transport, asyncio.get_running_loop())
    holder.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
    assert transport.writes == []  # held for the rest of this turn ...
    await asyncio.sleep(0)
    assert transport.writes == [b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n"]
    holder.write(b"later")  # ... and nothing is held after it
    assert transport.writes[-1] == b"later"


async def test_close_sends_a_held_head_first() -> None:
    transport = _Recorder()
    holder = HeadHoldingTransport(transport, asyncio.get_running_loop())
    holder.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n")
    holder.close()
    assert transport.writes == [b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n"]
    assert transport.closed
    await asyncio.sleep(0)  # the cancelled end-of-turn flush writes nothing more
    assert len(transport.writes) == 1


async def test_every_way_of_writing_keeps_the_order() -> None:
    """writelines joins a held head like write does; write_eof sends it before the EOF."""
    transport = _Recorder()
    holder = HeadHoldingTransport(transport, asyncio.get_running_loop())
    holder.write(b"HTTP/1.1 200 OK\r\n\r\n")
    holder.writelines([b"a", b"b"])
    holder.write(b"HTTP/1.1 200 OK\r\n\r\n")
    holder.write_eof()
    assert transport.writes == [b"HTTP/1.1 200 OK\r\n\r\nab", b"HTTP/1.1 200 OK\r\n\r\n",
                                b"<eof>"]


def test_a_stream_head_reaches_the_client_before_its_first_chunk_over_a_socket() -> None:
    """Over loopback: the client reads the head while the app still waits for its first
    chunk (a stream is never held back for a body that has not come)."""
    release = threading.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        deadline = time.monotonic() + 10
        while not release.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        await send({"type": "http.response.body", "body": b"data: 1\n\n"})

    config = uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off", log_config=None,
                            http=CoalescingHttpToolsProtocol)
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.005)
        port = server.servers[0].sockets[0].getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(REQUEST)
            head = b""
            while b"\r\n\r\n" not in head:
                data = sock.recv(4096)
                assert data, "connection closed before the head"
                head += data
            assert head.startswith(b"HTTP/1.1 200 OK") and b"data: 1" not in head
            release.set()
            rest = head.split(b"\r\n\r\n", 1)[1]
            while b"data: 1" not in rest:
                rest += sock.recv(4096)
    finally:
        release.set()
        server.should_exit = True
        thread.join(timeout=10)

