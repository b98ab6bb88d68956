"""A provider call that outlives its request (a background compaction's fast-model call)
still gets the tokens its answer reports on its span, as every other call's span has them:
an operator summing a trace's tokens counted the summariser's as none."""

from __future__ import annotations

import time
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

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
