"""The request span of a request no route took (a 404), on a small Starlette app under the
proxy's two middlewares: OpenTelemetry's HTTP conventions name such a span by its method
alone and give it no ``http.route``, which names a route template a trace viewer groups by;
``"none"``, the metrics' label for it, is no template and read there as a route of that name."""

from __future__ import annotations

import httpx
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from proxy.metrics import Metrics
from proxy.middleware import AccessLog
from proxy.observe import Observe, Observer
from proxy.tracing import build_tracing


async def _item(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


async def test_a_request_no_route_took_has_a_span_named_by_its_method_alone() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    observer = Observer(Metrics(), build_tracing("", provider=provider))
    app = Starlette(
        routes=[Route("/items/{item_id}", _item, methods=["GET"])],
        middleware=[Middleware(AccessLog), Middleware(Observe, observer=observer)],
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        assert (await client.get("/no/such/path")).status_code == 404
        assert (await client.get("/items/7")).status_code == 200
    unrouted, routed = exporter.get_finished_spans()
    assert unrouted.name == "GET"
    assert "http.route" not in (unrouted.attributes or {})
    assert (unrouted.attributes or {})["http.response.status_code"] == 404
    assert routed.name == "GET /items/{item_id}"
    assert (routed.attributes or {})["http.route"] == "/items/{item_id}"
    provider.shutdown()


async def test_a_chat_route_refusing_the_method_has_no_chat_attributes() -> None:
    """A PUT the chat route answers 405 ran no cascade and called no model: its span has
    neither ``cascade.tokens_reclaimed`` (README: on chat requests alone) nor GenAI's
    ``gen_ai.operation.name``, which a viewer counting chat operations would count."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    observer = Observer(Metrics(), build_tracing("", provider=provider))
    app = Starlette(
        routes=[Route("/v1/chat/completions", _item, methods=["POST"])],
        middleware=[Middleware(AccessLog), Middleware(Observe, observer=observer)],
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        assert (await client.put("/v1/chat/completions")).status_code == 405
        assert (await client.post("/v1/chat/completions")).status_code == 200
    refused, chat = (dict(s.attributes or {}) for s in exporter.get_finished_spans())
    assert refused["http.route"] == "/v1/chat/completions"
    assert "cascade.tokens_reclaimed" not in refused and "gen_ai.operation.name" not in refused
    assert chat["cascade.tokens_reclaimed"] == 0 and chat["gen_ai.operation.name"] == "chat"
    provider.shutdown()
