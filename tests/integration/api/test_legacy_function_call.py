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
