"""A relay the stop's grace ends (``proxy/stopping.py``): the round ends where it is, with
``out.stopped``, whether its provider is silent or sends without a pause, and a provider's
frames the client has not had yet are left unread."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from proxy.services.relay import RoundOutcome, relay_round
from proxy.stopping import STOPPED_CODE, StopClock

CHUNK = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'


class _Provider:
    """A stream that never ends: a chunk every ``pause`` seconds, or none after the first."""

    def __init__(self, pause: float | None) -> None:
        self.pause = pause

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        yield CHUNK
        while True:
            if self.pause is None:
                await asyncio.Event().wait()  # silent for good
            await asyncio.sleep(self.pause)
            yield CHUNK

    async def aclose(self) -> None:
        pass


@pytest.mark.parametrize("pause", [None, 0.0], ids=["silent", "flooding"])
async def test_the_stops_grace_ends_a_round_that_would_never_end(pause: float | None) -> None:
    stop = StopClock(grace=0.2)
    out = RoundOutcome()
    relay = relay_round(
        _Provider(pause),  # type: ignore[arg-type]
        out,
        strip_usage=False,
        intercept=False,
        keepalive=10,
        stop=stop,
    )
    got = [await anext(relay)]
    stop.begin()
    started = asyncio.get_running_loop().time()
    async with asyncio.timeout(3):
        got += [piece async for piece in relay]
    assert 0.2 <= asyncio.get_running_loop().time() - started < 1
    assert out.stopped and out.error_code == STOPPED_CODE
    assert got[0] == CHUNK and stop.expired
    assert not stop._wakes  # the round no longer watches the clock
