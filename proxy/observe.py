"""Observing requests: the ``Observe`` middleware, and the notes services send it.

``Observe`` sits just inside ``AccessLog`` (whose ``requestlog.RequestRecord`` it extends with
a ``RequestObs``). For every HTTP request it counts ``cascade_requests_total``, the duration
and the requests in flight by route template (``route_templates.py``), opens the request's
span when tracing is on, and puts ``X-Cascade-Overhead-Ms`` on every chat response: the
milliseconds from the request's arrival until its response started, less the time spent
waiting for providers (for a stream, until the provider's first byte). The same figure goes to
``cascade_overhead_seconds`` for each request that called a provider.

Code further down reports to the request's ``RequestObs`` through the notes
(``observe_notes.py``, exported here too), without being handed the request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy import requestlog
from proxy.metrics import Metrics
from proxy.observe_notes import (
    compaction_span,
    current_compaction,
    note_answer,
    note_bad_answer,
    note_compaction_event,
    note_embedding_failure,
    note_late_error,
    note_occupancy,
    note_step_events,
    note_swept_compaction,
    note_usage,
)
from proxy.route_templates import route_template
from proxy.tracing import Tracing, operation_for

__all__ = [
    "OVERHEAD_HEADER",
    "compaction_span",
    "Observe",
    "Observer",
    "RequestObs",
    "note_answer",
    "note_bad_answer",
    "note_compaction_event",
    "note_embedding_failure",
    "note_late_error",
    "note_occupancy",
    "note_step_events",
    "note_swept_compaction",
    "note_usage",
]

OVERHEAD_HEADER = b"x-cascade-overhead-ms"
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_CHAT = "/chat/completions"
# the metrics' "other" method as OpenTelemetry's HTTP conventions spell it: a client's
# invented methods make one group in a trace viewer, not one each
_OTEL_METHOD = {"other": "_OTHER"}


@dataclass(frozen=True, slots=True)
class Observer:
    """One app's metrics, and its tracing (None: off)."""

    metrics: Metrics
    tracing: Tracing | None = None

    def note_usage(self, operation: str, model: str, usage: Any) -> None:
        """A provider call's ``usage`` from code that runs in a request or outside any
        (retrieval's embedder: a new turn's query, the background batches): in one, as
        ``note_usage`` counts it, its call's span too; outside, in the metrics alone."""
        if not note_usage(model, usage, operation) and isinstance(usage, dict):
            self.metrics.note_usage(operation, model, usage)

    def close(self) -> None:
        self.metrics.close()
        if self.tracing is not None:
            self.tracing.shutdown()


class RequestObs:
    """What one request's metrics and span gather while it runs."""

    __slots__ = (
        "observer",
        "span",
        "pending",
        "done",
        "model",
        "input_tokens",
        "output_tokens",
        "reclaimed",
        "compaction",
        "occupancy",
        "calls",
        "late_error",
    )

    def __init__(self, observer: Observer, span: Any) -> None:
        self.observer = observer
        self.span = span
        self.pending: tuple[Any, int] | None = None  # an ended call's span, awaiting its usage
        self.done = False
        self.model: str | None = None
        self.input_tokens = 0
        self.output_tokens = 0
        self.reclaimed = 0
        self.compaction: str | None = None
        self.occupancy: int | None = None
        self.calls = 0
        self.late_error: int | None = None  # an error status told after the 200 (a frame)

    def attempt_started(
        self, provider: str, path: str, model: str | None, method: str = "POST"
    ) -> tuple[str, Any]:
        """A provider call begins (``requestlog.UpstreamTimer``): its span, when tracing."""
        self.calls += 1
        tracing = self.observer.tracing
        if tracing is None:
            return provider, None
        self.end_pending()
        parent = current_compaction() or self.span  # a compaction's call goes under its span
        return provider, tracing.start_attempt(parent, provider, path, model, method)

    def trace_headers(
        self, attempt: tuple[str, Any], host: str, port: int | None
    ) -> dict[str, str]:
        """The trace context a provider call to ``host`` sends upstream: its own span's,
        which names the server (OpenTelemetry's ``server.address`` and ``server.port``)."""
        span = attempt[1]
        tracing = self.observer.tracing
        if span is None or tracing is None:
            return {}
        span.set_attribute("server.address", host)
        if port is not None:
            span.set_attribute("server.port", port)
        return tracing.headers_for(span)

    def attempt_done(
        self,
        attempt: tuple[str, Any],
        seconds: float,
        status: int | None,
        cancelled: bool = False,
        failure: str | None = None,
    ) -> None:
        """A provider call ended; one the proxy cancelled (``cancelled``) failed nowhere, one
        whose answer broke off (``failure``, the exception's type) failed after its status."""
        provider, span = attempt
        metrics = self.observer.metrics
        metrics.upstream_duration.labels(provider or "unnamed").observe(seconds)
        # a client span's 4xx is an error too (OTel HTTP); a cancelled call is none
        error = None
        if failure is not None or (not cancelled and (status is None or status >= 400)):
            error = failure or str(status or "unreachable")
            metrics.upstream_errors.labels(provider or "unnamed", error).inc()
        if span is None:
            return
        if status is not None:
            span.set_attribute("http.response.status_code", status)
        if error is not None:
            span.set_attribute("error.type", error)
            self._failed(span)
        end = time.time_ns()
        # its usage is read by the caller after the call: ``note_usage`` ends it, or the
        # next call, or the request's end; a background call outliving its request has
        # none of those, so the loop's next turn ends it, after the caller's note
        self.end_pending()
        self.pending = (span, end)
        if self.done:
            try:
                asyncio.get_running_loop().call_soon(self._end_late, span)
            except RuntimeError:  # no loop running: no note can follow
                self.end_pending()

    def _end_late(self, span: Any) -> None:
        if self.pending is not None and self.pending[0] is span:
            self.end_pending()

    def end_pending(self, usage: Mapping[str, Any] | None = None) -> None:
        if self.pending is None:
            return
        span, end = self.pending
        self.pending = None
        if usage:
            _set_usage(span, usage)
        span.end(end_time=end)

    def _failed(self, span: Any) -> None:
        """Mark ``span`` failed (its status; ``error.type`` says how)."""
        if (tracing := self.observer.tracing) is not None:
            span.set_status(tracing.failed)

    def finish(self, method: str, route: str, status: int, raised: str | None = None) -> None:
        """The request ended: its span too, when traced."""
        if self.span is None:
            self.done = True
        else:
            self.finish_span(method, route, status, raised)

    def finish_span(self, method: str, route: str, status: int, raised: str | None = None) -> None:
        """End the request's span; ``raised``: the class of the exception that broke the
        request off after a status below 500 went out (a stream's 200), or before any did,
        which says how it failed where no status does."""
        self.done = True
        self.end_pending()
        span = self.span
        method = _OTEL_METHOD.get(method, method)
        name = "HTTP" if method == "_OTHER" else method
        attributes: dict[str, Any] = {"http.response.status_code": status}
        if route != "none":  # no route took it: the method alone, as OTel's HTTP names go
            name = f"{name} {route}"
            attributes["http.route"] = route
        span.update_name(name)
        # a POST alone is a model's operation (another method the route refuses, a 405)
        if method == "POST" and (operation := operation_for(route)):
            attributes["gen_ai.operation.name"] = operation
            if operation == "chat":  # the cascade runs on chat requests alone
                attributes["cascade.tokens_reclaimed"] = self.reclaimed
        if self.model is not None:
            attributes["gen_ai.request.model"] = self.model
            attributes["gen_ai.usage.input_tokens"] = self.input_tokens
            attributes["gen_ai.usage.output_tokens"] = self.output_tokens
        if self.compaction is not None:
            attributes["cascade.compaction"] = self.compaction
        if self.occupancy is not None:
            attributes["cascade.session.occupancy"] = self.occupancy
        failed = status if status >= 500 else (self.late_error or status)
        if raised is not None or failed >= 500:  # a server span's 4xx is the client's error
            attributes["error.type"] = raised or str(failed)
            self._failed(span)
        span.set_attributes(attributes)
        span.end()


def _set_usage(span: Any, usage: Mapping[str, Any]) -> None:
    for attr, key in (
        ("gen_ai.usage.input_tokens", "prompt_tokens"),
        ("gen_ai.usage.output_tokens", "completion_tokens"),
    ):
        if isinstance(value := usage.get(key), int):
            span.set_attribute(attr, value)


# -- the middleware -------------------------------------------------------------------------


class Observe:
    """Per-request metrics, the overhead header, and the request's span (see the module)."""

    def __init__(self, app: ASGIApp, observer: Observer) -> None:
        self.app = app
        self.observer = observer
        self._templates: dict[Any, str] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        metrics = self.observer.metrics
        method = scope["method"] if scope["method"] in _METHODS else "other"
        tracing = self.observer.tracing
        obs = RequestObs(
            self.observer,
            tracing.start_request(_OTEL_METHOD.get(method, method), _trace_context(scope))
            if tracing
            else None,
        )
        record = requestlog.current()
        if record is not None:
            record.obs = obs
        start = time.perf_counter()
        status = 500
        counted = False
        route: str | None = None
        overhead: float | None = None
        metrics.inflight.inc()

        def count() -> None:
            """Once, when the last byte goes out (before it does: a client that scrapes
            right after its answer sees it), or when the request ends without one."""
            nonlocal counted, route
            counted = True
            metrics.inflight.dec()
            route = route or route_template(scope, self._templates)
            metrics.requests.labels(route, method, str(status)).inc()
            metrics.request_duration.labels(route).observe(time.perf_counter() - start)
            if overhead is not None and obs.calls:
                metrics.overhead.observe(overhead)
            if record is not None and record.session_waited is not None:
                metrics.session_wait.observe(record.session_waited)

        async def send_observed(message: Message) -> None:
            nonlocal status, overhead, route
            if message["type"] == "http.response.start":
                status = message["status"]
                now = time.perf_counter()
                overhead = max(0.0, now - start - _waited(record, now))
                route = route_template(scope, self._templates)
                if route.endswith(_CHAT):
                    value = f"{overhead * 1000:.2f}".encode("ascii")
                    headers = [*message.get("headers", ()), (OVERHEAD_HEADER, value)]
                    message = {**message, "headers": headers}
            elif (
                message["type"] == "http.response.body"
                and not message.get("more_body")
                and not counted
            ):
                count()
            await send(message)

        raised: str | None = None
        try:
            await self.app(scope, receive, send_observed)
        except (Exception, asyncio.CancelledError) as exc:
            raised = _raised(exc, status if overhead is not None else None)
            raise
        finally:
            if not counted:
                count()
            obs.finish(method, route or route_template(scope, self._templates), status, raised)


def _raised(exc: BaseException, status: int | None) -> str | None:
    """The ``error.type`` of an exception that broke a request off after ``status`` went
    out (None: before any did): its class, unless a 5xx already says it failed, or it is
    the client gone, no failure: Starlette's ``ClientDisconnect`` for a send the server
    refused, or the server's own ``OSError`` (an ASGI 2.4 server's, for a peer gone) where
    no Starlette response turned it into one. A ``CancelledError`` is the server's stop
    cutting what still ran (uvicorn cancels no request whose client left), a failure."""
    if isinstance(exc, ClientDisconnect | OSError) or (status is not None and status >= 500):
        return None
    return type(exc).__name__


_TRACE_HEADERS = (b"traceparent", b"tracestate")


def _trace_context(scope: Scope) -> dict[str, str]:
    """The client's W3C trace context headers, if it sent any."""
    return {
        name.decode("latin-1"): value.decode("latin-1")
        for name, value in scope["headers"]
        if name in _TRACE_HEADERS
    }


def _waited(record: requestlog.RequestRecord | None, now: float) -> float:
    """Time spent waiting for providers so far: finished waits, and the ones still running."""
    if record is None:
        return 0.0
    return record.upstream_waited + sum(now - t for t in record.waits)
