"""``PrepWait``: a stream's keep-alive clock from its acceptance (``prep_wait.py``), driven
with a recording ``send`` and short intervals."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from starlette.responses import JSONResponse, Response, StreamingResponse

from proxy import sse
from proxy.config import ProviderConfig
from proxy.errors import NotFound
from proxy.services.forward import Forwarder
from proxy.services.prep_wait import Prepared, PrepWait
from proxy.store.db import PoolExhausted

EVERY = 0.05


class Sent:
    """The ASGI messages sent, each send taking ``delay`` seconds."""

    def __init__(self, delay: float = 0.0) -> None:
        self.messages: list[dict[str, Any]] = []
        self.delay = delay
        self.in_flight = 0

    async def __call__(self, message: Any) -> None:
        self.in_flight += 1
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            self.messages.append(message)
        finally:
            self.in_flight -= 1

    def bodies(self) -> list[bytes]:
        return [m["body"] for m in self.messages if m["type"] == "http.response.body"]


async def _after(seconds: float, response: Response | Exception) -> Response:
    await asyncio.sleep(seconds)
    if isinstance(response, Exception):
        raise response
    return response


async def _play(response: Response, sent: Sent) -> None:
    async def receive() -> Any:
        await asyncio.Event().wait()  # the client stays

    await response({"type": "http", "asgi": {"spec_version": "2.4"}}, receive, sent)


def _stream() -> StreamingResponse:
    async def body() -> Any:
        yield b"data: 1\n\n"
        yield sse.DONE

    return StreamingResponse(body(), media_type="text/event-stream")


async def test_a_quick_request_is_its_own_response_and_sends_nothing_early() -> None:
    sent = Sent()
    clock = PrepWait(sent, EVERY)
    original = _stream()
    assert await clock.around(_after(0, original)) is original
    await asyncio.sleep(EVERY * 2)  # the timer is gone
    assert sent.messages == [] and not clock.committed


async def test_a_quick_error_is_raised_as_before() -> None:
    clock = PrepWait(Sent(), EVERY)
    try:
        await clock.around(_after(0, NotFound("no such session")))
    except NotFound:
        pass
    else:
        raise AssertionError("the error was not raised")


async def test_a_slow_request_commits_a_200_and_a_comment_each_interval() -> None:
    sent = Sent()
    clock = PrepWait(sent, EVERY)
    response = await clock.around(_after(EVERY * 3.5, _stream()))
    assert clock.committed
    start = sent.messages[0]
    assert start["type"] == "http.response.start" and start["status"] == 200
    assert (b"content-type", b"text/event-stream") in start["headers"]
    assert sent.bodies() == [sse.KEEPALIVE] * 3
    await _play(response, sent)  # the stream goes on, with no second start
    assert [m["type"] for m in sent.messages].count("http.response.start") == 1
    assert sent.bodies()[3:] == [b"data: 1\n\n", sse.DONE, b""]


async def test_an_error_after_the_200_is_one_frame_with_its_code() -> None:
    sent = Sent()
    response = await PrepWait(sent, EVERY).around(_after(EVERY * 1.5, PoolExhausted("busy")))
    await _play(response, sent)
    frame, done, end = sent.bodies()[1:]
    error = sse.parse_general(frame)["error"]  # type: ignore[index]
    assert error["code"] == "server_busy" and error["retry_after"] == "1"
    assert (done, end) == (sse.DONE, b"")


async def test_an_error_response_after_the_200_is_a_frame_with_its_code() -> None:
    sent = Sent()
    refused = JSONResponse({"error": {"message": "gone", "type": "x", "code": "not_found"}}, 404)
    response = await PrepWait(sent, EVERY).around(_after(EVERY * 1.5, refused))
    await _play(response, sent)
    error = sse.parse_general(sent.bodies()[1])["error"]  # type: ignore[index]
    assert error["code"] == "not_found" and error["message"] == "gone"


async def test_stop_waits_for_a_comment_being_sent_and_sends_no_more() -> None:
    sent = Sent(delay=EVERY)  # a slow client: each send takes an interval
    clock = PrepWait(sent, EVERY)
    work = asyncio.ensure_future(clock.around(_after(EVERY * 2.5, _stream())))
    while len(sent.messages) < 1 or not sent.in_flight:  # the start went, a comment is sending
        await asyncio.sleep(0.005)
    before = len(sent.messages)
    response = await work
    count = len(sent.messages)
    assert count == before + 1  # stop waited for the comment rather than cut it
    await asyncio.sleep(EVERY * 3)
    assert len(sent.messages) == count  # no comment after the stop
    assert isinstance(response, StreamingResponse)


async def test_the_remaining_interval_counts_from_acceptance() -> None:
    clock = PrepWait(Sent(), 1.0)

    async def look() -> Response:
        await asyncio.sleep(0.2)
        assert 0.6 < clock.remaining() < 0.85
        return _stream()

    await clock.around(look())


async def test_an_unexpected_error_after_the_200_is_a_500_frame_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sent = Sent()
    response = await PrepWait(sent, EVERY).around(_after(EVERY * 1.5, RuntimeError("bug")))
    with caplog.at_level(logging.WARNING, logger="cascade.forward"):
        await _play(response, sent)
    error = sse.parse_general(sent.bodies()[1])["error"]  # type: ignore[index]
    assert error["code"] == "500" and error["type"] == "server_error"
    assert "bug" not in error["message"]  # the client gets no internals; the log has them
    (record,) = caplog.records
    assert record.exc_info is not None and "500 after its stream began" in record.getMessage()


class _Refusal:
    """A provider's 429 answer, its headers in by the time the stream reads it."""

    status_code = 429
    headers = httpx.Headers({"retry-after": "3", "content-type": "application/json"})
    request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")

    async def aread(self, cap: int | None = None) -> bytes:
        return b'{"error": {"message": "slow down", "code": "rate_limit_exceeded"}}'

    async def aclose(self) -> None:
        pass


async def test_a_stream_whose_200_went_out_early_relays_a_refusal_as_a_frame() -> None:
    """Its provider's refusal, even one in before the stream's first comment, is a frame:
    the status is the early ``200`` (``Forwarder.stream`` passes ``opened``)."""
    ended: list[object] = []

    async def finish(reply: object, tokens: object, calibration: object = None) -> None:
        ended.append(reply)

    step = SimpleNamespace(
        assembled=SimpleNamespace(messages=[], offer_read_tool=False),
        route=SimpleNamespace(provider=ProviderConfig(base_url="http://llm.test/v1")),
    )
    turn = SimpleNamespace(prepared=step, finish=finish)
    settings = SimpleNamespace(keepalive_seconds=EVERY, max_internal_rounds=1)
    forwarder = Forwarder(upstream=None, settings=settings)  # type: ignore[arg-type]
    send: asyncio.Future[_Refusal] = asyncio.get_running_loop().create_future()
    send.set_result(_Refusal())
    body = forwarder._stream_body(turn, send, True, None)  # type: ignore[arg-type]
    frames = [piece async for piece in body]
    error = sse.parse_general(frames[0])["error"]  # type: ignore[index]
    assert error["code"] == "429" and error["retry_after"] == "3"
    assert frames[1:] == [sse.DONE] and ended == [None]


async def test_the_prepared_response_keeps_alive_with_the_send_it_is_called_with() -> None:
    """The route answers a stream with ``Prepared``: the clock writes through the ``send``
    the framework hands the response (the one its exception handling watches)."""
    sent, clocks = Sent(), []

    async def answer(clock: PrepWait) -> Response:
        clocks.append(clock)
        return await _after(EVERY * 2.5, _stream())

    await _play(Prepared(answer, EVERY), sent)
    assert clocks and clocks[0].committed
    assert [m["type"] for m in sent.messages][0] == "http.response.start"
    assert sent.bodies()[0] == sse.KEEPALIVE and sent.bodies()[-1] == b""
    assert b"data: 1\n\n" in sent.bodies()


async def test_the_prepared_response_raises_an_error_met_before_the_interval() -> None:
    """Raised out of the response before anything went out, the route's error handlers
    answer it as they answer an error of the handler itself."""
    sent = Sent()

    async def answer(clock: PrepWait) -> Response:
        return await _after(0, NotFound("no such session"))

    with pytest.raises(NotFound):
        await _play(Prepared(answer, EVERY), sent)
    await asyncio.sleep(EVERY * 2)
    assert sent.messages == []
