"""A streamed answer of the legacy ``functions`` API is stored with its ``function_call``.

The stream's ``delta.function_call`` pieces were not folded into the stored reply, which was
an empty assistant message: the session API showed no call, and the client's next request,
which resends the call, superseded it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import openai

from tests.fakes.replies import raw
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import Agent, stack, words
from tests.integration.api.conftest import replied

SID = "legacy-functions"
FUNCTIONS: list[Any] = [
    {"name": "lookup", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}
]


def _frame(delta: dict[str, Any], finish: str | None = None) -> str:
    chunk = {
        "id": "chatcmpl-legacy",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-fake",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(chunk)}\n\n"


def test_a_streamed_function_call_is_stored_as_the_client_got_it(
    client: openai.OpenAI, http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(
        raw(
            _frame({"role": "assistant", "content": None, "function_call": {"name": "lookup"}}),
            _frame({"function_call": {"arguments": '{"x":'}}),
            _frame({"function_call": {"arguments": "1}"}}),
            _frame({}, "function_call"),
            "data: [DONE]\n\n",
        )
    )
    history: list[Any] = [{"role": "user", "content": "look it up"}]
    with client.chat.completions.stream(
        model="gpt-fake", messages=history, functions=FUNCTIONS, extra_headers={"X-Session-Id": SID}
    ) as stream:
        got = stream.get_final_completion().choices[0].message
    assert got.function_call is not None and got.function_call.arguments == '{"x":1}'

    history += [
        got.model_dump(exclude_none=True),
        {"role": "function", "name": "lookup", "content": "42"},
    ]
    client.chat.completions.create(
        model="gpt-fake", messages=history, functions=FUNCTIONS, extra_headers={"X-Session-Id": SID}
    )

    replied(http, SID)  # the second reply is stored just after its answer
    rows = http.get(f"/v1/sessions/{SID}/messages", params={"include_superseded": "true"}).json()
    assert [(r["role"], r["superseded"]) for r in rows["data"]] == [
        ("user", False),
        ("assistant", False),
        ("function", False),
        ("assistant", False),
    ]
    assert rows["data"][1]["message"]["function_call"] == {"name": "lookup", "arguments": '{"x":1}'}


def _legacy_round(i: int, text: str) -> list[dict[str, Any]]:
    call = {"name": "lookup", "arguments": json.dumps({"x": i})}
    return [
        {"role": "user", "content": f"look up {i}"},
        {"role": "assistant", "content": None, "function_call": call},
        {"role": "function", "name": "lookup", "content": text},
    ]


def test_legacy_function_results_go_upstream_and_are_stored_as_sent(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    # role "function" results are no tool results to the cascade: over maxChars (24000),
    # of repeated lines that lossless compaction would fold, and together past eviction's
    # 12.5% of the window, each goes upstream and into the store byte for byte (redacted
    # like any message the client sends); nothing is cut, folded, cleared or lost.
    sid = "legacy-results"
    texts = ["".join(f"row {i}: the same line again\n" for _ in range(1200)) for i in range(4)]
    secret = "password=hunter22"
    texts[0] += secret
    history: list[Any] = [m for i, t in enumerate(texts) for m in _legacy_round(i, t)]
    expected = [texts[0].replace(secret, "password=[REDACTED]"), *texts[1:]]
    for step in range(2):
        body = {"model": "gpt-fake", "messages": history, "functions": FUNCTIONS}
        resp = http.post("/v1/chat/completions", json=body, headers={"X-Session-Id": sid})
        assert resp.status_code == 200, resp.text
        sent = fake_upstream.bodies()[-1]["messages"]
        assert [m["content"] for m in sent if m["role"] == "function"] == expected, step
        assert all(len(t) > 24000 for t in texts)
        history += [resp.json()["choices"][0]["message"], {"role": "user", "content": "more"}]
    rows = http.get(f"/v1/sessions/{sid}/messages").json()["data"]
    stored = [r for r in rows if r["role"] == "function"]
    assert [r["message"]["content"] for r in stored] == expected
    assert not any(r["evicted"] or r["truncated"] for r in stored)


def _assert_legacy_paired(messages: Sequence[Mapping[str, Any]]) -> None:
    """Every ``function`` result directly follows the ``function_call`` it answers, and every
    such call is answered by the next message."""
    for i, m in enumerate(messages):
        call = m.get("function_call")
        if m.get("role") == "function":
            before = messages[i - 1].get("function_call") if i else None
            assert before and before["name"] == m["name"], f"orphan function result at {i}"
        if call:
            after = messages[i + 1] if i + 1 < len(messages) else {}
            assert after.get("role") == "function", f"unanswered function_call at {i}"


def test_the_overflow_guard_drops_a_function_call_with_its_result(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    # large calls, small results: the guard's cheapest cut lands right after a call, and it
    # used to drop that call and send its result with nothing before it
    with stack(tmp_path, db_dsn, fake_upstream, summarize={"enabled": False}) as s:
        agent = Agent(s.client("legacy-trim"))
        agent.messages.append({"role": "user", "content": "Look everything up."})
        for i in range(10):
            call = {"name": "lookup", "arguments": json.dumps({"x": i, "why": words(400, f"a{i}")})}
            agent.messages += [
                {"role": "assistant", "content": None, "function_call": call},
                {"role": "function", "name": "lookup", "content": str(i)},
            ]
        agent.step(functions=FUNCTIONS)
        (main,) = s.main_bodies()
        sent = main["messages"]
        assert sent[:2] == agent.messages[:2], "system and task are kept"
        assert len(sent) < len(agent.messages) - 1
        _assert_legacy_paired(sent)
        (trimmed,) = s.events("legacy-trim", "context.trimmed")
        assert trimmed["dropped_messages"] % 2 == 0 and trimmed["dropped_messages"] > 0
