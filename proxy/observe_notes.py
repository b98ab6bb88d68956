"""The notes services send about the request they run in, without being handed it.

``note_step_events`` (what truncation, eviction and the overflow guard reclaimed),
``note_compaction_event`` (a compaction's end), ``note_answer`` and ``note_usage`` (a
provider's token usage), ``note_embedding_failure`` and ``note_occupancy`` find the request's
``RequestObs`` (``observe.py``) through ``requestlog.current()``. Counters go to the app's
``Metrics`` at once (a background compaction ends after its request did); the span's
attributes are set when the request ends. Outside a request they do nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from proxy import requestlog
from proxy.cascade.types import (
    COMPACTION_COMPLETED,
    COMPACTION_FAILED,
    EVICTED,
    TRIMMED,
    TRUNCATED,
    Event,
)

if TYPE_CHECKING:
    from proxy.observe import RequestObs

__all__ = [
    "compaction_span",
    "current_compaction",
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


def _obs() -> RequestObs | None:
    record = requestlog.current()
    if record is None:
        return None
    obs: RequestObs | None = record.obs
    return obs


def note_step_events(events: Iterable[Event]) -> None:
    """The stages' events of one step: the tokens truncation (omitted characters / 4, the
    whole output is never tokenised), eviction and the overflow guard took out."""
    obs = _obs()
    if obs is None:
        return
    for event in events:
        data = event.data
        if event.name == EVICTED:
            stage, tokens = "eviction", data.get("tokens_reclaimed", 0)
        elif event.name == TRIMMED:
            stage, tokens = "overflow", data.get("tokens_before", 0) - data.get("tokens_after", 0)
        elif event.name == TRUNCATED:
            stage = "truncation"
            tokens = (data.get("original_chars", 0) - data.get("kept_chars", 0)) // 4
        else:
            continue
        if tokens > 0:
            obs.reclaimed += tokens
            obs.observer.metrics.note_reclaimed(stage, tokens)


_COMPACTION: ContextVar[Any] = ContextVar("cascade_compaction_span", default=None)


def current_compaction() -> Any:
    """The span of the compaction running in this task, if traced: its calls' parent."""
    return _COMPACTION.get()


@contextlib.contextmanager
def compaction_span(trigger: str) -> Iterator[None]:
    """A compaction's own span (``compaction``, under its request's) when traced, so the
    trace shows what it took, reads and writes too, with its fast-model calls under it; its
    result (``note_compaction_event``) goes on it, a failure's as ERROR and ``error.type``."""
    obs = _obs()
    tracing = obs.observer.tracing if obs is not None else None
    if obs is None or tracing is None or obs.span is None:
        yield
        return
    span = tracing.start_child("compaction", obs.span, {"cascade.compaction.trigger": trigger})
    token = _COMPACTION.set(span)
    try:
        yield
    except Exception as exc:
        span.set_attribute("error.type", type(exc).__name__)
        span.set_status(tracing.failed)
        raise
    finally:
        _COMPACTION.reset(token)
        span.end()


def _result(name: str, data: Mapping[str, Any]) -> str:
    return "completed" if name == COMPACTION_COMPLETED else str(data.get("reason") or "failed")


def note_swept_compaction(name: str, data: Mapping[str, Any]) -> None:
    """The partner the sweep wrote for a compaction a process cut: its result counts, and
    nothing more. The sweep runs in the next compaction's look, inside that one's span and
    request, and the result is not that compaction's: one that then folds nothing writes no
    event of its own, and its span and request would say the cut one's. A stop's cut counts
    through it too (``DurableSummarizer._run``), for the partner its close writes outside
    any request."""
    obs = _obs()
    if obs is not None and name in (COMPACTION_COMPLETED, COMPACTION_FAILED):
        obs.observer.metrics.note_compaction(_result(name, data))


def note_compaction_event(name: str, data: Mapping[str, Any]) -> None:
    """A compaction's completed or failed event: its result, and what it reclaimed."""
    obs = _obs()
    if obs is None or name not in (COMPACTION_COMPLETED, COMPACTION_FAILED):
        return
    result = _result(name, data)
    if (span := _COMPACTION.get()) is not None and obs.observer.tracing is not None:
        span.set_attribute("cascade.compaction", result)
        if name == COMPACTION_FAILED:
            span.set_attribute("error.type", result)
            span.set_status(obs.observer.tracing.failed)
    obs.compaction = result
    obs.observer.metrics.note_compaction(result)
    tokens = (data.get("tokens_before") or 0) - (data.get("tokens_after") or 0)
    if name == COMPACTION_COMPLETED and data.get("tokens_after") is not None and tokens > 0:
        obs.reclaimed += tokens
        obs.observer.metrics.note_reclaimed("compaction", tokens)


def note_embedding_failure() -> None:
    """A new turn's embedding failed or timed out (the background worker counts its own)."""
    obs = _obs()
    if obs is not None:
        obs.observer.metrics.embedding_failures.inc()


def note_usage(model: str, usage: Any, operation: str = "chat") -> bool:
    """A provider's answer's ``usage``: the token histogram, and the call's span. False
    outside a request, where nothing is noted."""
    obs = _obs()
    if obs is None:
        return False
    usage = usage if isinstance(usage, dict) else {}
    obs.observer.metrics.note_usage(operation, model, usage)
    obs.end_pending(usage)
    return True


def note_answer(model: str, usage: Any) -> None:
    """The answer to the client's own request (each round of it): ``note_usage``, and the
    request span's model and token totals."""
    obs = _obs()
    if obs is None:
        return
    note_usage(model, usage)
    obs.model = model
    if isinstance(usage, dict):
        for attr, key in (
            ("input_tokens", "prompt_tokens"),
            ("output_tokens", "completion_tokens"),
        ):
            if isinstance(value := usage.get(key), int):
                setattr(obs, attr, getattr(obs, attr) + value)


def note_occupancy(tokens: int) -> None:
    """The session's occupancy after this request, as ``context.usage`` reports it."""
    if (obs := _obs()) is not None:
        obs.occupancy = tokens


def note_late_error(status: int) -> None:
    """An error told in-band once the response's ``200`` went out (a stream whose preparation
    failed after its keep-alive clock committed): a 5xx fails the request's span as the
    status itself would have, though the span keeps the ``200`` that went out."""
    if (obs := _obs()) is not None:
        obs.late_error = status


def note_bad_answer(provider: str, kind: str) -> None:
    """The last provider call's answer, its status a success, held nothing the proxy could
    use (``kind``: ``error_answer`` for an error object, ``UpstreamBadResponse`` for a body
    that is no chat completion): a failed call, in the metrics and on its span, which
    awaits its usage still (``RequestObs.pending``)."""
    if (obs := _obs()) is None:
        return
    obs.observer.metrics.upstream_errors.labels(provider or "unnamed", kind).inc()
    if obs.pending is not None and (tracing := obs.observer.tracing) is not None:
        obs.pending[0].set_attribute("error.type", kind)
        obs.pending[0].set_status(tracing.failed)
