"""W3C trace context through the proxy: a client's ``traceparent`` makes the request's span
part of the client's trace, and each provider call carries its own span's ``traceparent``,
so a traced client, the proxy and a traced provider (vLLM, a gateway) make one trace."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from proxy.settings import Settings
from tests.fakes.replies import Pacer, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.test_metrics import post_chat
from tests.integration.api.test_tracing import by_kind, finished

CHAT = "/v1/chat/completions"
TRACE = "0af7651916cd43dd8448eb211c80319c"
PARENT = "b7ad6b7169203331"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def traced(settings: Settings, exporter: InMemorySpanExporter) -> Iterator[ProxyServer]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    # a keep-alive past the tests' reads: a stream's response starts with the provider's
    settings = settings.model_copy(update={"keepalive_seconds": 10})
    server = ProxyServer(settings, tracer_provider=provider).start()
    yield server
    server.stop()
    provider.shutdown()


def _chat(server: ProxyServer, traceparent: str) -> httpx.Response:
    """A chat request to ``server`` sent with ``traceparent``, as a traced client sends it."""
    return httpx.post(
        f"{server.origin}{CHAT}",
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": "Bearer sk-test-client", "traceparent": traceparent},
        timeout=20,
    )


def test_a_clients_traceparent_makes_the_request_span_its_child(
    traced: ProxyServer, fake_upstream: FakeUpstream, exporter: InMemorySpanExporter
) -> None:
    resp = _chat(traced, f"00-{TRACE}-{PARENT}-01")
    assert resp.status_code == 200
    spans = finished(exporter)
    (request,) = by_kind(spans, SpanKind.SERVER)
    assert request.context is not None and request.parent is not None
    assert f"{request.context.trace_id:032x}" == TRACE
    assert f"{request.parent.span_id:016x}" == PARENT
    assert request.parent.is_remote
    (attempt,) = by_kind(spans, SpanKind.CLIENT)
    assert attempt.context is not None and attempt.context.trace_id == request.context.trace_id


def test_a_malformed_traceparent_starts_a_trace_of_its_own(
    traced: ProxyServer, fake_upstream: FakeUpstream, exporter: InMemorySpanExporter
) -> None:
    resp = _chat(traced, "00-zz-not-valid")
    assert resp.status_code == 200
    (request,) = by_kind(finished(exporter), SpanKind.SERVER)
    assert request.parent is None


def test_each_provider_call_carries_its_own_spans_traceparent(
    traced: ProxyServer, fake_upstream: FakeUpstream, exporter: InMemorySpanExporter
) -> None:
    fake_upstream.script(reply("hi", usage=(3, 1)))
    assert post_chat(traced.origin, CHAT, "prop", stream=True).status_code == 200
    httpx.get(
        f"{traced.origin}/v1/models", headers={"authorization": "Bearer sk-test-client"}
    ).raise_for_status()
    spans = finished(exporter, requests=2)
    calls = {f"{s.context.span_id:016x}": s for s in by_kind(spans, SpanKind.CLIENT) if s.context}
    sent = [r.headers.get("traceparent") for r in fake_upstream.requests]
    assert len(sent) == len(calls) >= 2
    for header in sent:
        assert header is not None
        version, trace, span, flags = header.split("-")
        assert version == "00" and int(flags, 16) & 1, "sampled"
        assert span in calls, "the header names the provider call's own span"
        assert trace == f"{calls[span].context.trace_id:032x}"  # type: ignore[union-attr]


def test_without_tracing_no_trace_header_goes_upstream(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    resp = _chat(proxy, f"00-{TRACE}-{PARENT}-01")
    assert resp.status_code == 200
    (sent,) = fake_upstream.requests
    assert "traceparent" not in sent.headers


def test_a_call_cancelled_because_the_client_left_is_no_provider_error(
    traced: ProxyServer, fake_upstream: FakeUpstream, exporter: InMemorySpanExporter
) -> None:
    """The proxy cancels a stream's call whose client hung up before the provider's headers
    came (a 499): the provider did nothing wrong, so its span is not ERROR ``unreachable``,
    which an alert on failing provider calls would count."""
    held = Pacer(20, first=True)
    fake_upstream.script(reply("late", pacer=held))
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"authorization": "Bearer sk-test-client", "x-session-id": "left"}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{traced.origin}{CHAT}",
            json=body,
            headers=headers,
            timeout=httpx.Timeout(10, read=0.5),
        )
    try:
        spans = finished(exporter)
    finally:
        held.allow(100)
    (request,) = by_kind(spans, SpanKind.SERVER)
    assert dict(request.attributes or {})["http.response.status_code"] == 499
    (attempt,) = by_kind(spans, SpanKind.CLIENT)
    assert attempt.status.status_code is not StatusCode.ERROR
    assert "error.type" not in (attempt.attributes or {})


def test_a_clients_unsampled_traceparent_records_no_span_and_says_so_upstream(
    traced: ProxyServer, fake_upstream: FakeUpstream, exporter: InMemorySpanExporter
) -> None:
    resp = _chat(traced, f"00-{TRACE}-{PARENT}-00")
    assert resp.status_code == 200
    (sent,) = fake_upstream.requests
    version, trace, _, flags = sent.headers["traceparent"].split("-")
    assert (version, trace) == ("00", TRACE) and not int(flags, 16) & 1
    assert exporter.get_finished_spans() == ()
