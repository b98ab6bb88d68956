"""A small forwarding HTTP proxy on 127.0.0.1, in a thread, for the egress-proxy tests.

It takes absolute-URI requests (``GET http://host:port/path HTTP/1.1``, any method) and
``CONNECT host:port`` tunnels, and resolves names through its own table (``hosts``), so a
provider named by a host only the proxy knows is reachable through it and nowhere else. One
request per connection for absolute URIs (it asks the upstream to close after answering).
``seen`` records each request line's target, for tests to check what went through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Mapping
from urllib.parse import urlsplit

__all__ = ["EgressProxy"]


class EgressProxy:
    def __init__(self, hosts: Mapping[str, str]) -> None:
        self.hosts = dict(hosts)
        self.seen: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> EgressProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop
        ).result(5)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            assert self._server is not None
            self._server.close()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def _resolve(self, host: str) -> str:
        return self.hosts.get(host, host)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            line, _, rest = head.partition(b"\r\n")
            method, target, version = line.decode("latin-1").split(" ")
            self.seen.append(target)
            if method == "CONNECT":
                host, _, port = target.rpartition(":")
                up_reader, up_writer = await asyncio.open_connection(self._resolve(host), int(port))
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                url = urlsplit(target)
                up_reader, up_writer = await asyncio.open_connection(
                    self._resolve(url.hostname or ""), url.port or 80
                )
                path = (url.path or "/") + (f"?{url.query}" if url.query else "")
                fields = [
                    f
                    for f in rest.split(b"\r\n")
                    if f and not f.lower().startswith((b"proxy-", b"connection:"))
                ]
                up_writer.write(
                    f"{method} {path} {version}\r\n".encode("latin-1")
                    + b"".join(f + b"\r\n" for f in fields)
                    + b"connection: close\r\n\r\n"
                )
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except (OSError, asyncio.IncompleteReadError, ValueError):
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
        finally:
            with contextlib.suppress(OSError):
                writer.close()


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.close()
