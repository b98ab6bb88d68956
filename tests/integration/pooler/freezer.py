"""A loopback TCP forwarder to PostgreSQL whose open connections can be frozen: from
:meth:`Freezer.freeze` on, nothing passes either way on them and neither end hears a word,
as when a firewall or NAT between a replica and its database forgets an idle connection
(or the database's host is lost). Connections opened after it pass as usual.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from proxy.bus import RELISTENED, EventBus
from proxy.cascade.types import USAGE
from tests.integration.pooler.pgbouncer import _server

__all__ = ["Freezer", "freezer", "heard"]


class Freezer:
    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._frozen: list[asyncio.Event] = []  # one per connection, set when frozen
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0
        self.connections = 0  # connections accepted so far

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        host, port = self._target
        if host.startswith("/"):  # a socket directory
            return await asyncio.open_unix_connection(f"{host}/.s.PGSQL.{port}")
        return await asyncio.open_connection(host, port)

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, frozen: asyncio.Event
    ) -> None:
        try:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while data := await reader.read(65536):
                    if frozen.is_set():
                        await asyncio.Event().wait()  # swallowed, and nothing more: a black hole
                    writer.write(data)
                    await writer.drain()
        finally:
            writer.close()  # at the end, and when the forwarder stops

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        frozen = asyncio.Event()
        self._frozen.append(frozen)
        up_reader, up_writer = await self._open()
        for task in (
            asyncio.create_task(self._pump(reader, up_writer, frozen)),
            asyncio.create_task(self._pump(up_reader, writer, frozen)),
        ):
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def freeze(self) -> None:
        """Freeze every connection open now."""
        for frozen in self._frozen:
            frozen.set()

    def dsn(self, direct_dsn: str) -> str:
        """``direct_dsn``'s database and user, through this forwarder on 127.0.0.1."""
        parts = urlsplit(direct_dsn)
        user = parts.username or _server(direct_dsn)[2]
        password = f":{parts.password}" if parts.password else ""
        return urlunsplit(
            ("postgresql", f"{user}{password}@127.0.0.1:{self.port}", parts.path, "", "")
        )


@contextlib.asynccontextmanager
async def freezer(direct_dsn: str) -> AsyncIterator[Freezer]:
    """A :class:`Freezer` in front of ``direct_dsn``'s server, for the block."""
    host, port, _, _ = _server(direct_dsn)
    forwarder = Freezer((host, port))
    server = await asyncio.start_server(forwarder._serve, "127.0.0.1", 0)
    forwarder.port = server.sockets[0].getsockname()[1]
    try:
        yield forwarder
    finally:
        server.close()
        for task in list(forwarder._tasks):
            task.cancel()
        await asyncio.gather(*forwarder._tasks, return_exceptions=True)


async def heard(bus: EventBus, pool: asyncpg.Pool, queue: asyncio.Queue, within: float) -> bool:
    """Whether an event published now and then on session ``t``/``s`` reaches ``queue``
    (the bus's subscription to it) within ``within`` s: what a frozen listener misses."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        await bus.publish(pool, tenant="t", session_id="s", name=USAGE, data={})
        try:
            if await asyncio.wait_for(queue.get(), 0.2) is not RELISTENED:
                return True
        except TimeoutError:
            continue
    return False
