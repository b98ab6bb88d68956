"""When tracing is on, and where its spans go (proxy/tracing.py). No exporter is contacted:
the OTLP one is built and shut down with no span to send."""

from __future__ import annotations

import http.server
import json
import logging
import os
import socket
import sys
import threading
import time

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from proxy import tracing as tracing_module
from proxy.settings import SettingsError
from proxy.tracing import build_tracing, operation_for
from tests.unit.test_metrics_multiproc import run_python

UNROUTABLE = "http://127.0.0.1:9"  # nothing listens there; nothing must be sent either


def test_tracing_is_off_unless_asked_for() -> None:
    assert build_tracing("", env={}) is None
    assert build_tracing("off", env={"OTEL_EXPORTER_OTLP_ENDPOINT": UNROUTABLE}) is None


@pytest.mark.parametrize(
    "name", ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
)
def test_an_otlp_endpoint_turns_on_batched_otlp_export(name: str) -> None:
    tracing = build_tracing("", env={name: UNROUTABLE, "OTEL_SERVICE_NAME": "cascade-test"})
    assert tracing is not None and tracing.owned
    provider = tracing.provider
    assert isinstance(provider, TracerProvider)
    processors = provider._active_span_processor._span_processors
    assert [type(p) for p in processors] == [BatchSpanProcessor]
    assert isinstance(processors[0]._batch_processor._exporter.exporter, OTLPSpanExporter)
    assert provider.resource.attributes["service.name"] == "cascade-test"
    tracing.shutdown()  # no span was made: nothing is sent


def test_console_tracing_prints_each_span(capsys: pytest.CaptureFixture[str]) -> None:
    tracing = build_tracing("console", env={})
    assert tracing is not None
    request = tracing.start_request("POST")
    attempt = tracing.start_attempt(request, "openai", "/chat/completions", "gpt-4o")
    attempt.end()
    request.end()
    tracing.shutdown()
    out = capsys.readouterr().out
    spans = [json.loads(line) for line in out.splitlines()]  # one span a line, like the logs
    assert [s["name"] for s in spans] == ["chat gpt-4o", "POST"]
    assert spans[0]["parent_id"] == spans[1]["context"]["span_id"]
    assert spans[0]["attributes"]["gen_ai.operation.name"] == "chat"


def test_an_injected_provider_is_used_and_left_to_its_owner() -> None:
    provider = TracerProvider()
    tracing = build_tracing("off", env={}, provider=provider)
    assert tracing is not None and tracing.provider is provider and not tracing.owned


def test_operations_are_named_after_the_genai_conventions() -> None:
    assert operation_for("/chat/completions") == "chat"
    assert operation_for("/v1/chat/completions") == "chat"
    assert operation_for("/embeddings") == "embeddings"
    assert operation_for("/models") is None


def test_with_tracing_off_no_span_is_made_and_the_sdk_is_not_loaded() -> None:
    code = (
        "import sys\n"
        "from proxy.app import create_app\n"
        "from proxy.metrics import Metrics\n"
        "from proxy.observe import Observer, RequestObs\n"
        "from proxy.settings import Settings\n"
        "create_app(Settings(config=None, watch_config=False))\n"
        "obs = RequestObs(Observer(Metrics()), None)\n"
        "assert obs.attempt_started('openai', '/chat/completions', 'gpt-4o') == ('openai', None)\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry.sdk')]\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CASCADE_"))}
    run_python(code, env=env)


def test_a_service_name_in_the_resource_attributes_is_kept() -> None:
    """OpenTelemetry's own rule: ``OTEL_SERVICE_NAME``, else the ``service.name`` of
    ``OTEL_RESOURCE_ATTRIBUTES``; the proxy's default only when neither names one."""
    attributes = "deployment.environment=prod,service.name=billing%20proxy"
    named = {"OTEL_EXPORTER_OTLP_ENDPOINT": UNROUTABLE, "OTEL_RESOURCE_ATTRIBUTES": attributes}
    for env, expected in [
        (named, "billing proxy"),
        ({**named, "OTEL_SERVICE_NAME": "cascade-test"}, "cascade-test"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": UNROUTABLE}, "cascade-proxy"),
    ]:
        tracing = build_tracing("", env=env)
        assert tracing is not None
        assert tracing.provider.resource.attributes["service.name"] == expected  # type: ignore[attr-defined]
        tracing.shutdown()


def _exporters(tracing: object) -> list[str]:
    """The exporters' class names, in the order their processors were added."""
    processors = tracing.provider._active_span_processor._span_processors  # type: ignore[attr-defined]
    made = [getattr(p, "span_exporter", None) or p._batch_processor._exporter for p in processors]
    return [type(getattr(e, "exporter", e)).__name__ for e in made]  # the OTLP one is watched


@pytest.mark.parametrize("value", ["true", "TRUE", " True "])
def test_a_disabled_sdk_turns_tracing_off_whatever_else_asks_for_it(value: str) -> None:
    env = {"OTEL_SDK_DISABLED": value, "OTEL_EXPORTER_OTLP_ENDPOINT": UNROUTABLE}
    for mode in ("", "console", "otlp"):
        assert build_tracing(mode, env=env) is None, mode
    assert build_tracing("", env={**env, "OTEL_TRACES_EXPORTER": "console"}) is None


def test_only_true_disables_the_sdk() -> None:
    env = {"OTEL_SDK_DISABLED": "1", "OTEL_EXPORTER_OTLP_ENDPOINT": UNROUTABLE}
    tracing = build_tracing("", env=env)  # the specification's boolean: "true" or false
    assert tracing is not None
    tracing.shutdown()


@pytest.mark.parametrize("value", ["none", "NONE", "none,"])
def test_the_none_exporter_turns_tracing_off(value: str) -> None:
    env = {"OTEL_TRACES_EXPORTER": value, "OTEL_EXPORTER_OTLP_ENDPOINT": UNROUTABLE}
    assert build_tracing("", env=env) is None


@pytest.mark.parametrize(
    ("value", "exporters"),
    [
        ("otlp", ["OTLPSpanExporter"]),  # without an endpoint: OTLP's default one
        ("console", ["ConsoleSpanExporter"]),
        ("otlp, console", ["OTLPSpanExporter", "ConsoleSpanExporter"]),
        ("none,console", ["ConsoleSpanExporter"]),
    ],
)
def test_the_named_exporters_are_the_ones_made(value: str, exporters: list[str]) -> None:
    tracing = build_tracing("", env={"OTEL_TRACES_EXPORTER": value})
    assert tracing is not None
    assert _exporters(tracing) == exporters
    tracing.shutdown()  # no span was made: nothing is sent
    # with an endpoint set, the console alone is still what was asked for
    with_endpoint = {"OTEL_TRACES_EXPORTER": value, "OTEL_EXPORTER_OTLP_ENDPOINT": UNROUTABLE}
    tracing = build_tracing("", env=with_endpoint)
    assert tracing is not None and _exporters(tracing) == exporters
    tracing.shutdown()


def test_cascade_tracing_names_the_exporter_over_otel_traces_exporter() -> None:
    tracing = build_tracing("console", env={"OTEL_TRACES_EXPORTER": "none"})
    assert tracing is not None and _exporters(tracing) == ["ConsoleSpanExporter"]
    assert build_tracing("off", env={"OTEL_TRACES_EXPORTER": "otlp"}) is None


def test_an_exporter_the_proxy_does_not_have_is_refused_by_name() -> None:
    with pytest.raises(SettingsError, match="OTEL_TRACES_EXPORTER.*'zipkin'"):
        build_tracing("", env={"OTEL_TRACES_EXPORTER": "otlp,zipkin"})


def test_tracing_asked_for_without_opentelemetry_is_a_refused_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A refused setting, which ``cascade-proxy serve`` prints as one line, not a traceback."""
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.resources", None)  # import fails
    with pytest.raises(SettingsError, match=r"pip install 'cascade-proxy\[tracing\]'"):
        build_tracing("console", env={})


@pytest.mark.parametrize(
    "name", ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
)
@pytest.mark.parametrize("value", ["otel-collector:4318", "grpc://u:SECRET@h:4317", "http://"])
def test_an_otlp_endpoint_that_is_no_http_url_is_refused_by_name(name: str, value: str) -> None:
    # Regression: the start went on, and each batch of spans was one ERROR line, "Invalid URL
    # 'notaurl/v1/traces': No scheme supplied", so no span was ever exported.
    with pytest.raises(SettingsError, match=f"^{name}: not an http") as refused:
        build_tracing("", env={name: value})
    assert "SECRET" not in str(refused.value)
    assert build_tracing("console", env={name: value}) is not None  # not exported to: not read


@pytest.mark.parametrize(
    ("env", "where"),
    [
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://ops:pw-77@collector.lan:4318/"},
            "OTLP/HTTP to https://collector.lan:4318/v1/traces, service cascade-proxy",
        ),
        (
            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://collector.lan/v1/traces?token=tk-9"},
            "OTLP/HTTP to https://collector.lan/v1/traces, service cascade-proxy",
        ),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector.lan:4318/otlp"},
            "OTLP/HTTP to http://collector.lan:4318/otlp/v1/traces, service cascade-proxy",
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://ignored:4318",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://traces.lan:4318/in",
                "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer hdr-secret-5",
                "OTEL_SERVICE_NAME": "edge",
            },
            "OTLP/HTTP to http://traces.lan:4318/in, service edge",
        ),
        (
            {"OTEL_TRACES_EXPORTER": "otlp,console"},
            "OTLP/HTTP to http://localhost:4318/v1/traces and console (stdout), service"
            " cascade-proxy",
        ),
    ],
)
def test_where_spans_go_is_said_without_credentials(env: dict[str, str], where: str) -> None:
    """The start-up block's tracing line (``Tracing.where``): the place the exporter sends
    to, as it resolves the variables, and never a password, query or header of them."""
    tracing = build_tracing("", env=env)
    assert tracing is not None
    try:
        assert tracing.where == where
    finally:
        tracing.shutdown()


@pytest.mark.parametrize(
    "name", ["OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"]
)
def test_an_otlp_protocol_other_than_http_protobuf_is_refused(name: str) -> None:
    """The exporter is OTLP/HTTP with protobuf: asked for gRPC (a collector's 4317) it would
    send HTTP there and fail every batch, one ERROR line each, exporting nothing."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", name: "grpc"}
    with pytest.raises(SettingsError, match=f"^{name} is 'grpc'.*http/protobuf"):
        build_tracing("", env=env)
    ok = build_tracing("", env={**env, name: "http/protobuf"})
    assert ok is not None
    ok.shutdown()
    assert build_tracing("console", env=env) is not None  # no OTLP exporter: nothing to send


@pytest.mark.parametrize("value", ["http://collector:4318/?token=tk-9", "http://collector:4318#x"])
def test_a_general_otlp_endpoint_with_a_query_is_refused(value: str) -> None:
    """The exporter appends ``/v1/traces`` to ``OTEL_EXPORTER_OTLP_ENDPOINT`` as a string, so
    a query or fragment ends up before the path (``/?token=tk-9/v1/traces``): every batch
    would go elsewhere than the start-up block says, and the exporter's warnings would quote
    the query. The traces' own endpoint, used as given, may carry one."""
    name = "OTEL_EXPORTER_OTLP_ENDPOINT"
    with pytest.raises(SettingsError, match=f"^{name}: has a query string or fragment") as no:
        build_tracing("", env={name: value})
    assert "tk-9" not in str(no.value)
    own = {name: value, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}
    tracing = build_tracing("", env=own)  # the general one is not what traces go to
    assert tracing is not None
    tracing.shutdown()


def test_the_exporters_lines_never_quote_the_traces_endpoints_query(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A traces endpoint used as given may carry the collector's key in its query; the
    exporter's own warnings (``Transient error … url: /v1/traces?api-key=…``) quote the
    URL, and the proxy's log holds no query string (README: Logs)."""
    env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:1/v1/traces?api-key=tk-9"}
    tracing = build_tracing("", env=env)
    assert tracing is not None
    try:
        for name in (
            "opentelemetry.exporter.otlp.proto.http.trace_exporter",
            "opentelemetry.exporter.otlp.common.http",
        ):
            logging.getLogger(name).warning(
                "Transient error %s encountered while exporting %s batch",
                "Max retries exceeded with url: /v1/traces?api-key=tk-9 (Caused by …)",
                "spans",
            )
    finally:
        tracing.shutdown()
    lines = [r.getMessage() for r in caplog.records if "Transient" in r.getMessage()]
    assert len(lines) == 2
    assert not [line for line in lines if "tk-9" in line], lines


def test_a_collector_that_never_answers_holds_the_stop_only_briefly(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A collector that takes the connection and never answers would hold the stop for
    the exporter's timeout (10 s), and the SDK's flush for up to 30 s: the stop waits
    ``STOP_SECONDS`` for the last spans, then drops them, saying so once."""
    monkeypatch.setattr(tracing_module, "STOP_SECONDS", 0.3)
    with socket.create_server(("127.0.0.1", 0)) as silent:  # takes connections, never answers
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)  # the exporter reads it
        tracing = build_tracing("", env={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
        assert tracing is not None
        tracing.start_request("GET").end()
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="cascade.tracing"):
            tracing.shutdown()
        took = time.monotonic() - started
    assert took < 2, took
    lines = [r.getMessage() for r in caplog.records if r.name == "cascade.tracing"]
    assert len(lines) == 1 and "0.3 s" in lines[0] and endpoint in lines[0], lines


@pytest.mark.parametrize(
    ("name", "value", "place"),
    [
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-honeycomb-team:hc-s3cret", 1),  # ':' for '='
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=t1,hc-s3cret", 2),
        ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "Authorization: Bearer hc-s3cret", 1),
    ],
)
def test_an_otlp_header_that_is_no_name_value_pair_is_refused_unquoted(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    name: str,
    value: str,
    place: int,
) -> None:
    """The exporter drops such an entry, so the collector refuses every batch for want of its
    key, and says so in a warning quoting the entry, the collector's key with it: the start
    is refused instead, naming the variable and the entry's place, never its text."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": UNROUTABLE, name: value}
    for key, val in env.items():
        monkeypatch.setenv(key, val)  # the exporter reads the environment itself
    with caplog.at_level(logging.DEBUG), pytest.raises(SettingsError) as refused:
        build_tracing("", env=env)
    assert f"{name}: entry {place} is not name=value" in str(refused.value)
    assert "s3cret" not in str(refused.value)
    assert not [r for r in caplog.records if "s3cret" in r.getMessage()]


@pytest.mark.parametrize(
    "value",
    [
        "x-tenant=t1, Authorization=Bearer%20k-1,",
        "x-tenant=t1, ",  # a blank entry, which the exporter skips as it does an empty one
        "x-tenant=t1 , ,api-key=k-1",
    ],
)
def test_otlp_headers_of_name_value_pairs_are_taken(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, value: str
) -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": UNROUTABLE, "OTEL_EXPORTER_OTLP_HEADERS": value}
    for key, val in env.items():
        monkeypatch.setenv(key, val)
    with caplog.at_level(logging.WARNING):
        tracing = build_tracing("", env=env)
    assert tracing is not None
    tracing.shutdown()
    # the headers are read as the exporter is built, on this thread; another test's exporter
    # thread still retrying its last batch logs into the same capture
    assert not [r for r in caplog.records if r.thread == threading.get_ident()]


class _Collector(http.server.BaseHTTPRequestHandler):
    status = 400  # refused, and not retried: each batch fails at once

    def do_POST(self) -> None:  # noqa: N802 (http.server's spelling)
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(type(self).status)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_a_collector_outage_is_said_once_and_its_end_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The exporter logs every batch it cannot deliver, as long as the collector is down:
    its lines for the first, one warning that spans are dropped, then nothing until one
    that says the collector is back."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setattr(_Collector, "status", 400)
    tracing = build_tracing("", env={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
    assert tracing is not None

    def batch() -> list[str]:
        caplog.clear()
        tracing.start_request("GET").end()
        tracing.provider.force_flush()
        return [f"{r.name}: {r.getMessage()}" for r in caplog.records]

    try:
        with caplog.at_level(logging.INFO):
            first = batch()
            assert any("400" in line for line in first if "opentelemetry" in line), first
            assert [x for x in first if x.startswith("cascade.tracing")] == [
                f"cascade.tracing: tracing: the collector takes no spans (OTLP/HTTP to "
                f"{endpoint}/v1/traces; the exporter's lines before this say why): they are "
                "dropped until it does, and its lines are left out meanwhile"
            ]
            assert batch() == [] and batch() == []
            monkeypatch.setattr(_Collector, "status", 200)
            back = batch()
            assert len(back) == 1 and "takes spans again" in back[0], back
            assert back[0].endswith("; 3 batches dropped"), back
            assert batch() == []
    finally:
        tracing.shutdown()
        server.shutdown()
