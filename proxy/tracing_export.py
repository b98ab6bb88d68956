"""A collector outage in the log: said once when it begins and once when it ends.

The OTLP/HTTP exporter logs each batch it cannot deliver (a WARNING for each retry, then an
ERROR), batch after batch, as long as the collector is down: lines without end that say
nothing new, as asyncpg's would for each retry of its connection floor
(``proxy.logs._floor_retries``). So the exporter is wrapped (:class:`WatchedExporter`): the
first batch refused keeps the exporter's lines, which give the cause, and is followed by one
WARNING saying spans are dropped until the collector takes them again; the exporter's lines
are left out from then on (:class:`Outage`, a filter on its loggers), and the first batch
delivered says, at INFO, that the collector is back, after how long, and how many batches
were dropped meanwhile.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["EXPORTER_LOGGERS", "Outage", "WatchedExporter"]

log = logging.getLogger("cascade.tracing")

EXPORTER_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.common.http",
)
"""The loggers through which the OTLP/HTTP exporter reports a failed export."""


class Outage(logging.Filter):
    """Whether the collector is down, since when, and the batches dropped meanwhile; as a
    filter on :data:`EXPORTER_LOGGERS`, it leaves their lines out while it is."""

    def __init__(self, where: str) -> None:
        super().__init__()
        self.where = where
        self.since: float | None = None
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        return self.since is None

    def failed(self) -> None:
        self.dropped += 1
        if self.since is None:
            self.since = time.monotonic()
            log.warning(
                "tracing: the collector takes no spans (%s; the exporter's lines before this "
                "say why): they are dropped until it does, and its lines are left out "
                "meanwhile",
                self.where,
            )

    def delivered(self) -> None:
        if self.since is None:
            return
        log.info(
            "tracing: the collector takes spans again (%s), after %.0f s; %d batch%s dropped",
            self.where,
            time.monotonic() - self.since,
            self.dropped,
            "" if self.dropped == 1 else "es",
        )
        self.since, self.dropped = None, 0


class WatchedExporter:
    """``exporter`` (a span exporter), each export's result told to ``outage``."""

    def __init__(self, exporter: Any, outage: Outage) -> None:
        self.exporter = exporter
        self.outage = outage

    def export(self, spans: Sequence[Any]) -> Any:
        result = self.exporter.export(spans)
        if getattr(result, "name", None) == "SUCCESS":
            self.outage.delivered()
        else:
            self.outage.failed()
        return result

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.exporter.force_flush(timeout_millis))


def watched(exporter: Any, where: str) -> WatchedExporter:
    """``exporter`` wrapped, with a new :class:`Outage` in place of any earlier app's on the
    exporter's loggers (one process may build the tracing again: tests, a second app)."""
    outage = Outage(where)
    for name in EXPORTER_LOGGERS:
        logger = logging.getLogger(name)
        for old in [f for f in logger.filters if isinstance(f, Outage)]:
            logger.removeFilter(old)
        logger.addFilter(outage)
    return WatchedExporter(exporter, outage)
