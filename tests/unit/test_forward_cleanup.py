"""Forwarder's stream generator gives back the provider's connection however the client leaves."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

from proxy.config import ProviderConfig
from proxy.services.forward import Forwarder
from proxy.transport import Kind, build_client
from proxy.upstream import Upstream
from tests.fakes.scripted import Reader, Server, Writer


class _Answer:
    """Stands for a StreamAnswer whose headers are in and whose body nobody has read."""

    status_code = 200
    headers: dict[str, str] = {}

    def __init__(self) -> None:
        self.closed = 0

    async def aclose(self) -> None:
        self.closed += 1


def _turn(finish: object, abort: object) -> SimpleNamespace:
    """Stands for a Turn: its prepared step, and the two calls that end it."""
    step = SimpleNamespace(
        assembled=SimpleNamespace(messages=[], offer_read_tool=False),
        route=SimpleNamespace(provider=ProviderConfig(base_url="http://llm.test/v1")),
    )
    return SimpleNamespace(prepared=step, finish=finish, abort=abort)


async def test_an_answer_that_arrives_as_the_client_leaves_is_closed() -> None:
    finished: list[object] = []

    async def finish(reply: object, tokens: object, calibration: object = None) -> None:
        finished.append(reply)

    async def abort(calibration: object = None) -> None:
        raise AssertionError("not called on this path")

    settings = SimpleNamespace(keepalive_seconds=0.05, max_internal_rounds=1)
    forwarder = Forwarder(upstream=None, settings=settings)  # type: ignore[arg-type]
    turn = _turn(finish, abort)
    send: asyncio.Future[_Answer] = asyncio.get_running_loop().create_future()
    body = forwarder._stream_body(turn, send, False, None)  # type: ignore[arg-type]
    assert (await body.__anext__()).startswith(b":")  # the first keep-alive comment
    answer = _Answer()
    send.set_result(answer)  # the provider's headers arrive ...
    await body.aclose()  # ... as the client hangs up
    assert answer.closed == 1 and finished == [None]


@pytest.mark.parametrize("kind", ["httpx", "aiohttp"])
async def test_an_error_answer_whose_body_stalls_ends_the_stream_with_an_error_event(
    kind: Kind,
) -> None:
    async def handler(reader: Reader, writer: Writer, n: int) -> None:
        await server.request(reader)
        await asyncio.sleep(0.15)  # the head comes after the first keep-alive comment
        writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 100\r\n\r\n{")
        await writer.drain()
        await asyncio.sleep(2)  # and the rest of the body never

    ran: list[str] = []

    async def finish(reply: object, tokens: object, calibration: object = None) -> None:
        ran.append("finish")

    async def abort(calibration: object = None) -> None:
        ran.append("abort")

    upstream = Upstream(build_client(kind=kind), env={})
    async with Server(handler) as server:
        provider = ProviderConfig(base_url=server.url(), timeout_seconds=0.3)
        settings = SimpleNamespace(keepalive_seconds=0.1, max_internal_rounds=1)
        forwarder = Forwarder(upstream=upstream, settings=settings)  # type: ignore[arg-type]
        send = asyncio.ensure_future(
            upstream.open_stream(provider, "/chat/completions", client_headers={}, content=b"{}")
        )
        turn = _turn(finish, abort)
        pieces = [p async for p in forwarder._stream_body(turn, send, False, None)]  # type: ignore[arg-type]
    await upstream.client.aclose()
    assert pieces[0].startswith(b":")  # a keep-alive comment went out: the 200 is committed
    assert json.loads(pieces[-2].removeprefix(b"data: "))["error"]["code"] == "upstream_timeout"
    assert pieces[-1] == b"data: [DONE]\n\n" and ran == ["finish"]
