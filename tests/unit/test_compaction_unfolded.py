"""Why a compaction folded nothing: a forced one (``sessions compact``, ``/compact``) on a
short session said ``nothing to fold`` though messages stood before the kept ones, which read
as a fault; the span is there, only too small to repay a new summary, and the answer says so."""

from __future__ import annotations

from proxy.cascade.summary import MIN_SPAN_RATIO
from proxy.services.compaction_span import NOTHING_TO_FOLD, SPAN_TOO_SMALL, unfolded


def _turns(*texts: str) -> list[dict[str, str]]:
    return [{"role": ("user", "assistant")[i % 2], "content": t} for i, t in enumerate(texts)]


def test_a_span_too_small_for_a_summary_says_so() -> None:
    messages = _turns("hi", "ok", "again", "ok", "hello from the console", "ok")
    assert unfolded(messages, keep_recent=4, observation_prefixes=()) == SPAN_TOO_SMALL
    assert f"under {MIN_SPAN_RATIO:g} times the characters" in SPAN_TOO_SMALL


def test_no_span_at_all_is_nothing_to_fold() -> None:
    messages = _turns("hi", "ok", "again", "ok")
    assert unfolded(messages, keep_recent=4, observation_prefixes=()) == NOTHING_TO_FOLD
