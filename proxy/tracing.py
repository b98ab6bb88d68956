"""OpenTelemetry tracing, off by default: one span per request, one per provider call.

On when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set,
exporting over OTLP/HTTP with the exporter's own ``OTEL_*`` settings, or when
``CASCADE_TRACING=console`` (spans printed to stdout); ``CASCADE_TRACING=off`` keeps it off
whatever the environment says. OpenTelemetry's own switches apply as its specification has
them: ``OTEL_SDK_DISABLED=true`` turns it off whatever else asks for it, and
``OTEL_TRACES_EXPORTER`` (``otlp``, ``console``, a comma-separated list of them, or
``none``) names the exporters when ``CASCADE_TRACING`` does not, ``none`` alone turning it
off. A switch the proxy cannot follow (another exporter, OpenTelemetry not installed) is a
:class:`~proxy.settings.SettingsError`: ``cascade-proxy serve`` refuses to start with one line
naming it, as it does a wrong ``CASCADE_*`` setting. Tests hand ``create_app`` a tracer
provider of their own.

OpenTelemetry is imported only when tracing is on, and with it off no span object is made:
the middleware and the provider calls test one attribute for ``None``. The packages are the
``tracing`` extra (``pip install 'cascade-proxy[tracing]'``).

Spans carry the GenAI semantic conventions' attributes (``gen_ai.operation.name``,
``gen_ai.request.model``, ``gen_ai.usage.input_tokens``, ``gen_ai.usage.output_tokens``) and
the cascade's own on a chat request's span (``cascade.session.occupancy``,
``cascade.tokens_reclaimed``, ``cascade.compaction``). No span carries a body, a key, a
session id or a tenant.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from proxy.tracing_export import EXPORTER_LOGGERS, watched
from proxy.tracing_settings import OTLP_ENV, check_tracing, otlp_target

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

__all__ = ["Tracing", "build_tracing", "operation_for", "path_template"]

log = logging.getLogger("cascade.tracing")

STOP_SECONDS = 5.0
"""How long the stop waits for the last spans to be exported. A collector that takes the
connection and never answers would otherwise hold the exit for the exporter's timeout on
each batch, and the SDK's flush for up to 30 s, all of it out of the supervisor's grace
period once the requests have drained; a collector that answers takes milliseconds."""

_OPERATIONS = {"/chat/completions": "chat", "/embeddings": "embeddings"}


def path_template(path: str) -> str:
    """A provider path with the id it names replaced: ``/models/{model}`` for one model's
    (whose id may hold slashes), the path itself for the others, which name none."""
    return "/models/{model}" if path.startswith("/models/") else path


def operation_for(path: str) -> str | None:
    """The GenAI ``gen_ai.operation.name`` of a provider path, or None for other calls."""
    for suffix, name in _OPERATIONS.items():
        if path.endswith(suffix):
            return name
    return None


class Tracing:
    """The app's tracer, whether it owns (and so shuts down) its provider, and where its
    spans go (``where``, for the start-up block: no user, password, query or header)."""

    def __init__(
        self,
        provider: TracerProvider,
        *,
        owned: bool,
        where: str = "the tracer provider handed to create_app",
    ) -> None:
        from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.provider = provider
        self.owned = owned
        self.where = where
        self.tracer: Tracer = provider.get_tracer("cascade-proxy")
        self._server = SpanKind.SERVER
        self._client = SpanKind.CLIENT
        self._in = set_span_in_context
        self._w3c = TraceContextTextMapPropagator()
        # no description: the status says that it failed, ``error.type`` how; a message
        # could quote what the proxy must not export
        self.failed = Status(StatusCode.ERROR)

    def start_request(self, method: str, carrier: Mapping[str, str] | None = None) -> Span:
        """The request's span (``method`` as OpenTelemetry's HTTP conventions spell it:
        ``_OTHER``, named ``HTTP``, for one outside HTTP's own); named ``METHOD route`` once
        the route is known. A client's
        W3C ``traceparent`` (and ``tracestate``) in ``carrier`` makes it a child of the
        client's span, in the client's trace; one that does not parse is ignored."""
        context = self._w3c.extract(carrier) if carrier else None
        return self.tracer.start_span(
            "HTTP" if method == "_OTHER" else method,
            context=context,
            kind=self._server,
            attributes={"http.request.method": method},
        )

    def start_child(self, name: str, parent: Span, attributes: dict[str, Any]) -> Span:
        """An internal span under ``parent``: a compaction's, under its request's."""
        return self.tracer.start_span(name, context=self._in(parent), attributes=attributes)

    def headers_for(self, span: Span) -> dict[str, str]:
        """The W3C ``traceparent`` (and ``tracestate``) naming ``span``, for the provider
        call it stands for: a traced provider's spans then join the request's trace."""
        carrier: dict[str, str] = {}
        self._w3c.inject(carrier, context=self._in(span))
        return carrier

    def start_attempt(
        self,
        parent: Span | None,
        provider: str,
        path: str,
        model: str | None,
        method: str = "POST",
    ) -> Span:
        """One provider call's span, a child of the request's."""
        operation = operation_for(path)
        template = path_template(path)
        attributes: dict[str, Any] = {
            "cascade.provider": provider,
            "url.path": path,
            "url.template": template,
            "http.request.method": method,
        }
        if operation is not None:  # every provider speaks OpenAI's API, as GenAI's names go
            attributes["gen_ai.operation.name"] = operation
            attributes["gen_ai.provider.name"] = attributes["gen_ai.system"] = "openai"
        if model:
            attributes["gen_ai.request.model"] = model
        context = self._in(parent) if parent is not None else None
        # GenAI's "{operation} {model}"; another call (a models call) is HTTP's
        # "{method} {url.template}": a name is a group, and a model id in it would make one a model
        name = (
            " ".join(part for part in (operation, model) if part)
            if operation
            else f"{method} {template}"
        )
        return self.tracer.start_span(
            name, context=context, kind=self._client, attributes=attributes
        )

    def shutdown(self) -> None:
        """Flush and stop the provider when this app made it, waiting ``STOP_SECONDS`` at
        most: spans still unexported then are dropped, said once (the exporter's thread is
        a daemon, and the SDK's own exit hook returns at once for a provider stopping)."""
        shutdown = getattr(self.provider, "shutdown", None) if self.owned else None
        if shutdown is None:
            return
        stopping = threading.Thread(target=shutdown, name="cascade-tracing-stop", daemon=True)
        stopping.start()
        stopping.join(STOP_SECONDS)
        if stopping.is_alive():
            log.warning(
                "tracing: the last spans were not exported within %g s of the stop and are "
                "dropped (%s)",
                STOP_SECONDS,
                self.where,
            )


def _one_line(span: Any) -> str:
    return str(span.to_json(indent=None)) + "\n"


def _service_name(env: Mapping[str, str]) -> str:
    """OpenTelemetry's order: ``OTEL_SERVICE_NAME``, else the ``service.name`` of
    ``OTEL_RESOURCE_ATTRIBUTES`` (the SDK reads that variable too, but a name given to
    ``Resource.create`` wins over it), else ``cascade-proxy``."""
    if name := env.get("OTEL_SERVICE_NAME"):
        return name
    for pair in (env.get("OTEL_RESOURCE_ATTRIBUTES") or "").split(","):
        key, _, value = pair.partition("=")
        if key.strip() == "service.name" and value.strip():
            return unquote(value.strip())
    return "cascade-proxy"


def _where(exporters: list[str], env: Mapping[str, str], service: str) -> str:
    """The start-up block's account of where spans go."""
    named = [
        "console (stdout)" if name == "console" else f"OTLP/HTTP to {otlp_target(env)}"
        for name in exporters
    ]
    return f"{' and '.join(named)}, service {service}"


class _WithoutQuery(logging.Filter):
    """Masks the traces endpoint's query string (a collector's key may be in it) in the
    exporter's own lines, which quote the URL: the log holds no query string."""

    query = ""

    def filter(self, record: logging.LogRecord) -> bool:
        if self.query and self.query in (text := record.getMessage()):
            record.msg, record.args = text.replace(self.query, "***"), None
        return True


_WITHOUT_QUERY = _WithoutQuery()


def _hide_query(env: Mapping[str, str]) -> None:
    """Put :data:`_WITHOUT_QUERY` on the exporter's loggers for this endpoint's query."""
    _WITHOUT_QUERY.query = urlsplit(env.get(OTLP_ENV[1], "").strip()).query
    if _WITHOUT_QUERY.query:
        for name in EXPORTER_LOGGERS:
            logging.getLogger(name).addFilter(_WITHOUT_QUERY)  # once: the same filter


def build_tracing(
    mode: str, env: Mapping[str, str] | None = None, provider: TracerProvider | None = None
) -> Tracing | None:
    """The app's tracing: ``provider`` when given (tests), else what ``mode``
    (``CASCADE_TRACING``) and the OpenTelemetry environment ask for, else None (off)."""
    if provider is not None:
        return Tracing(provider, owned=False)
    env = os.environ if env is None else env
    exporters = check_tracing(mode, env)
    if not exporters:
        return None
    if "otlp" in exporters:
        _hide_query(env)
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider as SdkProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
    )

    service = _service_name(env)
    resource = Resource.create({"service.name": service})
    sdk = SdkProvider(resource=resource)
    for name in exporters:
        if name == "console":
            # sys.stdout as it is now, not as it was when OpenTelemetry was first imported;
            # one span a line (the exporter's default is indented JSON over many lines), so a
            # log collector reading CASCADE_LOG_FORMAT=json output gets one JSON object a line
            exporter = ConsoleSpanExporter(out=sys.stdout, formatter=_one_line)
            sdk.add_span_processor(SimpleSpanProcessor(exporter))
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            otlp = watched(OTLPSpanExporter(), f"OTLP/HTTP to {otlp_target(env)}")
            sdk.add_span_processor(BatchSpanProcessor(otlp))  # type: ignore[arg-type]
    return Tracing(sdk, owned=True, where=_where(exporters, env, service))
