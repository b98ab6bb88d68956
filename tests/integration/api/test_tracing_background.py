"""A provider call that outlives its request (a background compaction's fast-model call)
still gets the tokens its answer reports on its span, as every other call's span has them:
an operator summing a trace's tokens counted the summariser's as none."""

from __future__ import annotations

import time
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import FAST, Agent, Model, Stack, wait_until, words
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.test_tracing import attrs, by_kind


def test_a_background_fast_model_call_has_its_usage_on_its_span(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    fake_upstream.default = Model(fast_delay=0.3)  # the briefing comes after the answer
    s = Stack(tmp_path, db_dsn, fake_upstream)
    s.servers = [ProxyServer(s.servers[0].settings, tracer_provider=provider)]
    try:
        with s:
            agent = Agent(s.client("background"))
            for i in range(6):
                agent.say(words(450, f"t{i}"))
            wait_until(s.fast_bodies, what="a compaction")
            deadline = time.monotonic() + 5
            while not (fast := _fast_calls(exporter)) and time.monotonic() < deadline:
                time.sleep(0.05)
        assert fast, "no fast-model span ended"
        for span in fast:
            assert attrs(span)["gen_ai.usage.input_tokens"] > 0, attrs(span)
            assert "gen_ai.usage.output_tokens" in attrs(span)
    finally:
        provider.shutdown()


def _fast_calls(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    calls = by_kind(exporter.get_finished_spans(), SpanKind.CLIENT)
    return [c for c in calls if attrs(c).get("gen_ai.request.model") == FAST]


def _traced_stack(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, **summarize: object
) -> tuple[Stack, InMemorySpanExporter, TracerProvider]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    s = Stack(tmp_path, db_dsn, fake_upstream, summarize={"background": False, **summarize})
    s.servers = [ProxyServer(s.servers[0].settings, tracer_provider=provider)]
    return s, exporter, provider


def test_a_compaction_is_a_span_of_its_own_holding_its_fast_model_calls(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """What a compaction took (its reads, the fast model, its writes) shows in the trace as
    one span under the request's, its calls under it, its result on it."""
    fake_upstream.default = Model()
    s, exporter, provider = _traced_stack(tmp_path, db_dsn, fake_upstream)
    try:
        with s:
            agent = Agent(s.client("own-span"))
            for i in range(6):
                agent.say(words(450, f"t{i}"))
            assert s.fast_bodies(), "no compaction ran"
        spans = exporter.get_finished_spans()
    finally:
        provider.shutdown()
    compactions = [x for x in spans if x.name == "compaction"]
    assert compactions
    requests = {x.context.span_id: x for x in by_kind(spans, SpanKind.SERVER) if x.context}
    for compaction in compactions:
        assert compaction.kind is SpanKind.INTERNAL
        assert compaction.parent is not None and compaction.parent.span_id in requests
        assert attrs(compaction)["cascade.compaction"] == "completed"
        assert attrs(compaction)["cascade.compaction.trigger"] in ("soft", "hard", "overflow")
    ids = {x.context.span_id for x in compactions if x.context}
    fast = _fast_calls(exporter)
    assert fast and all(c.parent is not None and c.parent.span_id in ids for c in fast)


def test_a_failed_compactions_span_is_an_error_naming_its_reason(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.default = Model(fast_failures=100)
    s, exporter, provider = _traced_stack(tmp_path, db_dsn, fake_upstream, maxAttempts=1)
    try:
        with s:
            Agent(s.client("own-span-failed")).fill()
            assert s.fast_bodies(), "no compaction ran"
        spans = exporter.get_finished_spans()
    finally:
        provider.shutdown()
    failed = [x for x in spans if x.name == "compaction"]
    assert failed
    for span in failed:
        assert span.status.status_code is StatusCode.ERROR
        assert attrs(span)["error.type"] == attrs(span)["cascade.compaction"] == "summary_failed"
