"""Prometheus metrics: what one app instance counts, and ``GET /metrics``.

Each ``create_app`` owns a ``Metrics`` with its own registry, so two apps in one process (a
test's two replicas) report separately. Under several uvicorn workers, set
``PROMETHEUS_MULTIPROC_DIR`` to an empty directory before the server starts: prometheus-client
then keeps every value in per-process files there, and ``/metrics`` on any worker reports the
sum over all of them (``MultiProcessCollector``); a worker that stops removes its live gauges
(``close``). What an earlier process left there is dealt with at start
(``metrics_dir.drop_leftovers``): its live gauges go, its counts stay, named in one warning.

No label carries a session id or a tenant: ``route`` is the route's template
(``/s/{session_id}/v1/chat/completions``), never the path, and a request no route takes is
``route="none"``. ``gen_ai_client_token_usage`` follows OpenTelemetry's GenAI semantic
conventions (``gen_ai.client.token.usage``), its attribute names in Prometheus form. Its
``gen_ai_request_model`` is the model sent upstream, the client's own ``model`` unless the
agent names one, so it is bounded: the first
``MODEL_LABELS`` distinct names a process sees that are short printable tokens, then
``other`` (a client sending a fresh name on every request would otherwise add series
without end, each one kept for the life of the process).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    enable_created_metrics,
    generate_latest,
    multiprocess,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from starlette.requests import Request
from starlette.responses import Response

from proxy.cascade.types import CONFIG_RELOADED
from proxy.metrics_dir import check_multiproc_dir, multiproc_dir

__all__ = [
    "CONFIG_RESULTS",
    "CREATED_ENV",
    "Metrics",
    "MODEL_LABELS",
    "OTHER_MODEL",
    "RESULTS",
    "STAGES",
]

log = logging.getLogger("cascade.metrics")

CREATED_ENV = "PROMETHEUS_DISABLE_CREATED_SERIES"
"""prometheus-client's own switch for the ``*_created`` series; unset or empty, the proxy turns
them off."""
STAGES = ("truncation", "eviction", "compaction", "overflow")
"""The ``stage`` values of ``cascade_tokens_reclaimed_total``."""

RESULTS = (
    "completed",
    "summary_failed",
    "server_busy",
    "history_changed",
    "agent_changed",
    "interrupted",
)
"""The ``result`` values of ``cascade_compactions_total`` (README: Metrics). ``interrupted``
is counted by the process a stop cut a started compaction in, as the stop cuts it, and when
the session's next compaction closes one an earlier process left running; the stop's close
and the pass at start-up are not in a request, and count none."""

CONFIG_RESULTS = ("reloaded", "rejected")
"""The ``result`` values of ``cascade_config_reloads_total``."""

MODEL_LABELS = 64
"""The most distinct ``gen_ai_request_model`` values one process exports."""

OTHER_MODEL = "other"
"""The ``gen_ai_request_model`` of every model past ``MODEL_LABELS``, and of any name that is
not a short printable token."""

_MODEL_NAME = re.compile(r"[!-~]{1,128}")


_DURATION = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_OVERHEAD = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
# The semantic conventions' advice for gen_ai.client.token.usage: powers of 4.
_TOKENS = tuple(4.0**i for i in range(14))


_CREATED: bool | None = None
"""Whether this process exports the ``*_created`` series, once its first :class:`Metrics`
read :data:`CREATED_ENV` (None before)."""


def _created_series() -> None:
    """The ``*_created`` series (a counter's or histogram's creation time, a gauge of its own
    per label set in the text format) are off unless :data:`CREATED_ENV` says otherwise, as
    prometheus-client reads it: they double the counters' series for a figure no dashboard
    here reads, and multiprocess mode never exports them, so both modes export the same
    names. prometheus-client keeps the switch in one global of the process, read as each
    app renders, so the first app made in the process sets it: a later one made under
    another value (an embedding, tests) follows it, with a warning, rather than change
    what the first one exports under it."""
    global _CREATED
    value = os.environ.get(CREATED_ENV) or None  # an empty variable is an unset one
    wanted = value is not None and value.lower() not in ("true", "1", "t")
    if _CREATED is None:
        _CREATED = wanted
        if wanted:
            enable_created_metrics()  # type: ignore[no-untyped-call]
        else:
            disable_created_metrics()  # type: ignore[no-untyped-call]
    elif wanted != _CREATED:
        log.warning(
            "%s=%s asks for the *_created series %s, but this process's first app %s them "
            "and the switch is the process's (prometheus-client's): this app follows it; "
            "run it in a process of its own",
            CREATED_ENV,
            value or "",
            "on" if wanted else "off",
            "exports" if _CREATED else "leaves out",
        )


class Metrics:
    """Every metric the proxy exports, registered in a registry of its own."""

    def __init__(self, *, multiprocess_dir: str | None = None) -> None:
        _created_series()
        self.multiprocess_dir = multiprocess_dir
        self.registry = CollectorRegistry(auto_describe=True)
        if multiprocess_dir is None:  # process figures do not sum across workers
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)
        r = self.registry
        self.requests = Counter(
            "cascade_requests_total",
            "HTTP requests answered, by route template, method and status.",
            ("route", "method", "status"),
            registry=r,
        )
        self.request_duration = Histogram(
            "cascade_request_duration_seconds",
            "Time from a request's arrival to its response's last byte, by route template.",
            ("route",),
            buckets=_DURATION,
            registry=r,
        )
        self.upstream_duration = Histogram(
            "cascade_upstream_duration_seconds",
            "Time of one provider call, from sending it to its answer's last byte, by provider.",
            ("provider",),
            buckets=_DURATION,
            registry=r,
        )
        self.upstream_errors = Counter(
            "cascade_upstream_errors_total",
            "Provider calls that failed, by provider and error_type: the provider's status "
            "(4xx, 5xx), unreachable, or the exception that broke an answer off (ReadError) "
            "or found nothing usable in it (UpstreamBadResponse), or a success holding the "
            "provider's own error (error_answer).",
            ("provider", "error_type"),
            registry=r,
        )
        self.overhead = Histogram(
            "cascade_overhead_seconds",
            "The proxy's own time in a request that called a "
            "provider: until its response started, minus the time spent waiting for providers "
            "(for a stream, until the provider's first byte); X-Cascade-Overhead-Ms.",
            buckets=_OVERHEAD,
            registry=r,
        )
        self.session_wait = Histogram(
            "cascade_session_wait_seconds",
            "Time a request (a chat request, a reset, delete, branch or compact) waited for its "
            "session: behind the replica's earlier requests on it, for a lease another "
            "holds, or for a compaction of it already running; part of "
            "cascade_overhead_seconds.",
            buckets=_DURATION,
            registry=r,
        )
        self.inflight = Gauge(
            "cascade_inflight_requests",
            "HTTP requests being answered now.",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.reclaimed = Counter(
            "cascade_tokens_reclaimed_total",
            "Tokens the cascade's stages took out of prompts "
            "(truncation: omitted characters / 4), by stage.",
            ("stage",),
            registry=r,
        )
        self.compactions = Counter(
            "cascade_compactions_total",
            "Compactions that ended, by result: completed, or the failure's reason "
            "(summary_failed, server_busy, history_changed, agent_changed, interrupted).",
            ("result",),
            registry=r,
        )
        self.embedding_failures = Counter(
            "cascade_embedding_failures_total",
            "Embedding calls of the retrieval stage that failed or timed out "
            "(a new turn's query, a background batch).",
            registry=r,
        )
        self.config_reloads = Counter(
            "cascade_config_reloads_total",
            "Reloads of the config file (a save, SIGHUP), by result: reloaded (in force from "
            "the next request) or rejected (the config in force kept).",
            ("result",),
            registry=r,
        )
        self.config_taken = Gauge(
            "cascade_config_last_reload_successful",
            "1 while the config file as last read is the one in force; 0 once a reload "
            "rejected it, until a reload takes it.",
            registry=r,
            multiprocess_mode="livemin",
        )
        self.token_usage = Histogram(
            "gen_ai_client_token_usage",
            "Tokens per provider call, as the provider reported "
            "them (OpenTelemetry GenAI gen_ai.client.token.usage).",
            ("gen_ai_operation_name", "gen_ai_token_type", "gen_ai_request_model"),
            buckets=_TOKENS,
            registry=r,
        )
        self._models: set[str] = set()
        for stage in STAGES:  # exported at 0 before the first event
            self.reclaimed.labels(stage)
        for result in RESULTS:  # so is each result: a rate() over them needs the series
            self.compactions.labels(result)
        for result in CONFIG_RESULTS:
            self.config_reloads.labels(result)
        self.config_taken.set(1)  # the config a start read is in force, or it did not start

    @classmethod
    def from_env(cls) -> Metrics:
        """Multiprocess mode when ``PROMETHEUS_MULTIPROC_DIR`` names a directory
        (``metrics_dir.multiproc_dir``: made, checked and cleared of earlier processes'
        leftovers); one it cannot use is a :class:`SettingsError`."""
        return cls(multiprocess_dir=multiproc_dir())

    @staticmethod
    def check_env() -> None:
        """What :meth:`from_env` refuses, judged without making the directory or clearing
        it (``config check``; ``metrics_dir.check_multiproc_dir``)."""
        check_multiproc_dir()

    def render(self) -> bytes:
        """The exposition text: this app's registry, or in multiprocess mode every worker's
        files summed."""
        if self.multiprocess_dir is None:
            return generate_latest(self.registry)
        return generate_latest(_Summed(self))

    async def endpoint(self, request: Request) -> Response:
        """``GET /metrics``."""
        return Response(self.render(), media_type=CONTENT_TYPE_LATEST)

    def close(self) -> None:
        """At shutdown: in multiprocess mode, drop this process's live gauges from the sum."""
        if self.multiprocess_dir is not None:
            multiprocess.mark_process_dead(  # type: ignore[no-untyped-call]
                os.getpid(), self.multiprocess_dir
            )

    # -- what the services report (through proxy.observe) ---------------------------------

    def note_reclaimed(self, stage: str, tokens: int) -> None:
        if tokens > 0:
            self.reclaimed.labels(stage).inc(tokens)

    def note_compaction(self, result: str) -> None:
        self.compactions.labels(result).inc()

    def note_config(self, event: str) -> None:
        """A reload's event (``config.reloaded`` or ``config.rejected``), as the streams
        get it: an operator rolling a file out to replicas reads which refused it here."""
        taken = event == CONFIG_RELOADED
        self.config_reloads.labels("reloaded" if taken else "rejected").inc()
        self.config_taken.set(1 if taken else 0)

    def note_usage(self, operation: str, model: str, usage: dict[str, Any]) -> None:
        label: str | None = None
        for kind, key in (("input", "prompt_tokens"), ("output", "completion_tokens")):
            value = usage.get(key)
            if isinstance(value, int) and value >= 0:
                label = label or self.model_label(model)
                self.token_usage.labels(operation, kind, label).observe(value)

    def model_label(self, model: str) -> str:
        """``model`` as a label value while fewer than ``MODEL_LABELS`` names have been seen
        (a short printable token only), else ``other``: the client chooses it."""
        if model in self._models:
            return model
        if len(self._models) < MODEL_LABELS and _MODEL_NAME.fullmatch(model):
            self._models.add(model)
            return model
        return OTHER_MODEL


class _Summed:
    """What ``/metrics`` renders in multiprocess mode: every worker's files summed
    (``MultiProcessCollector``), then each of ``metrics``' own metrics no file holds yet as
    a family without samples. The collector knows only what some worker wrote, and a
    labelled metric writes nothing before its first series: a fresh worker's first scrape
    would leave out its ``# HELP`` and ``# TYPE`` lines, as a single process never does."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        seen = set()
        summed = multiprocess.MultiProcessCollector(  # type: ignore[no-untyped-call]
            None, path=self.metrics.multiprocess_dir
        )
        for family in summed.collect():  # type: ignore[no-untyped-call]
            seen.add(family.name)
            yield family
        for wrapper in vars(self.metrics).values():
            if isinstance(wrapper, MetricWrapperBase):
                yield from (f for f in wrapper.describe() if f.name not in seen)
