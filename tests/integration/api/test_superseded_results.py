"""Regression: a tool result a client rewrote (the same call id, at the same position) is
superseded, and ``GET …/messages?include_superseded=true`` still lists it, but it showed
the earlier result as the proxy stored it: a cut one came back cut with ``form=sent`` (its
whole text, kept among the spills its id replaced, was out of the API's reach: DESIGN says
the session API can still show what a client once sent), and a result never cut was marked
``truncated`` once another result under its id had been cut, since a superseded row was
judged by its id alone. Its chain hash, over what was sent, continues one of the rows at the
position before it: that tells a row stored as sent from a cut one, and which spill
rebuilds it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.replies import reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import write_config
from tests.integration.api.reconcile_helpers import post, settled, user

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
FIRST = "".join(f"first {i}\n" for i in range(600))
SECOND = "".join(f"second {i}\n" for i in range(600))


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    context = {
        "toolOutput": {"maxChars": 1000},
        "eviction": {"atFraction": 0.3, "keepRecentRounds": 1, "clearAtLeast": 200},
        "summarize": {"enabled": False},
    }
    models = {"default": {"contextLimit": 3000, "reservedOutput": 500}}
    return write_config(tmp_path / "agents.json", fake_upstream.url, models=models, context=context)


def _results(http: httpx.Client, sid: str, *contents: str) -> list[dict[str, Any]]:
    """The session's tool results, superseded too, once each of ``contents`` has been sent
    in turn as the one result of one call."""
    called = post(http, sid, HEAD, tools=TOOLS)["choices"][0]["message"]
    for content in contents:
        result = {"role": "tool", "tool_call_id": "c1", "content": content}
        post(http, sid, [*HEAD, called, result], tools=TOOLS)
        settled(http, sid, 5)
    params = {"include_superseded": "true", "form": "sent"}
    rows = http.get(f"/v1/sessions/{sid}/messages", params=params).json()["data"]
    return [r for r in rows if r["role"] == "tool"]


HEAD: list[Any] = [{"role": "system", "content": "S"}, user("q1")]


def test_a_superseded_cut_result_comes_back_as_sent(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(reply(None, tool_calls=[tool_call("f", {}, id="c1")]))
    old, new = _results(http, "rewritten-cut", FIRST, SECOND)
    assert (old["superseded"], old["truncated"]) == (True, True)
    assert old["message"]["content"] == FIRST
    assert (new["superseded"], new["truncated"]) == (False, True)
    assert new["message"]["content"] == SECOND


def test_a_superseded_result_never_cut_is_not_marked_truncated(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(reply(None, tool_calls=[tool_call("f", {}, id="c1")]))
    small, cut, last = _results(http, "rewritten-small", "small one", FIRST, "small two")
    assert (small["superseded"], small["truncated"]) == (True, False)
    assert small["message"]["content"] == "small one"
    assert (cut["superseded"], cut["truncated"], cut["message"]["content"]) == (True, True, FIRST)
    assert (last["superseded"], last["truncated"]) == (False, False)


def test_a_superseded_evicted_result_comes_back_as_sent(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    sid, messages = "rewritten-evicted", list(HEAD)
    outputs = ["".join(f"out{n} {i}\n" for i in range(100)) for n in range(4)]  # ~200 tokens
    for n, output in enumerate(outputs):
        fake_upstream.script(reply(None, tool_calls=[tool_call("f", {}, id=f"c{n}")]))
        called = post(http, sid, messages, tools=TOOLS)["choices"][0]["message"]
        messages += [called, {"role": "tool", "tool_call_id": f"c{n}", "content": output}]
    post(http, sid, messages, tools=TOOLS)
    settled(http, sid, len(messages) + 1)
    live = http.get(f"/v1/sessions/{sid}/messages").json()["data"]
    assert live[3]["evicted"], [(r["pos"], r["evicted"]) for r in live]
    messages[0] = {"role": "system", "content": "S, edited"}  # supersedes every row
    post(http, sid, messages, tools=TOOLS)
    params = {"include_superseded": "true", "form": "sent"}
    rows = http.get(f"/v1/sessions/{sid}/messages", params=params).json()["data"]
    old = [r for r in rows if r["pos"] == 3 and r["superseded"]]
    assert [r["message"]["content"] for r in old] == [outputs[0]]
    assert not old[0]["truncated"]
