"""A provider that answered with nothing usable (a redirect, a status past 599, an encoding
the proxy cannot decode) is counted in ``cascade_upstream_errors_total`` by what it did, not
as ``unreachable``: UpstreamBadResponse's own code exists so an operator does not look for
a network fault, and the counter's label sent them there (an http:// baseUrl a provider
redirects to https:// is the common case)."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy import requestlog
from proxy.config import parse_config
from proxy.errors import UpstreamBadResponse
from proxy.metrics import Metrics
from proxy.observe import Observer, RequestObs
from proxy.upstream import Upstream


def _errors(metrics: Metrics) -> dict[tuple[str, str], float]:
    return {
        (s.labels["provider"], s.labels["error_type"]): s.value
        for f in text_string_to_metric_families(metrics.render().decode())
        for s in f.samples
        if s.name == "cascade_upstream_errors_total"
    }


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(301, headers={"location": "https://p.test/v1/chat/completions"}),
        httpx.Response(200, headers={"content-encoding": "lz4"}, content=b"??"),
    ],
)
async def test_a_bad_answer_is_no_unreachable_provider(
    answer: httpx.Response, stream: bool
) -> None:
    cfg = parse_config({"providers": {"p": {"baseUrl": "http://p.test/v1"}}}, {})
    client = httpx.AsyncClient(transport=httpx.MockTransport(lambda request: answer))
    upstream = Upstream(client, env={})
    metrics = Metrics()
    record = requestlog.RequestRecord("r1")
    record.obs = RequestObs(Observer(metrics), None)
    token = requestlog.begin(record)
    try:
        with pytest.raises(UpstreamBadResponse):
            if stream:
                await upstream.open_stream(
                    cfg.providers["p"], "/chat/completions", client_headers={}, content=b"{}"
                )
            else:
                await upstream.call(
                    cfg.providers["p"], "POST", "/chat/completions", client_headers={}
                )
    finally:
        requestlog.end(token)
    assert _errors(metrics) == {("p", "UpstreamBadResponse"): 1.0}
