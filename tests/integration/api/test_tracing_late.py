"""A stream whose ``200`` went out before its provider answered (a keep-alive comment was
due) and whose provider then failed ends in the proxy's error event: the request failed as a
whole answer's 5xx would have, and its span says so (ERROR, ``error.type`` the status that
answer would have had), keeping the ``200`` that went out. A stream the provider cut short
mid-answer does this already (test_tracing.py); one whose provider never answered in time,
or answered a 5xx, after the early ``200`` said nothing (status UNSET)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from proxy.settings import Settings
from tests.fakes.replies import Responder, error, raw, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.api.test_metrics import post_chat
from tests.integration.api.test_tracing import attrs, by_kind, finished

CHAT = "/v1/chat/completions"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def traced(
    db_dsn: str, tmp_path: Path, fake_upstream: FakeUpstream, exporter: InMemorySpanExporter
) -> Iterator[ProxyServer]:
    """Keep-alive comments every 0.2 s; the provider gives up after 1.2 s."""
    providers = {"openai": {"baseUrl": fake_upstream.url, "timeoutSeconds": 1.2}}
    config = write_config(tmp_path / "agents.json", fake_upstream.url, providers=providers)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    settings = Settings(database_url=db_dsn, config=config, keepalive_seconds=0.2)
    server = ProxyServer(settings, tracer_provider=provider).start()
    yield server
    server.stop()
    provider.shutdown()


LATE: dict[str, tuple[Responder, str, str]] = {
    "timeout": (reply("late", first_byte_delay=3), "upstream_timeout", "504"),
    "provider 500": (error(500, first_byte_delay=0.8), '"500"', "500"),
    "stalled mid-answer": (
        reply("a b c d", chunks=4, first_token_delay=0.1, chunk_delay=2.5),
        "upstream_timeout",
        "504",
    ),
}


@pytest.mark.parametrize("name", list(LATE))
def test_a_provider_failing_after_the_early_200_fails_the_requests_span(
    traced: ProxyServer, fake_upstream: FakeUpstream, exporter: InMemorySpanExporter, name: str
) -> None:
    answer, code, error_type = LATE[name]
    fake_upstream.script(answer)
    resp = post_chat(traced.origin, CHAT, f"late-{name.replace(' ', '-')}", stream=True)
    assert resp.status_code == 200 and ": " in resp.text and code in resp.text, resp.text
    (request,) = by_kind(finished(exporter), SpanKind.SERVER)
    assert request.status.status_code is StatusCode.ERROR
    assert attrs(request)["http.response.status_code"] == 200
    assert attrs(request)["error.type"] == error_type


def test_a_providers_429_after_the_early_200_is_no_error_of_the_requests_span(
    traced: ProxyServer, fake_upstream: FakeUpstream, exporter: InMemorySpanExporter
) -> None:
    """A 4xx is the client's to act on, as its whole answer's would be."""
    fake_upstream.script(error(429, first_byte_delay=0.8))
    resp = post_chat(traced.origin, CHAT, "late-429", stream=True)
    assert resp.status_code == 200 and '"429"' in resp.text, resp.text
    (request,) = by_kind(finished(exporter), SpanKind.SERVER)
    assert request.status.status_code is StatusCode.UNSET
    assert "error.type" not in attrs(request)


@pytest.mark.parametrize("answer", ["mid-stream", "before the provider answered"])
def test_a_client_that_left_fails_neither_span(
    traced: ProxyServer, fake_upstream: FakeUpstream, exporter: InMemorySpanExporter, answer: str
) -> None:
    """README On call: a client gone is no failure, the request's nor its call's (the
    proxy cancelled the call), whether it left mid-answer or while the stream waited."""
    if answer == "mid-stream":
        fake_upstream.script(reply("one two three four five six", chunks=6, chunk_delay=0.2))
    else:
        fake_upstream.script(reply("late", first_byte_delay=0.5))
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"authorization": "Bearer sk-test-client", "x-session-id": "gone"}
    url = f"{traced.origin}{CHAT}"
    with httpx.stream("POST", url, json=body, headers=headers, timeout=10) as resp:
        assert resp.status_code == 200
        next(resp.iter_lines())  # a chunk, or the first keep-alive comment; then it leaves
    spans = finished(exporter)
    (request,) = by_kind(spans, SpanKind.SERVER)
    assert request.status.status_code is StatusCode.UNSET, attrs(request)
    assert "error.type" not in attrs(request)
    for call in by_kind(spans, SpanKind.CLIENT):
        assert call.status.status_code is StatusCode.UNSET, attrs(call)


_CHUNK = {
    "id": "c1",
    "object": "chat.completion.chunk",
    "created": 1,
    "model": "m",
    "choices": [{"index": 0, "delta": {"role": "assistant", "content": "partial "}}],
}
_FAILURE = {"error": {"message": "overloaded", "type": "server_error", "code": None}}


def test_a_providers_error_event_mid_stream_fails_the_requests_span(
    traced: ProxyServer, fake_upstream: FakeUpstream, exporter: InMemorySpanExporter
) -> None:
    """OpenAI's overloaded ``server_error`` mid-answer, relayed: the request failed as the
    whole answer holding that error object would have (the client's 502)."""
    start = f"data: {json.dumps(_CHUNK)}\n\n"
    fake_upstream.script(raw(start, f"data: {json.dumps(_FAILURE)}\n\n", "data: [DONE]\n\n"))
    resp = post_chat(traced.origin, CHAT, "in-band", stream=True)
    assert resp.status_code == 200 and "overloaded" in resp.text, resp.text
    spans = finished(exporter)
    (request,) = by_kind(spans, SpanKind.SERVER)
    (call,) = by_kind(spans, SpanKind.CLIENT)
    assert attrs(call)["error.type"] == "error_answer"
    assert request.status.status_code is StatusCode.ERROR, attrs(request)
    assert attrs(request)["http.response.status_code"] == 200
    assert attrs(request)["error.type"] == "502"
