"""``error.type`` (OpenTelemetry's attribute for an operation that ended in error) on the
request's server span and on a provider call's client span, read from an in-memory span
exporter. A server span's 4xx is the client's error, not the span's (HTTP conventions): no
``error.type`` and no ERROR. A 5xx is the status code as a string; an exception that broke
the request off is its class name, the status that went out before it (a stream's 200)
notwithstanding; a client that left (``ClientDisconnect``) is no failure."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from proxy.metrics import Metrics
from proxy.middleware import AccessLog, ServerErrors
from proxy.observe import Observe, Observer, RequestObs
from proxy.tracing import build_tracing


class Broken(RuntimeError):
    """What a handler raises."""


async def _status(request: Request) -> Response:
    return PlainTextResponse("x", int(request.path_params["code"]))


async def _raises(request: Request) -> Response:
    raise Broken("a bug")


def _stream_then(exc: BaseException) -> object:
    async def handler(request: Request) -> Response:
        async def body() -> AsyncIterator[bytes]:
            yield b"data: 1\n\n"
            raise exc

        return StreamingResponse(body(), media_type="text/event-stream")

    return handler


class _SendRefused:
    """A raw ASGI stream whose server refused a send, its peer gone (an ASGI 2.4 server)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise ConnectionResetError("peer gone")


class _StopCut:
    """A raw ASGI stream the server cancelled after its 200 went out: uvicorn's bound on a
    stop (``timeout_graceful_shutdown``) cancels what still runs. uvicorn never cancels a
    request for a client that left, and a Starlette stream's own cancel scope absorbs the
    cancel it makes then, so none of these is the client gone."""

    def __init__(self, started: bool = True) -> None:
        self.started = started

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.started:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            body = {"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True}
            await send(body)
        raise asyncio.CancelledError


@pytest.fixture
def traced() -> Iterator[tuple[InMemorySpanExporter, Observer]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter, Observer(Metrics(), build_tracing("", provider=provider))
    provider.shutdown()


async def _spans(observer: Observer, exporter: InMemorySpanExporter, path: str) -> ReadableSpan:
    app = Starlette(
        routes=[
            Route("/status/{code}", _status),
            Route("/raises", _raises),
            Route("/stream-breaks", _stream_then(Broken("mid-stream"))),
            Route("/stream-gone", _stream_then(ClientDisconnect())),
            Route("/send-refused", _SendRefused()),
            Route("/stop-cut", _StopCut()),
            Route("/stop-cut-early", _StopCut(started=False)),
        ],
        middleware=[
            Middleware(AccessLog),
            Middleware(Observe, observer=observer),
            Middleware(ServerErrors),
        ],
    )
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        with contextlib.suppress(asyncio.CancelledError):  # what the server's cancel raises
            await client.get(path)
    (span,) = exporter.get_finished_spans()
    return span


@pytest.mark.parametrize("code", [400, 404, 429])
async def test_a_4xx_is_the_clients_error_not_the_server_spans(
    traced: tuple[InMemorySpanExporter, Observer], code: int
) -> None:
    span = await _spans(traced[1], traced[0], f"/status/{code}")
    assert "error.type" not in (span.attributes or {})
    assert span.status.status_code is StatusCode.UNSET


@pytest.mark.parametrize("code", [500, 503])
async def test_a_5xx_is_its_status_code(
    traced: tuple[InMemorySpanExporter, Observer], code: int
) -> None:
    span = await _spans(traced[1], traced[0], f"/status/{code}")
    assert (span.attributes or {})["error.type"] == str(code)
    assert span.status.status_code is StatusCode.ERROR


async def test_an_unhandled_exception_answered_500_is_the_500(
    traced: tuple[InMemorySpanExporter, Observer],
) -> None:
    """``ServerErrors`` answers it (inside ``Observe``): the 500 went out, so the span says
    the status, as the conventions have it once a status was sent."""
    span = await _spans(traced[1], traced[0], "/raises")
    assert (span.attributes or {})["error.type"] == "500"
    assert span.status.status_code is StatusCode.ERROR


async def test_a_stream_broken_off_by_an_exception_is_its_class_name(
    traced: tuple[InMemorySpanExporter, Observer],
) -> None:
    """Its 200 went out first, so no status says it failed: a trace search for failed
    requests found none of these, though the client got half an answer."""
    span = await _spans(traced[1], traced[0], "/stream-breaks")
    assert (span.attributes or {})["http.response.status_code"] == 200
    assert (span.attributes or {}).get("error.type") == "Broken"
    assert span.status.status_code is StatusCode.ERROR


async def test_a_stream_the_servers_stop_cancelled_is_a_failure(
    traced: tuple[InMemorySpanExporter, Observer],
) -> None:
    """Its client got half an answer and no error event: the span says so, as for an
    exception that broke it off (a ``CancelledError`` is no ``Exception``)."""
    span = await _spans(traced[1], traced[0], "/stop-cut")
    assert (span.attributes or {})["http.response.status_code"] == 200
    assert (span.attributes or {}).get("error.type") == "CancelledError"
    assert span.status.status_code is StatusCode.ERROR


async def test_a_request_cancelled_before_its_status_is_the_cancel_not_a_500(
    traced: tuple[InMemorySpanExporter, Observer],
) -> None:
    """No status went out (``ServerErrors`` answers an ``Exception`` only): the exception's
    class says how it ended, as for any exception before a status, not a 500 nobody got."""
    span = await _spans(traced[1], traced[0], "/stop-cut-early")
    assert (span.attributes or {}).get("error.type") == "CancelledError"
    assert span.status.status_code is StatusCode.ERROR


@pytest.mark.parametrize("path", ["/stream-gone", "/send-refused"])
async def test_a_stream_whose_client_left_is_no_failure(
    traced: tuple[InMemorySpanExporter, Observer], path: str
) -> None:
    span = await _spans(traced[1], traced[0], path)
    assert "error.type" not in (span.attributes or {})
    assert span.status.status_code is StatusCode.UNSET


@pytest.mark.parametrize(
    ("status", "failure", "cancelled", "error"),
    [
        (200, None, False, None),
        (404, None, False, "404"),  # a client span's 4xx is an error (HTTP conventions)
        (503, None, False, "503"),
        (None, None, False, "unreachable"),
        (200, "ReadError", False, "ReadError"),  # broke off after its status
        (None, None, True, None),  # the proxy cancelled it: its client left
    ],
)
def test_a_provider_calls_span_says_how_it_failed(
    traced: tuple[InMemorySpanExporter, Observer],
    status: int | None,
    failure: str | None,
    cancelled: bool,
    error: str | None,
) -> None:
    exporter, observer = traced
    obs = RequestObs(observer, None)
    attempt = obs.attempt_started("openai", "/chat/completions", "gpt-4o")
    obs.attempt_done(attempt, 0.01, status, cancelled=cancelled, failure=failure)
    obs.end_pending()
    (span,) = exporter.get_finished_spans()
    assert (span.attributes or {}).get("error.type") == error
    failed = StatusCode.ERROR if error else StatusCode.UNSET
    assert span.status.status_code is failed
