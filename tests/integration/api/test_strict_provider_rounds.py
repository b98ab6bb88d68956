"""``read_tool_output`` rounds against a provider that refuses what OpenAI refuses
(``tests/fakes/strict_openai.py``): whatever the rounds end in, the reply the client gets is
one it can send back, so its next request passes the provider's checks."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fakes.replies import raw, reply, tool_call
from tests.fakes.strict_openai import MAX_TOOLS, violations
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, replied
from tests.integration.api.read_tool_output_helpers import (
    CLIENT_TOOLS,
    chat,
    history,
    read_call,
)
from tests.integration.api.test_read_tool_output_answers import (
    config_path,  # noqa: F401  (the module's config: maxChars 2000, raw outputs kept)
)
from tests.integration.transcripts import api, blob, sdk


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_a_silent_model_cut_off_reading_gets_the_client_a_reply_it_can_resend(
    proxy: ProxyServer, fake_upstream: FakeUpstream, stream: bool
) -> None:
    fake_upstream.validator = violations
    rounds = proxy.settings.max_internal_rounds + 1
    fake_upstream.script(
        *(reply(None, tool_calls=[read_call(f"int_{n}", id="call_big")]) for n in range(rounds))
    )
    messages = history("call_big", blob(9000, "big"))
    if stream:
        chunks = list(chat(proxy, "s1", messages, stream=True))
        pieces = [c.choices[0].delta.content for c in chunks if c.choices]
        content = "".join(p or "" for p in pieces) if any(p is not None for p in pieces) else None
        answer: dict[str, Any] = {"role": "assistant", "content": content}
    else:
        answer = chat(proxy, "s1", messages).choices[0].message.model_dump(exclude_none=True)
    assert "tool_calls" not in answer
    chat(proxy, "s1", [*messages, answer, {"role": "user", "content": "and now?"}])
    assert fake_upstream.violations == []
    assert len(fake_upstream.bodies()) == rounds + 1


def _calls(stream: bool, proxy: ProxyServer, messages: list[Any]) -> dict[str, Any]:
    """The assistant message the client assembles, streamed (the SDK's stream helper) or not."""
    if not stream:
        out = chat(proxy, "p", messages)
        return out.choices[0].message.model_dump(exclude_none=True)  # type: ignore[no-any-return]
    kw = {"model": "gpt-4o", "messages": messages, "tools": CLIENT_TOOLS}
    with sdk(proxy, "p").chat.completions.stream(**kw) as events:  # type: ignore[arg-type]
        final = events.get_final_completion()
    return final.choices[0].message.model_dump(exclude_none=True)  # type: ignore[no-any-return]


@pytest.mark.parametrize("where", [0, 1, 3])
@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_parallel_calls_keep_their_order_and_pairing_around_the_proxys_own(
    proxy: ProxyServer, fake_upstream: FakeUpstream, stream: bool, where: int
) -> None:
    fake_upstream.validator = violations
    own = [tool_call("run_tests", {"k": k}, id=f"own_{k}") for k in range(3)]
    calls = [*own[:where], read_call("int_1", id="call_big"), *own[where:]]
    fake_upstream.script(reply("checking", tool_calls=calls), reply("all green"))
    messages = history("call_big", blob(9000, "big"))
    answer = _calls(stream, proxy, messages)
    assert [c["id"] for c in answer["tool_calls"]] == ["own_0", "own_1", "own_2"]
    assert [json.loads(c["function"]["arguments"]) for c in answer["tool_calls"]] == [
        {"k": 0},
        {"k": 1},
        {"k": 2},
    ]
    results = [{"role": "tool", "tool_call_id": f"own_{k}", "content": f"ok {k}"} for k in range(3)]
    chat(proxy, "p", [*messages, answer, *results])
    assert fake_upstream.violations == []
    sent = fake_upstream.bodies()[-1]["messages"]
    assert [c["id"] for c in sent[3]["tool_calls"]] == ["own_0", "own_1", "own_2"]
    assert [m.get("tool_call_id") for m in sent[4:]] == ["own_0", "own_1", "own_2"]


def test_a_streamed_refusal_is_stored_with_null_content_beside_it(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    head = '{"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":'
    fake_upstream.script(
        raw(
            f'data: {head}[{{"index":0,"delta":{{"role":"assistant","content":null}}}}]}}\n\n',
            f'data: {head}[{{"index":0,"delta":{{"refusal":"I cannot."}}}}]}}\n\n',
            f'data: {head}[{{"index":0,"delta":{{}},"finish_reason":"stop"}}]}}\n\n',
            "data: [DONE]\n\n",
        )
    )
    list(chat(proxy, "ref", [{"role": "user", "content": "hi"}], stream=True))
    with api(proxy) as http:
        replied(http, "ref")
        stored = http.get("/v1/sessions/ref/messages").json()["data"][-1]["message"]
    assert stored == {"role": "assistant", "refusal": "I cannot.", "content": None}


@pytest.mark.parametrize("count", [MAX_TOOLS - 1, MAX_TOOLS])
def test_a_request_with_as_many_tools_as_a_provider_takes_gets_no_offer(
    proxy: ProxyServer, fake_upstream: FakeUpstream, count: int
) -> None:
    fake_upstream.validator = violations
    tools = [
        {"type": "function", "function": {"name": f"tool_{i}", "parameters": {"type": "object"}}}
        for i in range(count)
    ]
    chat(proxy, "many", history("call_big", blob(9000, "big")), tools=tools)
    assert fake_upstream.violations == []
    (body,) = fake_upstream.bodies()
    offered = body["tools"][-1]["function"]["name"] == "read_tool_output"
    assert offered == (count < MAX_TOOLS)
    assert ("read_tool_output" in body["messages"][-1]["content"]) == offered
