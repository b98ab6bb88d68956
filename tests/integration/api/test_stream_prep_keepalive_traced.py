"""What the trace says of a streamed request whose ``200`` went out while it waited
(``prep_wait.py``) and whose preparation then failed: the client is told by one error
frame, and the request's span says the request failed, as it said when that error was the
response's status."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from proxy.services.forward import Forwarder
from proxy.settings import Settings
from proxy.store.db import DatabaseUnavailable
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.held_session import hold
from tests.integration.api.sse_frames import _data_frames, _payload
from tests.integration.api.test_stream_prep_keepalive import _read_beats, _stream
from tests.integration.api.test_tracing import attrs, by_kind, finished


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def traced(settings: Settings, exporter: InMemorySpanExporter) -> Iterator[ProxyServer]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server = ProxyServer(settings, tracer_provider=provider).start()
    yield server
    server.stop()
    provider.shutdown()


def test_a_5xx_after_an_early_200_marks_the_request_span_failed(
    traced: ProxyServer,
    fake_upstream: FakeUpstream,
    exporter: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    holder, _, pacer = hold(traced.origin, "late-503", fake_upstream)

    async def lost(self: Forwarder, turn: object) -> None:
        raise DatabaseUnavailable("connection to the proxy's database was lost")

    monkeypatch.setattr(Forwarder, "stream", lost)
    with _stream(traced.origin, "late-503", ["first", "second"]) as (resp, chunks):
        assert resp.status_code == 200
        _read_beats(chunks, 1)
        pacer.allow(10)
        rest = b"".join(chunks)
    holder.join()
    error = _payload(_data_frames(rest)[0])["error"]
    assert error["code"] == "database_unavailable"
    spans = finished(exporter, 2)
    called = {s.context.trace_id for s in by_kind(spans, SpanKind.CLIENT) if s.context}
    (request,) = [s for s in by_kind(spans, SpanKind.SERVER) if s.context.trace_id not in called]
    assert attrs(request)["http.response.status_code"] == 200  # what went out
    assert attrs(request)["error.type"] == "503"
    assert request.status.status_code is StatusCode.ERROR
