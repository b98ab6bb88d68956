"""The provider pools a config reload leaves unused (a provider removed, moved, or given
another ``caFile``) and those of a rotated ``caFile`` are closed once no request uses them;
they were kept open, with their connections, until shutdown."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import httpx
import trustme

from proxy.config import parse_config
from proxy.transport import TLS_EXTENSION, ProviderTransport, TlsSettings


class FakePool(httpx.AsyncBaseTransport):
    """A pool that answers every request with a body to read, and records its close."""

    def __init__(self, **_: Any) -> None:
        self.closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await _settle()  # a real pool awaits its connection: a close begun runs meanwhile
        assert not self.closed, "a request on a closed pool"
        return httpx.Response(200, stream=httpx.ByteStream(b"ok"))

    async def aclose(self) -> None:
        self.closed = True


def _transport() -> ProviderTransport:
    transport = ProviderTransport(max_connections=2, kind="httpx")
    transport._make = FakePool
    return transport


def _config(**providers: str) -> Any:
    return parse_config(
        {
            "providers": {name: {"baseUrl": url} for name, url in providers.items()},
            "agents": {"default": {"provider": next(iter(providers))}},
        },
        {},
    )


async def _settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)  # the close task runs


async def test_a_removed_providers_pool_closes_once_its_stream_is_done() -> None:
    transport = _transport()
    client = httpx.AsyncClient(transport=transport)
    a = await client.send(client.build_request("GET", "https://a.example/v1/x"), stream=True)
    await (await client.get("https://b.example/v1/x")).aclose()
    pool_a = transport.pool_for(httpx.Request("GET", "https://a.example/v1"))[0]
    pool_b = transport.pool_for(httpx.Request("GET", "https://b.example/v1"))[0]

    transport.keep_only(_config(b="https://b.example/v1"))  # a reload removed provider a
    await _settle()
    assert not pool_a.closed  # its stream runs on
    assert await a.aread() == b"ok"
    await a.aclose()
    await _settle()
    assert pool_a.closed and not pool_b.closed
    assert transport.pool_for(httpx.Request("GET", "https://b.example/v1"))[0] is pool_b

    transport.keep_only(_config(c="https://c.example"))  # an idle pool closes at once
    await _settle()
    assert pool_b.closed
    await client.aclose()


async def test_a_request_begun_before_the_reload_closes_its_pool_after_it() -> None:
    """A request that read the config before the reload reaches a retired origin: its pool
    is made for it and closed after it, not kept for good."""
    transport = _transport()
    made: list[FakePool] = []
    transport._make = lambda **kw: made.append(FakePool()) or made[-1]
    transport.keep_only(_config(b="https://b.example"))
    client = httpx.AsyncClient(transport=transport)
    resp = await client.send(client.build_request("GET", "https://a.example/v1"), stream=True)
    assert transport._pools == {} and not made[0].closed
    await resp.aclose()
    await _settle()
    assert made[0].closed
    await client.aclose()


async def test_a_rotated_ca_files_old_pool_closes(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(bundle))
    transport = _transport()
    tls = TlsSettings(ca_file=str(bundle))
    request = httpx.Request("GET", "https://llm.internal/v1", extensions={TLS_EXTENSION: tls})
    first = transport.pool_for(request)[0]
    trustme.CA().cert_pem.write_to_path(str(tmp_path / "next.pem"))
    os.replace(tmp_path / "next.pem", bundle)
    second = transport.pool_for(request)[0]
    await _settle()
    assert second is not first and first.closed and not second.closed
    await transport.aclose()
    assert second.closed
