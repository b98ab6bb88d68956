"""The private parts of uvicorn that a stop reads (proxy/server.py's reaper of unread
connections, its signals raised again; the server serving an app, whose stop begins its
grace: proxy/stopping.py), and sse-starlette's process-wide stop left off, on the installed
versions and on
both of uvicorn's HTTP protocols (httptools, which ``serve`` takes when it is installed, and
h11, without it): an upgrade that renames one fails here rather than silently leaving a
frozen client's connection to hold the stop until the orchestrator's SIGKILL."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from sse_starlette.sse import AppStatus
from starlette.applications import Starlette
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from proxy import server as server_mod, stopping
from proxy.server import _Server


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 1), "sockname": ("127.0.0.1", 2)}.get(name, default)

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 0

    def close(self) -> None:
        self.closing = True

    def write(self, data: Any) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


@pytest.mark.parametrize("protocol", [HttpToolsProtocol, H11Protocol], ids=["httptools", "h11"])
def test_the_reaper_reads_what_each_http_protocol_has(protocol: Any) -> None:
    async def check() -> None:
        config = uvicorn.Config(app=lambda scope, receive, send: None)
        config.load()
        srv = _Server(config)
        conn = protocol(config, srv.server_state, app_state={})
        transport = _Transport()
        conn.connection_made(transport)
        assert conn in srv.server_state.connections  # the set the stop waits on
        assert conn.transport is transport
        assert server_mod._unread(conn) is False  # an idle keep-alive connection
        conn.pause_writing()  # the transport's call past its high-water mark
        assert conn.flow.write_paused is True
        assert server_mod._unread(conn) is True
        conn.resume_writing()
        transport.closing = True  # closed with bytes unsent
        assert server_mod._unread(conn) is True
        conn.connection_lost(None)
        assert conn not in srv.server_state.connections

    asyncio.run(check())


def test_serve_takes_httptools_here() -> None:
    """The protocol ``serve`` runs (uvicorn's ``auto``) is the one the integration tests
    exercise; h11's is checked by name above."""
    config = uvicorn.Config(app=lambda scope, receive, send: None)
    config.load()
    assert config.http_protocol_class is HttpToolsProtocol


def test_uvicorn_keeps_the_signals_it_raises_again_in_a_list() -> None:
    """``_Server._raise_later`` takes a SIGTERM out of it after a second Ctrl-C."""
    srv = _Server(uvicorn.Config(app=lambda scope, receive, send: None))
    srv.started = True
    srv.handle_exit(signal.SIGTERM, None)
    assert srv._captured_signals == [signal.SIGTERM]
    srv.handle_exit(signal.SIGINT, None)
    assert srv._captured_signals == [signal.SIGINT] and srv.stopped_by == signal.SIGTERM
    AppStatus.should_exit = False  # the stop sets it process-wide (sse_starlette)
    logging.getLogger("uvicorn.error").removeFilter(server_mod._no_errors)  # as serve does


def test_uvicorns_signal_stops_its_server_alone() -> None:
    """uvicorn's ``Server.handle_exit`` sets that server's ``should_exit`` (what
    ``stopping.watch_stop`` reads of its app's server) and, sse-starlette's own stop turned
    off (``proxy.stopping``), not its process-wide ``AppStatus.should_exit``, which ended
    every server's event streams in the process: a release that drops the switch fails
    here."""
    assert stopping.POLL_SECONDS  # imported: the switch is set
    for server_class in (uvicorn.Server, _Server):
        srv = server_class(uvicorn.Config(app=lambda scope, receive, send: None))
        try:
            srv.handle_exit(signal.SIGTERM, None)
            assert srv.should_exit and not AppStatus.should_exit
        finally:
            AppStatus.should_exit = False


async def test_the_stop_finds_the_uvicorn_server_serving_its_app() -> None:
    """``stopping.serving`` reads a real ``uvicorn.Server``: its ``serve`` awaited on the
    loop (here under another coroutine, as ``uvicorn.workers.UvicornWorker`` awaits it), its
    ``lifespan.state`` the app's lifespan state, its ``should_exit``, its ``started`` (the
    search's end): a release that renames one fails here, not as streams that outlast a
    stop."""
    clock = stopping.StopClock(grace=5)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        watcher = asyncio.create_task(stopping.watch_stop(clock))
        yield {"stop": clock}
        await asyncio.wait_for(watcher, timeout=2)  # it ends as it begins the clock

    async def worker(srv: uvicorn.Server) -> None:  # as gunicorn's uvicorn worker awaits it
        await srv.serve()

    config = uvicorn.Config(Starlette(lifespan=lifespan), port=0, log_config=None)
    srv = uvicorn.Server(config)
    serving = asyncio.create_task(worker(srv))
    try:
        while not srv.started:
            await asyncio.sleep(0.01)
        assert stopping.serving(clock) is srv
        assert clock.deadline is None
        srv.should_exit = True  # what its handle_exit sets (no signal: uvicorn raises it again)
        await asyncio.wait_for(serving, timeout=5)
        assert clock.deadline is not None
    finally:
        srv.should_exit = True
        await serving
