"""A streamed answer to a call that asked for a whole one, read as the whole answer.

A gateway that always streams answers a non-streamed call with an event stream of chunks;
``stream_completion`` builds the ``chat.completion`` they make, as a relayed stream's reply
is built (``chunks.StreamAccumulator``), with what a whole answer carries that a stored
reply does not: each choice's ``logprobs``, the ``service_tier``, and Azure's
``prompt_filter_results`` (its stream's opening chunk carries them). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.chunks import PROMPT_FILTERS, StreamAccumulator, index_of
from proxy.sse import (
    BOM,
    FIELDS,
    EventSplitter,
    event_data,
    is_done,
    is_map,
    opening_of,
    parse_chunk,
)

__all__ = ["opens_as_events", "stream_completion"]

_FIELDS = (*FIELDS, b":")


def opens_as_events(body: bytes) -> bool:
    """Whether ``body`` opens as an event stream (its first line past blank space and a
    byte-order mark a field or a comment): a provider that streamed an answer a call asked
    whole for."""
    return opening_of(body[:256]).startswith(_FIELDS)


def stream_completion(body: bytes) -> dict[str, Any] | None:
    """The ``chat.completion`` an event stream of chunks builds, as a relayed stream's reply
    is built (a gateway that always streams answered a call that asked for a whole answer);
    an error object it sent instead of a chunk (``{"error": …}``, the caller's to raise);
    None for a body that is no finished chat stream: one that does not open as events, a
    data event that is no JSON object, or one that stops with neither ``[DONE]`` nor a
    finish reason on each choice (an answer cut short is not a whole one)."""
    if not opens_as_events(body):
        return None
    splitter = EventSplitter()
    acc, done = StreamAccumulator(), False
    logprobs: dict[int, dict[str, Any]] = {}
    tier = filters = None
    for event in [*splitter.feed(body.removeprefix(BOM)), splitter.flush()]:
        if is_done(event):
            done = True
            break
        chunk = parse_chunk(event)
        if chunk is None:
            if event_data(event):  # data no chunk is: no stream the proxy can read
                return None
            continue
        if chunk.get("error") is not None:
            return dict(chunk)
        acc.add(chunk)
        tier = tier if tier is not None else chunk.get("service_tier")
        filters = filters if filters is not None else chunk.get(PROMPT_FILTERS)
        _gather_logprobs(chunk, logprobs)
    finished = all(acc.finish_reason(i) is not None for i in acc.indices)
    if not acc.indices or not (done or finished):
        return None
    built = acc.to_completion()
    if tier is not None:
        built["service_tier"] = tier
    if filters is not None:
        built[PROMPT_FILTERS] = filters
    for choice in built["choices"]:
        choice["logprobs"] = logprobs.get(choice["index"])
    return built


def _gather_logprobs(chunk: Mapping[str, Any], into: dict[int, dict[str, Any]]) -> None:
    """Each choice's ``logprobs`` in ``chunk`` added to ``into``'s: a list (``content``,
    ``refusal``) extended in order, any other value kept as it first came."""
    choices = chunk.get("choices")
    for pos, choice in enumerate(choices if isinstance(choices, list) else ()):
        if not is_map(choice) or not is_map(said := choice.get("logprobs")):
            continue
        kept = into.setdefault(index_of(choice, pos), {})
        for key, value in said.items():
            if isinstance(value, list):
                kept[key] = [*(kept.get(key) or ()), *value]
            else:
                kept.setdefault(key, value)
