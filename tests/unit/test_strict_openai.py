"""The strict fake provider's rules (``tests/fakes/strict_openai.py``) catch each request OpenAI
answers with a 400 and pass the well-formed ones, so the audits built on it mean something."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.strict_openai import system_after_others, violations

CALL = {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
TEXT = {"type": "text", "text": "b"}
TOOLS = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]


def body(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": list(messages), **extra}


def user(text: str = "hi") -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_a_well_formed_tool_loop_passes() -> None:
    second = {**CALL, "id": "call_2"}
    assert (
        violations(
            body(
                {"role": "system", "content": "s"},
                user(),
                {"role": "assistant", "content": None, "tool_calls": [CALL, second]},
                {"role": "tool", "tool_call_id": "call_1", "content": "a"},
                {"role": "tool", "tool_call_id": "call_2", "content": [TEXT]},
                {"role": "assistant", "content": "done"},
                {"role": "user", "name": "alice", "content": [TEXT]},
                tools=TOOLS,
                tool_choice={"type": "function", "function": {"name": "ls"}},
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        == []
    )


@pytest.mark.parametrize(
    ("request_body", "expected"),
    [
        (body(user(), {"role": "tool", "tool_call_id": "x", "content": "a"}), "answers no"),
        (body(user(), {"role": "assistant", "tool_calls": [CALL]}), "without a response"),
        (
            body(
                user(),
                {"role": "assistant", "tool_calls": [CALL]},
                user(),
                {"role": "tool", "tool_call_id": "call_1", "content": "a"},
            ),
            "without a response",
        ),
        (body(user(), {"role": "assistant", "content": None}), "required"),
        (body(user(), {"role": "assistant"}), "required"),
        (body({"role": "user", "content": []}), "empty array"),
        (body({"role": "user", "content": "x", "name": "a b"}), "pattern"),
        (body(user(), {"role": "assistant", "content": "", "tool_calls": []}), "empty array"),
        (body(user(), tools=[]), "non-empty"),
        (body(user(), tool_choice="auto"), "only allowed when 'tools'"),
        (body(user(), parallel_tool_calls=True), "only allowed when 'tools'"),
        (body(user(), stream_options={"include_usage": True}), "'stream' is enabled"),
        (body(user(), cascade_session="x"), "unrecognized"),
        (body({"role": "user", "content": "x", "_id": 3}), "unexpected keys"),
        (body(user(), tools=[*TOOLS, *TOOLS]), "duplicate"),
        (body(user(), tools=TOOLS * 129), "too long"),
        (body(user(), {"role": "assistant", "tool_calls": [{**CALL, "id": "c" * 41}]}), "too long"),
        (
            body(user(), tools=TOOLS, tool_choice={"type": "function", "function": {"name": "x"}}),
            "not in tools",
        ),  # fmt: skip
        (
            body(
                user(),
                {"role": "assistant", "tool_calls": [CALL, CALL]},
                {"role": "tool", "tool_call_id": "call_1", "content": "a"},
            ),
            "duplicate",
        ),
        (body(), "non-empty"),
        ({**body(user()), "model": "o4-mini", "max_tokens": 5}, "max_completion_tokens"),
        ({**body(user()), "model": "gpt-5-mini", "temperature": 0}, "only the default"),
        ({**body(user()), "model": "openai/o3", "top_p": 0.5}, "only the default"),
    ],
)
def test_each_rule_openai_enforces_is_caught(request_body: dict[str, Any], expected: str) -> None:
    problems = violations(request_body)
    assert any(expected in p for p in problems), problems


def test_a_chat_model_takes_what_a_reasoning_model_refuses() -> None:
    for model in ("gpt-4o", "gpt-5-chat-latest", "gpt-4o-mini", "llama3"):
        assert violations({**body(user()), "model": model, "max_tokens": 5, "temperature": 0}) == []
    sent = {**body(user()), "model": "gpt-5", "max_completion_tokens": 5, "temperature": 1}
    assert violations(sent) == []


def test_a_system_message_after_the_conversation_started_is_told_apart() -> None:
    sent = body({"role": "system", "content": "a"}, user(), {"role": "system", "content": "b"})
    assert violations(sent) == []
    assert system_after_others(sent) == [2]
