"""A transient event too big for one NOTIFY keeps its figures: a ``context.evicted`` that
cleared hundreds of results loses its two lists of them (``truncated``), not its ``count``
and ``tokens_reclaimed``, which a dashboard reads and ``/messages`` cannot give back."""

from __future__ import annotations

import json

from proxy.bus_payloads import MAX_PAYLOAD, split
from proxy.cascade.types import EVICTED, HANDOFF_SUGGESTED, Event


def _sent(event: Event) -> dict:
    (names, _), [payload] = split("t", "s1", [event])
    assert names == [] and len(payload.encode()) <= MAX_PAYLOAD
    return dict(json.loads(payload)["d"])


def test_a_huge_eviction_keeps_its_count_and_tokens() -> None:
    ids = [f"toolu_01{i:024d}" for i in range(400)]
    data = {
        "count": 400,
        "tokens_reclaimed": 812_345,
        "tool_call_ids": ids,
        "handles": [f"{cid}@{2 * i + 3}" for i, cid in enumerate(ids)],
    }
    body = _sent(Event(EVICTED, data))
    assert body["count"] == 400 and body["tokens_reclaimed"] == 812_345
    assert body["truncated"] is True and body["session_id"] == "s1" and body["ts"]
    assert "tool_call_ids" not in body and "handles" not in body


def test_an_event_that_fits_is_sent_whole() -> None:
    data = {"count": 1, "tokens_reclaimed": 9, "tool_call_ids": ["c"], "handles": ["c@2"]}
    body = _sent(Event(EVICTED, data))
    assert {k: body[k] for k in data} == data and "truncated" not in body


def test_a_long_string_figure_is_dropped_too() -> None:
    body = _sent(Event(HANDOFF_SUGGESTED, {"occupancy": 7, "note": "x" * 20_000}))
    assert body["occupancy"] == 7 and body["truncated"] is True and "note" not in body
