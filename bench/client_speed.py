"""CPU per request of the provider client: httpx against httpx over aiohttp, side by side.

``python -m bench.client_speed [--requests 20000] [--concurrency 32] [--rounds 3]``

Starts ``bench.fake_upstream`` in its own process, then in this one (uvloop, as the proxy
runs) sends the same small chat POST through each client, ``concurrency`` at a time, after a
warm-up of the same size, and prints this process's CPU time (user + system) per request and
the requests per second. The clients alternate round by round; the median per client is
printed last. ``httpx`` is the client Cascade builds (``proxy.transport.build_client``);
``httpx-aiohttp`` is the same httpx API over ``httpx_aiohttp.AiohttpTransport`` with the same
connection cap. Talks only to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import httpx
import uvloop

from bench.common import free_port
from proxy.transport import build_client

BODY = b'{"model":"bench-model","messages":[{"role":"user","content":"hi"}]}'
HEADERS = {"content-type": "application/json", "authorization": "Bearer bench-key"}
CLIENTS = ("httpx", "httpx-aiohttp")
_POOL = 256


def _client(kind: str) -> httpx.AsyncClient:
    if kind == "httpx":
        return build_client(max_connections=_POOL)
    from httpx_aiohttp import AiohttpTransport  # the bench extra installs it

    limits = httpx.Limits(max_connections=_POOL, max_keepalive_connections=_POOL)
    return build_client(transport=AiohttpTransport(limits=limits))


async def _open(
    kind: str, base: str
) -> tuple[Callable[[], Awaitable[bytes]], Callable[[], Awaitable[None]]]:
    client = _client(kind)
    timeout = httpx.Timeout(600, connect=10)

    async def one() -> bytes:
        request = client.build_request(
            "POST", base + "/chat/completions", headers=HEADERS, content=BODY, timeout=timeout
        )
        resp = await client.send(request, stream=True)
        try:
            return await resp.aread()
        finally:
            await resp.aclose()

    return one, client.aclose


async def _drive(one: Callable[[], Awaitable[bytes]], requests: int, concurrency: int) -> None:
    left = requests

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await one()

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def _measure(kind: str, base: str, requests: int, concurrency: int) -> tuple[float, float]:
    one, close = await _open(kind, base)
    try:
        await _drive(one, requests, concurrency)  # warm-up: connections, caches
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        await _drive(one, requests, concurrency)
        r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    finally:
        await close()
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return 1e6 * cpu / requests, requests / (t1 - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    port = free_port()
    fake = subprocess.Popen(
        [sys.executable, "-m", "bench.fake_upstream", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):  # up to 10 s for it to listen
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.1)
        base = f"http://127.0.0.1:{port}/v1"
        results: dict[str, list[float]] = {kind: [] for kind in CLIENTS}
        for n in range(args.rounds):
            for kind in results:
                cpu, rps = uvloop.run(_measure(kind, base, args.requests, args.concurrency))
                results[kind].append(cpu)
                print(
                    f"round {n + 1} {kind:13} {cpu:6.1f} us CPU/request  {rps:8.0f} req/s",
                    flush=True,
                )
        for kind, cpus in results.items():
            print(f"median {kind:13} {statistics.median(cpus):6.1f} us CPU/request")
    finally:
        fake.terminate()
        fake.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
