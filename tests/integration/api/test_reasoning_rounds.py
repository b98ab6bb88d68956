"""A streamed reply's reasoning across ``read_tool_output``'s internal rounds.

Each round's ``reasoning_content`` deltas reach the client, as its ``content`` deltas do: the
client builds one message of them all. The stored reply is that message, so a client that keeps
the field (LiteLLM's stream builder) resends what is stored; and each later round sends the
round before it with its own reasoning, which DeepSeek's thinking mode asks back with a call.
"""

from __future__ import annotations

import json
import time
from typing import Any

from tests.fakes.replies import raw
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.read_tool_output_helpers import CLIENT_TOOLS, history, read_call
from tests.integration.api.reconcile_helpers import settled
from tests.integration.api.test_read_tool_output_answers import (
    config_path,  # noqa: F401  (the module's config: maxChars 2000, raw outputs kept)
)
from tests.integration.transcripts import api, blob, sdk


def _frame(delta: dict[str, Any], finish: str | None = None) -> str:
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "gpt-4o",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(chunk)}\n\n"


def test_the_stored_reply_holds_every_rounds_reasoning_as_the_client_saw_it(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    call = {"index": 0, **read_call("int_1", id="call_big", offset=0)}
    fake_upstream.script(
        raw(
            _frame({"role": "assistant", "content": None, "reasoning_content": "Need the "}),
            _frame({"reasoning_content": "log. "}),
            _frame({"content": "let me look ", "tool_calls": [call]}),
            _frame({}, "tool_calls"),
            "data: [DONE]\n\n",
        ),
        raw(
            _frame({"role": "assistant", "content": None, "reasoning_content": "Found it."}),
            _frame({"content": "done", "reasoning_content": None}),
            _frame({}, "stop"),
            "data: [DONE]\n\n",
        ),
    )
    messages = history("call_big", blob(9000, "big"))
    stream = sdk(proxy, "think").chat.completions.create(
        model="gpt-4o", messages=messages, tools=CLIENT_TOOLS, stream=True
    )
    seen = {"content": "", "reasoning_content": ""}
    for chunk in stream:
        for choice in chunk.choices:
            for key in seen:
                seen[key] += getattr(choice.delta, key, None) or ""
    assert seen == {"content": "let me look done", "reasoning_content": "Need the log. Found it."}
    later = fake_upstream.bodies()[1]["messages"][len(messages)]
    assert later["reasoning_content"] == "Need the log. "
    with api(proxy) as http:
        for _ in range(100):
            rows = http.get("/v1/sessions/think/messages").json()["data"]
            if len(rows) > len(messages):
                break
            time.sleep(0.02)
    assert rows[-1]["message"] == {"role": "assistant", **seen}


def _details(index: int, **fields: Any) -> dict[str, Any]:
    return {"reasoning_details": [{"index": index, "type": "reasoning.text", **fields}]}


def test_the_sdk_helpers_resend_of_every_rounds_reasoning_details_supersedes_nothing(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    # OpenRouter's reasoning_details: each round's entries merge, by index, into the
    # client's one message, and each later round sends the round before it with its own.
    call = {"index": 0, **read_call("int_1", id="call_big", offset=0)}
    fake_upstream.script(
        raw(
            _frame({"role": "assistant", "content": None, **_details(0, text="Need the ")}),
            _frame(_details(0, text="log.", signature="c2ln")),
            _frame({"content": "let me look ", "tool_calls": [call]}),
            _frame({}, "tool_calls"),
            "data: [DONE]\n\n",
        ),
        raw(
            _frame({"role": "assistant", "content": None, **_details(0, text=" Found it.")}),
            _frame({"content": "done", **_details(1, type="reasoning.encrypted", data="ZW5j")}),
            _frame({}, "stop"),
            "data: [DONE]\n\n",
        ),
    )
    messages: list[Any] = history("call_big", blob(9000, "big"))
    client = sdk(proxy, "details")
    with client.chat.completions.stream(
        model="gpt-4o", messages=messages, tools=CLIENT_TOOLS
    ) as stream:
        final = stream.get_final_completion().choices[0].message.model_dump()
    assert final["reasoning_details"][0]["text"] == "Need the log. Found it."
    later = fake_upstream.bodies()[1]["messages"][len(messages)]
    assert later["reasoning_details"][0]["text"] == "Need the log."
    messages += [final, {"role": "user", "content": "thanks"}]
    client.chat.completions.create(model="gpt-4o", messages=messages, tools=CLIENT_TOOLS)
    with api(proxy) as http:
        assert settled(http, "details", len(messages) + 1)["superseded_count"] == 0
