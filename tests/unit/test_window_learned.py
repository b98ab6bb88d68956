"""What a session learns from a provider's refusal for length, and what it logs."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.cascade.overflow import guard_factor
from proxy.cascade.tokens import MAX_RATIO
from proxy.config import ModelConfig, ProviderConfig
from proxy.services.window_learned import learned


def _step(ratio: float = 1.0, limit: int = 4000, overhead: int = 0) -> Any:
    route = SimpleNamespace(
        limits=ModelConfig(context_limit=limit, reserved_output=500),
        provider=ProviderConfig(name="local", base_url="http://127.0.0.1:9/v1"),
        model="m",
    )
    return SimpleNamespace(
        route=route,
        body={},
        count=lambda messages: 1000 * len(messages),
        overhead=overhead,
        state=SimpleNamespace(session={"calibration": ratio}),
        ctx=SimpleNamespace(session_id="s"),
    )


def _refusal(message: str) -> bytes:
    return json.dumps({"error": {"message": message, "code": "context_length_exceeded"}}).encode()


def test_the_ratio_rises_and_the_log_says_so(caplog: pytest.LogCaptureFixture) -> None:
    body = _refusal("However, your messages resulted in 4800 tokens.")
    with caplog.at_level(logging.WARNING, logger="cascade.forward"):
        assert learned(_step(), 400, body, [{}, {}, {}]) == pytest.approx(1.6)
    (line,) = caplog.messages
    assert "4800 tokens by its count, estimated 3000" in line and "from 1 to 1.6" in line


def test_at_the_cap_nothing_is_learned(caplog: pytest.LogCaptureFixture) -> None:
    body = _refusal("However, your messages resulted in 9000 tokens.")
    with caplog.at_level(logging.WARNING, logger="cascade.forward"):
        assert learned(_step(MAX_RATIO), 400, body, [{}, {}, {}]) is None
    assert "stays at 2" in caplog.messages[0]


def test_a_window_below_the_configured_limit_is_named(caplog: pytest.LogCaptureFixture) -> None:
    body = _refusal("This model's maximum context length is 2048 tokens.")
    with caplog.at_level(logging.WARNING, logger="cascade.forward"):
        learned(_step(), 400, body, [{}])
    assert "set contextLimit to at most 2048" in caplog.messages[-1]


def test_another_error_teaches_nothing_and_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="cascade.forward"):
        assert learned(_step(), 400, b'{"error": {"message": "bad tool"}}', [{}]) is None
        assert learned(_step(), 400, None, [{}]) is None
    assert caplog.messages == []


def test_max_tokens_too_large_teaches_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """vLLM refuses an output reservation past its window with its context length in the
    message; the prompt (its count within the guard's room) is not what was too long."""
    body = json.dumps(
        {
            "object": "error",
            "message": "'max_tokens' or 'max_completion_tokens' is too large: 5000. This model's "
            "maximum context length is 4096 tokens and your request has 1000 input tokens "
            "(5000 > 4096 - 1000).",
            "type": "BadRequestError",
            "code": 400,
        }
    ).encode()
    with caplog.at_level(logging.WARNING, logger="cascade.forward"):
        assert learned(_step(limit=8000), 400, body, [{}]) is None
    assert "set contextLimit to at most 4096" in caplog.messages[-1]


@pytest.mark.parametrize("told", [8500, None])
def test_with_tools_the_same_messages_are_trimmed_next_time(told: int | None) -> None:
    """The guard fits the messages, counted at the ratio, to the room the tools leave
    (their tokens set aside as they are): the learnt ratio must put the same messages past
    that room, the tools' share of the provider's count not spread over them."""
    step = _step(limit=8000, overhead=2000)  # room for the messages: 8000 - 500 - 2000
    count = f"resulted in {told} tokens." if told else "too long."
    ratio = learned(step, 400, _refusal(f"However, your messages {count}"), [{}, {}, {}])
    assert ratio is not None and 3000 * guard_factor(ratio) > 8000 - 500 - 2000


def test_a_failure_to_learn_is_logged_and_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    """``learned`` runs before the turn is ended and the error relayed (outside the stream's
    try): whatever goes wrong in it, the caller goes on."""
    step = _step()

    def broken(messages: Any) -> int:
        raise ValueError("the text of a message")

    step.count = broken
    body = _refusal("However, your messages resulted in 4800 tokens.")
    with caplog.at_level(logging.WARNING, logger="cascade.forward"):
        assert learned(step, 400, body, [{}]) is None
    (line,) = caplog.messages
    assert "ValueError" in line and "the text of a message" not in line
