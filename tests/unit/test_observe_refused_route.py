"""A request a middleware inside ``Observe`` refuses before routing (the proxy-key gate's
401, a CORS preflight refused) is counted under the route its path and method match, as its
span is named: as ``none`` with every unknown path's 404s, a wrong key hammering the chat
route could not be told from a scanner on a dashboard or in a trace viewer."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from proxy.metrics import Metrics
from proxy.middleware import AccessLog
from proxy.observe import Observe, Observer


class _Gate:
    """Every request refused with a 401 before the router sees it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await JSONResponse({"error": {}}, 401)(scope, receive, send)


async def _chat(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


def _count(metrics: Metrics, **labels: str) -> float:
    text = metrics.render().decode()
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "cascade_requests_total"
        and all(s.labels.get(k) == v for k, v in labels.items())
    )


async def test_a_request_refused_before_routing_counts_under_the_route_it_matches() -> None:
    metrics = Metrics()
    app = Starlette(
        routes=[Route("/s/{session_id}/v1/chat/completions", _chat, methods=["POST"])],
        middleware=[
            Middleware(AccessLog),
            Middleware(Observe, observer=Observer(metrics)),
            Middleware(_Gate),
        ],
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        assert (await client.post("/s/abc/v1/chat/completions")).status_code == 401
        assert (await client.get("/no/such/path")).status_code == 401
    chat = "/s/{session_id}/v1/chat/completions"
    assert _count(metrics, route=chat, method="POST", status="401") == 1
    assert _count(metrics, route="none", method="GET", status="401") == 1
