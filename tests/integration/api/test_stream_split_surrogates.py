"""A provider that writes JSON with ASCII escapes (``\\ud83d\\ude00`` for an emoji) and cuts
its text between two UTF-16 units, as a gateway that slices a JavaScript string does: each
chunk holds half a character. The SDK hands both halves on, and a client that keeps the text
resends the character they make; the proxy stores the reply those halves join into, where it
once failed to hash it (a lone surrogate is no UTF-8), logged a traceback and kept no reply,
so the next request rewrote the history instead of extending it."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.fakes.replies import raw
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, Records, wait_for


def _frame(delta: str, finish: str = "null") -> str:
    return (
        'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",'
        f'"choices":[{{"index":0,"delta":{delta},"finish_reason":{finish}}}]}}\n\n'
    )


def test_a_character_split_into_escaped_halves_is_stored_whole(
    proxy: ProxyServer, http: httpx.Client, fake_upstream: FakeUpstream, records: Records
) -> None:
    sid = "split-pair"
    fake_upstream.script(
        raw(
            _frame('{"role":"assistant","content":"smile \\ud83d"}'),
            _frame('{"content":"\\ude00 end"}'),
            _frame("{}", '"stop"'),
            "data: [DONE]\n\n",
        )
    )
    client = openai.OpenAI(
        base_url=proxy.url,
        api_key="sk-test-client",
        max_retries=0,
        default_headers={"x-session-id": sid},
    )
    turn = [{"role": "user", "content": "hi"}]

    stream = client.chat.completions.create(model="m", messages=turn, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    def rows() -> list[dict]:
        return http.get(f"/v1/sessions/{sid}/messages").json()["data"]

    assert text == "smile \ud83d\ude00 end"  # as relayed: two halves
    assert wait_for(lambda: len(rows()) == 2), records.errors()
    whole = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    assert rows()[-1]["message"]["content"] == whole == "smile \U0001f600 end"
    again = [*turn, {"role": "assistant", "content": whole}, {"role": "user", "content": "go"}]
    client.chat.completions.create(model="m", messages=again)
    assert wait_for(lambda: len(rows()) == 4)
    assert [r["superseded"] for r in rows()] == [False] * 4
    assert not [r for r in records.errors() if r.levelname == "ERROR"]


@pytest.mark.parametrize("half", ["\ud83d", "\ude00"], ids=["high", "low"])
def test_a_half_with_no_partner_is_stored_as_a_replacement_character(
    proxy: ProxyServer, http: httpx.Client, fake_upstream: FakeUpstream, half: str
) -> None:
    """Either half alone: a provider that cuts a character keeps its first half or, from a
    gateway that drops the first, its second, and the client resends what it was given."""
    sid = f"lone-half-{ord(half):x}"
    escape = json.dumps(half)[1:-1]
    fake_upstream.script(
        raw(
            _frame(f'{{"role":"assistant","content":"cut {escape}"}}'),
            _frame("{}", '"stop"'),
            "data: [DONE]\n\n",
        )
    )
    turn = [{"role": "user", "content": "hi"}]
    body = {"model": "m", "messages": turn, "stream": True}
    assert http.post("/v1/chat/completions", json=body, headers={"x-session-id": sid}).is_success

    def rows() -> list[dict]:
        return http.get(f"/v1/sessions/{sid}/messages").json()["data"]

    assert wait_for(lambda: len(rows()) == 2)
    assert rows()[-1]["message"]["content"] == "cut \ufffd"
    # the client resends the half it was given (an SDK writes it as its escape): the history
    # extends, where orjson refused the body (400) and the conversation could not go on
    cut = {"role": "assistant", "content": f"cut {half}"}
    again = [*turn, cut, {"role": "user", "content": "go"}]
    resent = json.dumps({"model": "m", "messages": again}).encode()
    answer = http.post(
        "/v1/chat/completions",
        content=resent,
        headers={"x-session-id": sid, "content-type": "application/json"},
    )
    assert answer.status_code == 200, answer.text
    assert wait_for(lambda: len(rows()) == 4)
    assert [r["superseded"] for r in rows()] == [False] * 4
    assert fake_upstream.bodies()[-1]["messages"][1]["content"] == "cut \ufffd"


def test_a_whole_answer_holding_a_lone_half_is_relayed_and_stored_with_a_replacement(
    http: httpx.Client, fake_upstream: FakeUpstream, records: Records
) -> None:
    """JSON's grammar takes a lone ``\\ud83d`` escape and the SDKs read it; orjson refuses
    it, and the proxy answered 502 "its JSON does not parse" to an answer its client reads."""
    sid = "lone-half-whole"
    body = (
        '{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,'
        '"message":{"role":"assistant","content":"cut \\ud83d"},"finish_reason":"length"}],'
        '"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}'
    )
    fake_upstream.script(raw(body, headers={"content-type": "application/json"}))
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}

    answer = http.post("/v1/chat/completions", json=chat, headers={"x-session-id": sid})

    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == "cut \ud83d"

    def rows() -> list[dict]:
        return http.get(f"/v1/sessions/{sid}/messages").json()["data"]

    assert wait_for(lambda: len(rows()) == 2), records.errors()
    assert rows()[-1]["message"]["content"] == "cut \ufffd"
