"""A streamed answer of the legacy ``functions`` API is stored with its ``function_call``.

The stream's ``delta.function_call`` pieces were not folded into the stored reply, which was
an empty assistant message: the session API showed no call, and the client's next request,
which resends the call, superseded it.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai

from tests.fakes.replies import raw
from tests.fakes.upstream import FakeUpstream

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

    rows = http.get(f"/v1/sessions/{SID}/messages", params={"include_superseded": "true"}).json()
    assert [(r["role"], r["superseded"]) for r in rows["data"]] == [
        ("user", False),
        ("assistant", False),
        ("function", False),
        ("assistant", False),
    ]
    assert rows["data"][1]["message"]["function_call"] == {"name": "lookup", "arguments": '{"x":1}'}
