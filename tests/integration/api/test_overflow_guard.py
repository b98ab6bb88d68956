"""The overflow guard through the real proxy (issue #4 item 6): never send a request that must fail.

A prompt over ``contextLimit - reservedOutput`` is compacted synchronously, then the oldest whole
rounds are dropped (``context.trimmed``); a single message too large for the window is refused
with 400 ``context_length_exceeded`` and nothing goes upstream; and the provider's own
``context_length_exceeded`` reaches the client in the same OpenAI shape.
"""

from __future__ import annotations

import json
import re
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import openai
import pytest

from proxy.tokenizers import build_counter
from tests.fakes.rendering import count_prompt_tokens
from tests.fakes.replies import RecordedRequest, Reply, context_length_exceeded, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_prompts import (
    assert_paired,
    canon,
    live_part,
    summary_of,
    tool_round,
)
from tests.integration.api.compaction_stack import Agent, Model, Stack, stack, words

LIMIT, RESERVED = 4000, 500
ROOM = LIMIT - RESERVED


def small_window(
    tmp_path: Path, db_dsn: str, fake: FakeUpstream, model: Model | None = None, **kwargs: Any
) -> AbstractContextManager[Stack]:
    """The guard's stack: a ``LIMIT``-token window, ``RESERVED`` of it kept for the answer."""
    return stack(tmp_path, db_dsn, fake, model or Model(), limit=LIMIT, reserved=RESERVED, **kwargs)


def rounds(n: int, size: int = 400) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "user", "content": "Audit every module."}]
    for k in range(n):
        out += tool_round(k, size)
    return out


def assert_fits(body: dict[str, Any]) -> None:
    """Under the limit by the proxy's own counter and by the provider's (the fake's)."""
    assert build_counter()(body["messages"]) <= ROOM
    assert count_prompt_tokens(body["messages"]) <= LIMIT


def _tools(n: int) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": words(60, f"d{i}"),
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
        }
        for i in range(n)
    ]


def test_the_tools_count_against_the_window(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    # The messages alone fit; with a large tools array beside them they do not. The tools
    # used to count only through the calibration ratio, capped at 2, so such prompts went
    # out over the limit.
    tools = _tools(20)
    count = build_counter()
    tool_tokens = count([{"role": "system", "content": json.dumps(tools)}])
    assert tool_tokens > 1000

    def main(req: RecordedRequest) -> Reply:  # a provider counts the tools too
        body = req.json
        prompt = count_prompt_tokens(body["messages"]) + len(json.dumps(body["tools"])) // 4
        return reply("ok", usage=(prompt, 1))

    with small_window(
        tmp_path, db_dsn, fake_upstream, Model(main=main), summarize={"enabled": False}
    ) as s:
        agent = Agent(s.client("tools"))
        agent.messages += rounds(4, 350)
        assert count(agent.messages) <= ROOM < count(agent.messages) + tool_tokens
        for _ in range(3):
            agent.step(tools=tools)
            agent.messages += tool_round(len(agent.messages), 350)
        bodies = s.main_bodies()
        assert len(bodies) == 3
        for body in bodies:
            assert len(body["tools"]) >= 20
            assert (
                count(body["messages"])
                + count([{"role": "system", "content": json.dumps(body["tools"])}])
                <= ROOM
            )
            assert_paired(body["messages"])
        assert s.events("tools", "context.trimmed")


def test_an_oversized_prompt_is_compacted_then_the_oldest_rounds_are_dropped(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model()
    with small_window(tmp_path, db_dsn, fake_upstream, model, summarize={"keepRecent": 15}) as s:
        agent = Agent(s.client("overflow"))
        agent.messages += rounds(8)  # ~6500 tokens in one request
        assert agent.step() == "ok"
        (row,) = s.summaries("overflow")
        assert row["boundary"] == 11  # keepRecent=15 lands on a round start: 5 rounds kept
        (main,) = s.main_bodies()
        assert summary_of(main) == row["content"]
        assert_fits(main)
        assert_paired(main["messages"])
        # the kept rounds did not fit either: the oldest ones went, whole
        live = live_part(main)
        assert live[0] == canon(agent.messages[:1])[0]
        assert live[1:] == canon(agent.messages[-1 - len(live[1:]) : -1])
        assert 0 < len(live[1:]) < 15 and len(live[1:]) % 3 == 0
        names = [e["name"] for e in s.events("overflow")]
        assert names.index("context.compaction.completed") < names.index("context.trimmed")
        (trimmed,) = s.events("overflow", "context.trimmed")
        assert trimmed["dropped_messages"] == 15 - len(live[1:])
        assert trimmed["tokens_after"] <= ROOM < trimmed["tokens_before"]
        started = s.events("overflow", "context.compaction.started")[0]
        assert started["trigger"] == "overflow"


def test_without_summarisation_the_guard_still_drops_whole_rounds(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model()
    with small_window(tmp_path, db_dsn, fake_upstream, model, summarize={"enabled": False}) as s:
        agent = Agent(s.client("trim-only"))
        agent.messages += rounds(8)
        agent.step()
        (main,) = s.main_bodies()
        assert_fits(main)
        assert_paired(main["messages"])
        assert not model.fast_times and summary_of(main) is None
        assert main["messages"][:2] == agent.messages[:2], "system and task are kept"
        (trimmed,) = s.events("trim-only", "context.trimmed")
        assert trimmed["dropped_messages"] % 3 == 0 and trimmed["dropped_messages"] > 0


@pytest.mark.parametrize("stream", [False, True])
def test_one_message_too_large_for_the_window_is_refused_and_nothing_is_sent(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, stream: bool
) -> None:
    with small_window(tmp_path, db_dsn, fake_upstream) as s:
        client = s.client("huge")
        messages = [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": words(5000, "huge")},
        ]
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="gpt-fake", messages=messages, stream=stream)
        err = info.value
        assert err.status_code == 400 and err.code == "context_length_exceeded"
        assert err.type == "invalid_request_error" and err.param == "messages"
        assert err.response.headers["x-session-id"] == "huge"
        body = err.body
        assert isinstance(body, dict) and set(body) == {"message", "type", "param", "code"}
        message = body["message"]
        assert f"limit {LIMIT}" in message and "largest message" in message
        assert "contextLimit" in message  # tells a person what to change
        assert s.fake.requests == [], "a request that must fail was sent upstream"


def test_a_refused_first_request_still_stores_the_history_it_brought(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """A new session's long first request is stored with its step (services.history: held
    back); when the guard refuses the step, what the client sent is stored all the same."""
    with small_window(tmp_path, db_dsn, fake_upstream, summarize={"enabled": False}) as s:
        messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
        for i in range(4):  # 10 messages in all: more than a session is guessed new with
            messages += [
                {"role": "user", "content": f"question {i}"},
                {"role": "assistant", "content": f"answer {i}"},
            ]
        messages.append({"role": "user", "content": words(5000, "huge")})
        with pytest.raises(openai.BadRequestError) as info:
            s.client("refused").chat.completions.create(model="gpt-fake", messages=messages)
        assert info.value.code == "context_length_exceeded"
        assert s.fake.requests == []
        stored = s.query("SELECT pos FROM messages WHERE session_id = 'refused' ORDER BY pos")
        assert [r["pos"] for r in stored] == list(range(len(messages)))


def test_a_huge_message_after_some_history_is_refused_without_calling_the_model(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    with small_window(tmp_path, db_dsn, fake_upstream, summarize={"keepRecent": 2}) as s:
        agent = Agent(s.client("huge-late"))
        for i in range(3):
            agent.say(words(300, f"t{i}"))
        sent = len(s.main_bodies())
        with pytest.raises(openai.BadRequestError) as info:
            agent.say(words(5000, "huge"))
        assert info.value.code == "context_length_exceeded"
        assert len(s.main_bodies()) == sent
        agent.messages[-1] = {"role": "user", "content": "a shorter question"}
        assert agent.step() == "ok", "the session is still usable"


@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_context_length_exceeded_surfaces_in_the_same_shape(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, stream: bool
) -> None:
    upstream_error = context_length_exceeded()
    with stack(tmp_path, db_dsn, fake_upstream, Model(), limit=128000) as s:
        fake_upstream.script(upstream_error)
        agent = Agent(s.client("upstream-400"))
        with pytest.raises(openai.BadRequestError) as info:
            if stream:
                agent.say_stream("hello")
            else:
                agent.say("hello")
        err = info.value
        assert err.status_code == 400 and err.code == "context_length_exceeded"
        assert err.body == upstream_error.body["error"]
        assert len(s.main_bodies()) == 1


def test_the_refusal_names_the_large_message_as_the_client_counts_it(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """The prompt the guard measures is not the client's list (a summary stands for the
    folded messages, a trimmed round is gone), so its index would point the client at
    another message: the refusal counts from the end, which both lists share."""
    with small_window(tmp_path, db_dsn, fake_upstream, summarize={"keepRecent": 6}) as s:
        agent = Agent(s.client("named"))
        for i in range(4):
            agent.say(words(300, f"t{i}"))
        assert agent.say("/compact").startswith("[cascade] Compacted")
        agent.say("one more question")
        # a turn whose user message is too large on its own, kept whole with its round
        agent.messages.append({"role": "user", "content": words(5000, "huge")})
        agent.messages += tool_round(0, 20)
        with pytest.raises(openai.BadRequestError) as info:
            agent.step()
        body = info.value.body
        assert isinstance(body, dict)
        assert "(the 4th message from the end, role user)" in body["message"], body["message"]


def test_the_refusal_counts_what_every_stage_leaves(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """The stages shrink the request (the guard drops every older round) but not enough: the
    refusal's count is the prompt the proxy would send, not the request as it came in."""
    with small_window(tmp_path, db_dsn, fake_upstream, summarize={"enabled": False}) as s:
        messages = [*rounds(6), {"role": "user", "content": words(3600, "huge")}]
        count = build_counter()
        with pytest.raises(openai.BadRequestError) as info:
            s.client("shrunk").chat.completions.create(model="gpt-fake", messages=messages)
        assert info.value.code == "context_length_exceeded"
        body = info.value.body
        assert isinstance(body, dict)
        found = re.search(r"needs about (\d+) .* as assembled is (\d+)", body["message"])
        assert found is not None
        needed, assembled = int(found[1]), int(found[2])
        alone = count(messages[-1:])  # the current turn: what stays once the rounds go
        assert alone <= needed <= alone * 1.1 < count(messages) <= assembled
        assert s.fake.requests == []
