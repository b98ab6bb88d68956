"""Spans through the real proxy (issue 25, deliverable 2): an in-memory exporter, handed to
``create_app`` as its tracer provider, receives one span per request and one per provider
call, with the GenAI semantic-convention attributes and the cascade's own."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from proxy.settings import Settings
from tests.fakes.replies import raw, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import FAST, Agent, Model, Stack, words
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.test_metrics import post_chat, scrape

CHAT = "/v1/chat/completions"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


@pytest.fixture
def traced(settings: Settings, provider: TracerProvider) -> Iterator[ProxyServer]:
    server = ProxyServer(settings, tracer_provider=provider).start()
    yield server
    server.stop()


def finished(exporter: InMemorySpanExporter, requests: int = 1) -> tuple[ReadableSpan, ...]:
    """The finished spans once ``requests`` request spans are among them: a request's span
    ends after its response, once the reply is stored."""
    deadline = time.monotonic() + 5
    while len(by_kind(spans := exporter.get_finished_spans(), SpanKind.SERVER)) < requests:
        assert time.monotonic() < deadline, f"fewer than {requests} request spans"
        time.sleep(0.01)
    return spans


def by_kind(spans: tuple[ReadableSpan, ...], kind: SpanKind) -> list[ReadableSpan]:
    return [s for s in spans if s.kind == kind]


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_a_chat_request_makes_one_request_span_and_one_per_provider_call(
    traced: ProxyServer, fake_upstream: FakeUpstream, exporter: InMemorySpanExporter
) -> None:
    fake_upstream.script(reply("hi", usage=(321, 45)))
    resp = post_chat(traced.origin, CHAT, "traced")
    assert resp.status_code == 200
    spans = finished(exporter)
    (request,) = by_kind(spans, SpanKind.SERVER)
    (attempt,) = by_kind(spans, SpanKind.CLIENT)
    assert request.name == "POST /v1/chat/completions"
    assert attempt.parent is not None and request.context is not None
    assert attempt.parent.span_id == request.context.span_id
    assert attempt.context is not None
    assert attempt.context.trace_id == request.context.trace_id
    assert attrs(request) == attrs(request) | {
        "http.route": CHAT,
        "http.response.status_code": 200,
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.usage.input_tokens": 321,
        "gen_ai.usage.output_tokens": 45,
        "cascade.session.occupancy": 321,
        "cascade.tokens_reclaimed": 0,
    }
    assert attrs(attempt) == attrs(attempt) | {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.usage.input_tokens": 321,
        "gen_ai.usage.output_tokens": 45,
        "http.response.status_code": 200,
        "cascade.provider": "openai",
    }
    # the span ends when the call did, not when its usage was read afterwards
    assert attempt.end_time is not None and request.end_time is not None
    assert attempt.end_time <= request.end_time
    assert "traced" not in str([attrs(s) for s in spans]), "no session id in a span"


def test_a_stream_gets_its_usage_on_its_call_span(
    traced: ProxyServer, fake_upstream: FakeUpstream, exporter: InMemorySpanExporter
) -> None:
    fake_upstream.script(reply("one two three", usage=(100, 7)))
    resp = post_chat(traced.origin, CHAT, "traced-stream", stream=True)
    assert resp.status_code == 200 and "[DONE]" in resp.text
    (attempt,) = by_kind(finished(exporter), SpanKind.CLIENT)
    assert attrs(attempt)["gen_ai.usage.input_tokens"] == 100
    assert attrs(attempt)["gen_ai.usage.output_tokens"] == 7


def test_a_request_the_provider_refuses_still_has_its_spans(
    traced: ProxyServer, fake_upstream: FakeUpstream, exporter: InMemorySpanExporter
) -> None:
    from tests.fakes.replies import rate_limited

    fake_upstream.script(rate_limited())
    assert post_chat(traced.origin, CHAT, "refused").status_code == 429
    spans = finished(exporter)
    (attempt,) = by_kind(spans, SpanKind.CLIENT)
    (request,) = by_kind(spans, SpanKind.SERVER)
    assert attrs(attempt)["error.type"] == "429"
    assert attrs(request)["http.response.status_code"] == 429
    # OpenTelemetry's HTTP conventions: a client span's 4xx is an error, a server span's is not
    assert attempt.status.status_code is StatusCode.ERROR
    assert request.status.status_code is StatusCode.UNSET


def test_a_provider_failure_marks_both_spans_failed(
    traced: ProxyServer, fake_upstream: FakeUpstream, exporter: InMemorySpanExporter
) -> None:
    """Trace viewers find failures by the span's status: an ``error.type`` alone leaves a
    failed call and its request shown as succeeded."""
    from tests.fakes.replies import error

    fake_upstream.script(error(500))
    assert post_chat(traced.origin, CHAT, "failed").status_code == 500
    spans = finished(exporter)
    (attempt,) = by_kind(spans, SpanKind.CLIENT)
    (request,) = by_kind(spans, SpanKind.SERVER)
    assert attrs(request)["error.type"] == "500"
    assert attempt.status.status_code is StatusCode.ERROR
    assert request.status.status_code is StatusCode.ERROR
    assert not attempt.status.description and not request.status.description  # no message


def test_no_span_without_a_provider(
    proxy: ProxyServer, fake_upstream: FakeUpstream, exporter: InMemorySpanExporter
) -> None:
    assert post_chat(proxy.origin, CHAT, "untraced").status_code == 200
    time.sleep(0.2)  # past the reply's storing, when the request's span would end
    assert exporter.get_finished_spans() == ()


def test_a_compaction_shows_on_the_request_span_and_in_the_metrics(
    tmp_path: Path,
    db_dsn: str,
    fake_upstream: FakeUpstream,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
) -> None:
    fake_upstream.default = Model()
    s = Stack(tmp_path, db_dsn, fake_upstream, summarize={"background": False})
    s.servers = [ProxyServer(s.servers[0].settings, tracer_provider=provider)]
    with s:
        agent = Agent(s.client("compacted"))
        for i in range(6):
            agent.say(words(450, f"t{i}"))
        assert s.fast_bodies(), "no compaction ran"
        m = scrape(s.proxy.origin)
        spans = finished(exporter, 6)
    assert m.value("cascade_compactions_total", result="completed") == len(s.fast_bodies())
    assert m.value("cascade_tokens_reclaimed_total", stage="compaction") > 0
    assert m.value(
        "gen_ai_client_token_usage_count", gen_ai_request_model=FAST, gen_ai_token_type="input"
    ) == len(s.fast_bodies())
    requests = by_kind(spans, SpanKind.SERVER)
    compacted = [attrs(r) for r in requests if "cascade.compaction" in attrs(r)]
    assert compacted and all(a["cascade.compaction"] == "completed" for a in compacted)
    assert all(a["cascade.tokens_reclaimed"] > 0 for a in compacted)
    calls = by_kind(spans, SpanKind.CLIENT)
    assert {attrs(c)["gen_ai.request.model"] for c in calls} == {FAST, "gpt-fake"}


def test_a_failed_compaction_is_counted_by_its_reason(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.default = Model(fast_failures=100)
    with Stack(
        tmp_path, db_dsn, fake_upstream, summarize={"background": False, "maxAttempts": 1}
    ) as s:
        agent = Agent(s.client("failing"))
        agent.fill()
        assert s.fast_bodies(), "no compaction ran"
        m = scrape(s.proxy.origin)
    assert m.value("cascade_compactions_total", result="summary_failed") >= 1
    assert m.value("cascade_compactions_total", result="completed") == 0


def test_metrics_scrapes_are_spans_too_but_name_no_model(
    traced: ProxyServer, exporter: InMemorySpanExporter
) -> None:
    assert httpx.get(f"{traced.origin}/metrics", timeout=5).status_code == 200
    (request,) = finished(exporter)
    assert request.name == "GET /metrics"
    assert "gen_ai.request.model" not in attrs(request)
    # what the cascade reclaimed is a chat request's figure: a probe's or a scrape's span had
    # cascade.tokens_reclaimed=0, as if the cascade had run on it and found nothing
    assert "cascade.tokens_reclaimed" not in attrs(request)
    assert httpx.get(f"{traced.origin}/readyz", timeout=5).status_code == 200
    (probe,) = [s for s in by_kind(finished(exporter, 2), SpanKind.SERVER) if s is not request]
    assert probe.name == "GET /readyz" and "cascade.tokens_reclaimed" not in attrs(probe)


@pytest.mark.parametrize("model_id", ["gpt-fake", "org/model-7b"])
def test_a_models_call_is_named_by_its_template_not_its_path(
    model_id: str,
    traced: ProxyServer,
    fake_upstream: FakeUpstream,
    exporter: InMemorySpanExporter,
) -> None:
    """A span name is a low-cardinality group (OpenTelemetry's naming rule): the model a
    client asks about goes in ``url.path``, not in the name of its call's span."""
    models_json = raw("{}", headers={"content-type": "application/json"})
    fake_upstream.script(models_json, endpoint=f"/v1/models/{model_id}")
    assert httpx.get(f"{traced.origin}/v1/models/{model_id}", timeout=5).status_code == 200
    spans = finished(exporter)
    (call,) = by_kind(spans, SpanKind.CLIENT)
    assert call.name == "GET /models/{model}"
    # the proxy's route as it is written, not in Starlette's converter syntax ({model:path})
    (request,) = by_kind(spans, SpanKind.SERVER)
    assert request.name == "GET /v1/models/{model}"
    assert attrs(request)["http.route"] == "/v1/models/{model}"
    assert "cascade.tokens_reclaimed" not in attrs(request)
    label = {"route": "/v1/models/{model}", "method": "GET", "status": "200"}
    assert scrape(traced.origin).value("cascade_requests_total", **label) >= 1
    assert attrs(call)["url.path"] == f"/models/{model_id}"
    assert attrs(call)["url.template"] == "/models/{model}"
    fake_upstream.script(models_json, endpoint="/v1/models")
    assert httpx.get(f"{traced.origin}/v1/models", timeout=5).status_code == 200
    listed = [s for s in by_kind(finished(exporter, 2), SpanKind.CLIENT) if s is not call]
    assert [s.name for s in listed] == ["GET /models"]


def test_no_span_of_the_session_api_or_a_passthrough_names_a_key_body_or_session(
    traced: ProxyServer, fake_upstream: FakeUpstream, exporter: InMemorySpanExporter
) -> None:
    """Past the chat route: embeddings, the session API and its 404 carry the route's
    template and the status, never what the client sent (README: Tracing)."""
    key, sid, words = "sk-span-key-4471", "span-sess-9c2", "plum-orchard-text"
    headers = {"authorization": f"Bearer {key}", "x-session-id": sid}
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": words}]}
    assert httpx.post(f"{traced.origin}{CHAT}", json=body, headers=headers).status_code == 200
    embed = {"model": "emb-1", "input": words}
    posted = httpx.post(f"{traced.origin}/v1/embeddings", json=embed, headers=headers)
    assert posted.status_code == 200
    with httpx.Client(base_url=traced.origin, headers=headers, timeout=10) as api:
        assert api.get(f"/v1/sessions/{sid}").status_code == 200
        assert api.post(f"/v1/sessions/{sid}/branch", json={"id": sid + "-b"}).status_code == 200
        assert api.post(f"/v1/sessions/{sid}-b/reset").status_code == 200
        assert api.delete(f"/v1/sessions/{sid}-b").status_code == 200
        assert api.get(f"/v1/sessions/{sid}-b").status_code == 404
    spans = finished(exporter, 7)
    names = sorted(s.name for s in by_kind(spans, SpanKind.SERVER))
    assert names == [
        "DELETE /v1/sessions/{session_id}",
        "GET /v1/sessions/{session_id}",
        "GET /v1/sessions/{session_id}",
        "POST /v1/chat/completions",
        "POST /v1/embeddings",
        "POST /v1/sessions/{session_id}/branch",
        "POST /v1/sessions/{session_id}/reset",
    ]
    seen = str([(s.name, attrs(s)) for s in spans])
    for secret in (key, sid, words):
        assert secret not in seen


def test_a_passed_through_embeddings_call_is_named_by_its_model(
    traced: ProxyServer, fake_upstream: FakeUpstream, exporter: InMemorySpanExporter
) -> None:
    """``POST /v1/embeddings`` goes to the provider untouched, and its call's span is the
    GenAI ``{operation} {model}`` with ``gen_ai.request.model``, as the retrieval stage's
    own embedding calls are; a body that names no model still goes, its span unnamed by one."""
    body = {"model": "emb-1", "input": "some text"}
    assert httpx.post(f"{traced.origin}/v1/embeddings", json=body).status_code == 200
    spans = finished(exporter)
    (call,) = by_kind(spans, SpanKind.CLIENT)
    assert call.name == "embeddings emb-1"
    (request,) = by_kind(spans, SpanKind.SERVER)
    assert "cascade.tokens_reclaimed" not in attrs(request)  # the cascade runs on chat alone
    assert attrs(call)["gen_ai.request.model"] == "emb-1"
    assert attrs(call)["gen_ai.usage.input_tokens"] == len("some text") // 4  # as reported
    fake_upstream.script(
        raw("{}", headers={"content-type": "application/json"}), endpoint="/v1/embeddings"
    )
    sent = httpx.post(f"{traced.origin}/v1/embeddings", json={"input": "some text"})
    assert sent.status_code == 200
    calls = by_kind(finished(exporter, 2), SpanKind.CLIENT)
    assert [c.name for c in calls if c is not call] == ["embeddings"]


def test_a_method_http_does_not_know_is_other_as_opentelemetry_spells_it(
    traced: ProxyServer, exporter: InMemorySpanExporter
) -> None:
    """OpenTelemetry's HTTP conventions: ``_OTHER`` for a method outside HTTP's own, and
    ``HTTP`` in the span's name, so a client's invented methods group as one."""
    resp = httpx.request("PROPFIND", f"{traced.origin}/v1/models")
    assert resp.status_code == 405
    (request,) = by_kind(finished(exporter), SpanKind.SERVER)
    assert request.name == "HTTP /v1/models"
    assert attrs(request)["http.request.method"] == "_OTHER"


def test_a_stream_that_broke_off_marks_its_call_failed(
    traced: ProxyServer, fake_upstream: FakeUpstream, exporter: InMemorySpanExporter
) -> None:
    """The provider answered 200 and its body broke off: the client gets an in-band error,
    and the call's span says it failed (``error.type`` the exception's type, as
    OpenTelemetry's conventions have it for a failure with no status), not succeeded."""
    fake_upstream.script(reply("a b c d e f", chunks=6, reset_after=3))
    resp = post_chat(traced.origin, CHAT, "broken", stream=True)
    assert resp.status_code == 200 and "broke off" in resp.text
    (attempt,) = by_kind(finished(exporter), SpanKind.CLIENT)
    assert attempt.status.status_code is StatusCode.ERROR
    assert attrs(attempt)["http.response.status_code"] == 200
    assert attrs(attempt)["error.type"] == "ReadError"


def test_a_stream_that_ended_in_an_error_event_fails_its_requests_span(
    traced: ProxyServer, fake_upstream: FakeUpstream, exporter: InMemorySpanExporter
) -> None:
    """A stream that broke off ends in the proxy's error event, the 502 its status could
    no longer say (a whole answer's would have been one): the request failed, and its span
    says so, as a failure after the 200 in the stream's preparation does, keeping the 200
    that went out; it said nothing (status UNSET) while its call's span was ERROR."""
    fake_upstream.script(reply("a b c d e f", chunks=6, reset_after=3))
    resp = post_chat(traced.origin, CHAT, "broken-request", stream=True)
    assert resp.status_code == 200 and "upstream_bad_response" in resp.text
    (request,) = by_kind(finished(exporter), SpanKind.SERVER)
    assert request.status.status_code is StatusCode.ERROR
    assert attrs(request)["http.response.status_code"] == 200
    assert attrs(request)["error.type"] == "502"


def test_a_whole_answer_that_broke_off_marks_its_call_failed(
    traced: ProxyServer, fake_upstream: FakeUpstream, exporter: InMemorySpanExporter
) -> None:
    fake_upstream.script(reply("a whole answer", reset_after=1))
    assert post_chat(traced.origin, CHAT, "broken-whole").status_code == 502
    (attempt,) = by_kind(finished(exporter), SpanKind.CLIENT)
    assert attempt.status.status_code is StatusCode.ERROR
    assert attrs(attempt)["http.response.status_code"] == 200
    assert attrs(attempt)["error.type"] == "ReadError"


def test_a_provider_calls_span_names_the_genai_provider_and_the_server(
    traced: ProxyServer, fake_upstream: FakeUpstream, exporter: InMemorySpanExporter
) -> None:
    """The GenAI conventions require ``gen_ai.provider.name`` (``openai`` for an
    OpenAI-compatible API; ``gen_ai.system`` before it), and the HTTP client conventions
    ``server.address`` and ``server.port``: what trace backends find LLM calls and draw
    service maps by. The address is the host alone, never the baseUrl's user or path."""
    fake_upstream.script(reply("hi", usage=(3, 1)))
    assert post_chat(traced.origin, CHAT, "named").status_code == 200
    (attempt,) = by_kind(finished(exporter), SpanKind.CLIENT)
    assert attrs(attempt) == attrs(attempt) | {
        "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai",
        "server.address": "127.0.0.1",
        "server.port": fake_upstream.port,
    }
