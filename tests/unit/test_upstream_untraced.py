"""With tracing off a provider call builds no trace context: the call's URL is not taken
apart for a span's server attributes, nor is the request's observer asked for headers it
has none of, on every provider call of every request."""

from __future__ import annotations

import httpx
import pytest

from proxy import requestlog
from proxy.config import parse_config
from proxy.metrics import Metrics
from proxy.observe import Observer, RequestObs
from proxy.upstream import Upstream


async def test_an_untraced_call_asks_for_no_trace_headers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def asked(*args: object) -> dict[str, str]:
        raise AssertionError("trace headers built with tracing off")

    monkeypatch.setattr(RequestObs, "trace_headers", asked)
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"data": []})

    cfg = parse_config({"providers": {"p": {"baseUrl": "http://p.test/v1"}}}, {})
    upstream = Upstream(httpx.AsyncClient(transport=httpx.MockTransport(handler)), env={})
    record = requestlog.RequestRecord("r1")
    record.obs = RequestObs(Observer(Metrics()), None)  # tracing off
    token = requestlog.begin(record)
    try:
        answer = await upstream.call(cfg.providers["p"], "GET", "/models", client_headers={})
    finally:
        requestlog.end(token)
    assert answer.status_code == 200
    assert "traceparent" not in sent[0].headers
