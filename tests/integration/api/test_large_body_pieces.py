"""A chat body past ``api.body_pieces.PIECE_BYTES``, parsed a run of messages at a time,
reaches the provider as the client sent it (its fields, and its newest messages: the
context is over the fake provider's, so older ones are compacted), and the next request
that extends it does too."""

from __future__ import annotations

from typing import Any

import httpx

from tests.fakes.upstream import FakeUpstream

BOUND = 2**64 + 1  # after the messages: read exact, as a whole parse reads it


def _history(n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        out.append({"role": "user", "content": [{"type": "text", "text": f"{i} " + "y" * 700}]})
        out.append({"role": "assistant", "content": 'ok }, {"role": "user"} é', "x_i": i})
    return out


def test_a_large_body_reaches_upstream_as_sent_and_its_next_one_extends_it(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    schema = {"type": "integer", "maximum": BOUND}
    body = {
        "model": "gpt-fake",
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "messages": _history(1600),  # about 1.3 MiB: past one piece
        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}},
    }
    headers = {"x-session-id": "pieces-big"}
    first = http.post("/v1/chat/completions", json=body, headers=headers)
    assert first.status_code == 200, first.text
    _as_sent(fake_upstream.bodies()[-1], body)
    assert b'"maximum":18446744073709551617' in fake_upstream.requests[-1].content.replace(
        b" ", b""
    )
    more = {**body, "messages": [*body["messages"], first.json()["choices"][0]["message"]]}
    more["messages"].append({"role": "user", "content": "again"})
    second = http.post("/v1/chat/completions", json=more, headers=headers)
    assert second.status_code == 200, second.text
    _as_sent(fake_upstream.bodies()[-1], more)


def _as_sent(got: dict[str, Any], sent: dict[str, Any]) -> None:
    assert {k: v for k, v in got.items() if k != "messages"} == {
        k: v for k, v in sent.items() if k != "messages"
    }
    assert got["messages"][-20:] == sent["messages"][-20:]
