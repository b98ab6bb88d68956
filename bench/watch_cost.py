"""What ``proxy.aiohttp_stream.fail_if_cut`` costs a request, in CPU time.

``python -m bench.watch_cost [--calls 200000]``

One aiohttp answer over a loopback connection, its body held back so it stays unread; then
``fail_if_cut`` is called on its body ``calls`` times on each of two paths: a connection
already watched (each later answer over a kept-alive connection: a dictionary store) and a
connection watched for the first time (a callback on its ``closed`` future too; the entry
and callback are removed after each call, and that removal is timed alone and subtracted).
"""

from __future__ import annotations

import argparse
import asyncio
import time

import aiohttp

from proxy import aiohttp_stream
from proxy.aiohttp_stream import fail_if_cut


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    await writer.drain()
    await reader.read()  # the body never comes, until the client closes: it stays watchable
    writer.close()


async def measure(calls: int) -> dict[str, float]:
    server = await asyncio.start_server(_serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    try:
        async with aiohttp.ClientSession() as session, session.get(url) as resp:
            content, protocol = resp.content, resp.content._protocol
            closed = protocol.closed
            fail_if_cut(content)
            start = time.perf_counter()
            for _ in range(calls):
                fail_if_cut(content)
            watched = (time.perf_counter() - start) / calls
            start = time.perf_counter()
            for _ in range(calls):
                del aiohttp_stream._READING[protocol]
                fail_if_cut(content)
                closed.remove_done_callback(closed._callbacks[-1][0])
            first = (time.perf_counter() - start) / calls
            added = aiohttp_stream._READING
            start = time.perf_counter()
            for _ in range(calls):
                del added[protocol]
                added[protocol] = content
            removal = (time.perf_counter() - start) / calls
            resp.close()
    finally:
        server.close()
        await asyncio.sleep(0.05)  # the handler reads the client's close and ends
    return {"watched connection": watched, "new connection": first - removal}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200_000)
    args = parser.parse_args()
    for path, seconds in asyncio.run(measure(args.calls)).items():
        print(f"{path}: {seconds * 1e9:.0f} ns per call")


if __name__ == "__main__":
    main()
