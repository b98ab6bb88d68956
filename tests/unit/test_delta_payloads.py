"""A delta too long for one NOTIFY goes out as several events, none over the limit, no text lost."""

from __future__ import annotations

import json

from proxy.bus import EventBus
from proxy.bus_payloads import MAX_PAYLOAD
from proxy.cascade.types import MESSAGE_DELTA_APPENDED
from proxy.chunks import StreamAccumulator


def _pieces(text: str) -> list[dict]:
    bus = EventBus(None, "postgresql://127.0.0.1/x")  # type: ignore[arg-type]
    payloads = bus.pieces("t", "s1", MESSAGE_DELTA_APPENDED, {"choice": 0, "delta": text}, "delta")
    assert all(len(p.encode()) <= MAX_PAYLOAD for p in payloads)
    return [json.loads(p)["d"] for p in payloads]


def test_a_short_delta_is_one_event() -> None:
    [body] = _pieces("hello")
    assert body["delta"] == "hello" and body["session_id"] == "s1" and "part" not in body


def test_a_long_delta_is_cut_into_parts_that_fit() -> None:
    text = ("ascii text, " * 900) + ('ü€😀\n"' * 2000)  # escapes of 2, 6 and 12 bytes
    bodies = _pieces(text)
    assert len(bodies) > 2
    assert "".join(b["delta"] for b in bodies) == text
    assert [(b["part"], b["parts"]) for b in bodies] == [
        (i, len(bodies)) for i in range(len(bodies))
    ]
    assert not any(b.get("truncated") for b in bodies)


def test_equal_parts_stay_distinct_payloads() -> None:
    """NOTIFY drops a payload equal to one sent before in the same transaction."""
    bus = EventBus(None, "postgresql://127.0.0.1/x")  # type: ignore[arg-type]
    payloads = bus.pieces("t", "s", MESSAGE_DELTA_APPENDED, {"delta": "a" * 30000}, "delta")
    assert len(payloads) == len(set(payloads)) > 1


def test_text_since_gives_each_choice_its_new_text_once() -> None:
    acc = StreamAccumulator()
    marks: dict[int, int] = {}
    acc.add({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "He"}}]})
    acc.add({"choices": [{"index": 1, "delta": {"content": "x"}}]})
    assert acc.text_since(marks) == {0: "He", 1: "x"}
    assert acc.text_since(marks) == {}
    acc.add({"choices": [{"index": 0, "delta": {"content": "llo"}}]})
    acc.add({"choices": [{"index": 0, "delta": {"content": "!"}}]})
    assert acc.text_since(marks) == {0: "llo!"}
