"""A loopback server that answers with bytes a test writes itself (framing, stalls, breaks).

For the cases ``tests/fakes/upstream.py`` cannot script because uvicorn frames its answers:
a head followed by a body that never comes, a sender that must feel back-pressure.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable

__all__ = ["Reader", "Writer", "Handler", "Server"]

Reader, Writer = asyncio.StreamReader, asyncio.StreamWriter
Handler = Callable[[Reader, Writer, int], Awaitable[None]]


class Server:
    """A loopback server that runs ``handler(reader, writer, n)`` for its n-th connection."""

    def __init__(self, handler: Handler, tls: ssl.SSLContext | None = None) -> None:
        self.handler, self.tls = handler, tls
        self.connections = 0
        self.requests: list[bytes] = []

    async def __aenter__(self) -> Server:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer, self.connections)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def request(self, reader: asyncio.StreamReader) -> bytes | None:
        """One whole request (head and content-length body), or None at end of stream."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        whole = head + await reader.readexactly(length)
        self.requests.append(whole)
        return whole

    def url(self, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}/v1"
