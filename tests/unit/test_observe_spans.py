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
