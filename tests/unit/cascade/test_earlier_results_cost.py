"""A long first request's tool results are each split once, however many it brings.

``EarlierResults`` gives each new tool result the latest ``EARLIER_RESULTS`` earlier ones
to point at. It used to build that window afresh for every new result once the history held
more than ``EARLIER_RESULTS``: each of the rest re-split 64 results, so a 14 MB history of 200
tool results took 16 s of the event loop, and every other request (``/healthz`` too) waited
that long. The window now slides: each result is split at most once.
"""

from __future__ import annotations

from typing import Any

import pytest

import proxy.cascade.pipeline as pipeline
import proxy.cascade.pointers as pointers
from proxy.cascade.pipeline import EARLIER_RESULTS, EarlierResults, earlier_results


def _history(results: int) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for i in range(results):
        history.append({"role": "assistant", "content": None})
        lines = [f"shared line {i % 5}", f"only in {i}", f"shared line {(i + 1) % 5}"]
        # Some results that cannot be pointed at: no id, or no text.
        call_id = "" if i % 17 == 3 else f"c{i}"
        content = "" if i % 13 == 5 else "\n".join(lines)
        history.append({"role": "tool", "tool_call_id": call_id, "content": content})
    return history


def test_each_result_is_split_at_most_once(monkeypatch: pytest.MonkeyPatch) -> None:
    history = _history(4 * EARLIER_RESULTS)
    splits = 0
    real = pipeline.lines_of

    def counting(text: str) -> tuple[str, ...]:
        nonlocal splits
        splits += 1
        return real(text)

    monkeypatch.setattr(pipeline, "lines_of", counting)
    monkeypatch.setattr(pointers, "lines_of", counting)  # EarlierLines.build splits there
    grown = EarlierResults(history)
    for pos in range(len(history)):
        if history[pos]["role"] == "tool":
            grown.before(pos)()
    assert splits <= 4 * EARLIER_RESULTS


def test_the_sliding_window_is_what_a_fresh_build_gives_at_each_position() -> None:
    history = _history(2 * EARLIER_RESULTS + 9)
    grown = EarlierResults(history)
    # Built only at some positions (as for the results that need it), in increasing order.
    for pos in range(0, len(history), 7):
        assert grown.before(pos)() == earlier_results(history, pos)()


def test_a_build_after_a_long_gap_sees_the_latest_window() -> None:
    history = _history(3 * EARLIER_RESULTS)
    grown = EarlierResults(history)
    assert grown.before(3)() == earlier_results(history, 3)()
    last = len(history) - 1
    assert grown.before(last)() == earlier_results(history, last)()
