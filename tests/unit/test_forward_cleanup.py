"""Forwarder's stream generator gives back the provider's connection however the client leaves."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from proxy.services.forward import Forwarder


class _Answer:
    """Stands for a StreamAnswer whose headers are in and whose body nobody has read."""

    status_code = 200
    headers: dict[str, str] = {}

    def __init__(self) -> None:
        self.closed = 0

    async def aclose(self) -> None:
        self.closed += 1


async def test_an_answer_that_arrives_as_the_client_leaves_is_closed() -> None:
    finished: list[object] = []

    async def finish(step: object, reply: object, tokens: object) -> None:
        finished.append(reply)

    async def release(step: object) -> None:
        raise AssertionError("not called on this path")

    settings = SimpleNamespace(keepalive_seconds=0.05, max_internal_rounds=1)
    forwarder = Forwarder(upstream=None, settings=settings,  # type: ignore[arg-type]
                          finish=finish, release=release)
    step = SimpleNamespace(assembled=SimpleNamespace(messages=[], offer_read_tool=False))
    send: asyncio.Future[_Answer] = asyncio.get_running_loop().create_future()
    body = forwarder._stream_body(step, send)  # type: ignore[arg-type]
    assert (await body.__anext__()).startswith(b":")  # the first keep-alive comment
    answer = _Answer()
    send.set_result(answer)  # the provider's headers arrive ...
    await body.aclose()  # ... as the client hangs up
    assert answer.closed == 1 and finished == [None]
