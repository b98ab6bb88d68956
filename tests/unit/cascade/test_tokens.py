from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from proxy.cascade.tokens import (
    IMAGE_TOKENS,
    REPLY_PRIMING_TOKENS,
    TOKENS_PER_MESSAGE,
    calibrate,
    effective_input_tokens,
    estimate_tokens,
    make_counter,
    message_text,
)
from tests.unit.cascade.builders import assistant_calls, tool, user


def test_message_text_collects_content_parts_calls_and_name() -> None:
    msg = {
        "role": "user",
        "name": "alice",
        "content": [
            {"type": "text", "text": "hello"},
            {"type": "image_url", "image_url": {"url": "data:..."}},
            {"type": "text", "text": "world"},
        ],
    }
    text = message_text(msg)
    assert "alice" in text and "hello" in text and "world" in text
    assert "data:" not in text
    calls = message_text(assistant_calls(("c1", "grep", {"q": "needle"})))
    assert "grep" in calls and "needle" in calls


def test_message_text_of_empty_content_is_empty() -> None:
    assert message_text({"role": "assistant", "content": None}) == ""


def test_estimate_counts_chars_per_token_plus_framing() -> None:
    msgs = [user("a" * 40), tool("c1", "b" * 41)]
    expected = REPLY_PRIMING_TOKENS + 2 * TOKENS_PER_MESSAGE + 10 + 11
    assert estimate_tokens(msgs) == expected
    assert estimate_tokens(msgs, chars_per_token=2.0) == expected - 21 + 20 + 21


def test_estimate_of_nothing_is_zero() -> None:
    assert estimate_tokens([]) == 0


def test_images_count_flat() -> None:
    msg = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
    assert estimate_tokens([msg]) == REPLY_PRIMING_TOKENS + TOKENS_PER_MESSAGE + IMAGE_TOKENS


def test_estimate_rejects_non_positive_ratio() -> None:
    with pytest.raises(ValueError):
        estimate_tokens([user("x")], chars_per_token=0)


def test_make_counter_uses_text_function_with_same_framing() -> None:
    words = make_counter(lambda s: len(s.split()))
    msgs = [user("one two three"), user("four")]
    assert words(msgs) == REPLY_PRIMING_TOKENS + 2 * TOKENS_PER_MESSAGE + 4


def test_make_counter_falls_back_to_chars_over_four() -> None:
    msgs = [user("a" * 400)]
    assert make_counter()(msgs) == estimate_tokens(msgs)


@given(st.lists(st.text(max_size=50), max_size=6), st.text(max_size=50))
@settings(max_examples=50, deadline=None)
def test_estimate_is_monotone(texts: list[str], extra: str) -> None:
    msgs = [user(t) for t in texts]
    assert estimate_tokens([*msgs, user(extra)]) >= estimate_tokens(msgs)


def test_calibrate_moves_toward_observed_ratio() -> None:
    assert calibrate(1.0, real=1500, estimated=1000) == pytest.approx(1.25)
    assert calibrate(1.0, real=1500, estimated=1000, weight=1.0) == pytest.approx(1.5)


def test_calibrate_clamps() -> None:
    assert calibrate(1.0, real=100_000, estimated=10, weight=1.0) == 2.0
    assert calibrate(1.0, real=1, estimated=100_000, weight=1.0) == 0.5


@pytest.mark.parametrize(("real", "estimated"), [(0, 100), (100, 0), (-5, 10)])
def test_calibrate_ignores_empty_observations(real: int, estimated: int) -> None:
    assert calibrate(1.3, real=real, estimated=estimated) == 1.3


def test_effective_prefers_real_count() -> None:
    assert effective_input_tokens(1000, ratio=1.5, last_real=1234) == 1234


def test_effective_corrects_estimate_without_real_count() -> None:
    assert effective_input_tokens(1000, ratio=1.5, last_real=None) == 1500
    assert effective_input_tokens(1000, ratio=1.5, last_real=0) == 1500


def test_memo_counter_equals_the_plain_counter_and_prices_each_message_once() -> None:
    from proxy.cascade.tokens import MemoCounter, make_counter, message_cost

    calls: list[str] = []

    def text_tokens(s: str) -> int:
        calls.append(s)
        return len(s.split())

    msgs = [
        {"role": "user", "content": "one two three"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "function": {"name": "ls", "arguments": "{}"}}],
        },
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
    ]
    memo = MemoCounter(message_cost(text_tokens))
    plain = make_counter(text_tokens)
    assert memo(msgs) == plain(msgs)
    calls.clear()
    assert memo(msgs) == plain(msgs[:]) and memo(msgs[1:]) == plain(msgs[1:])
    assert len(calls) == 3 + 2  # only the plain counter tokenised again
    memo.seed(msgs[0], 100)
    assert memo([msgs[0]]) == 103  # seeded cost plus reply priming
    assert memo([]) == 0
