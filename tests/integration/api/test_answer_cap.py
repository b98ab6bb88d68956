"""A provider's answer over the proxy's cap (``proxy.answers.MAX_ANSWER_BYTES``, lowered here
so no test sends tens of MiB): a whole answer is a 502 ``upstream_bad_response`` naming the
cap, a stream's event one that never ends included, its in-band error frame and ``[DONE]``,
the provider's connection closed; neither is stored as if it were a whole answer."""

from __future__ import annotations

import json

import httpx
import pytest

from proxy import answers
from tests.fakes.replies import Pacer, raw
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import Records, wait_for
from tests.integration.api.sessions_helpers import live_messages
from tests.integration.api.sse_frames import DONE, _data_frames, _payload, stream_chat

CAP = 4096
_HEAD = {"id": "c-big", "object": "chat.completion.chunk", "created": 1, "model": "m"}


@pytest.fixture(autouse=True)
def _small_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(answers, "MAX_ANSWER_BYTES", CAP)


def test_a_whole_answer_over_the_cap_is_a_502_naming_it_logged_once(
    http: httpx.Client, fake_upstream: FakeUpstream, records: Records
) -> None:
    completion = {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "w" * 3 * CAP}}],
    }
    body = json.dumps(completion).encode()
    pieces = [body[i : i + 1000] for i in range(0, len(body), 1000)]
    fake_upstream.script(raw(*pieces, headers={"content-type": "application/json"}))
    turn = [{"role": "user", "content": "go"}]
    resp = http.post(
        "/v1/chat/completions",
        headers={"x-session-id": "too-big"},
        json={"model": "gpt-fake", "messages": turn},
    )
    assert resp.status_code == 502
    err = resp.json()["error"]
    assert err["code"] == "upstream_bad_response" and "4096 bytes" in err["message"]
    lines = [r.getMessage() for r in records.errors() if "4096 bytes" in r.getMessage()]
    assert len(lines) == 1 and "openai" in lines[0], lines
    assert live_messages(http, "too-big") == turn


@pytest.mark.parametrize("ended", [False, True], ids=["line-never-ends", "one-huge-event"])
def test_a_stream_event_over_the_cap_ends_the_stream_and_closes_the_provider(
    http: httpx.Client, fake_upstream: FakeUpstream, ended: bool
) -> None:
    start = {**_HEAD, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "a"}}]}
    huge = [b'data: {"choices": [{"index": 0, "delta": {"content": "'] + [b"x" * 1000] * 8
    if ended:
        huge[-1] += b'"}}]}\n\n'
    pacer = Pacer()  # what follows is never let out: the fake waits until the proxy leaves
    pacer.allow(len(huge))
    rest = [b"y" * 1000, b"data: [DONE]\n\n"]
    fake_upstream.script(raw(f"data: {json.dumps(start)}\n\n", *huge, *rest, pacer=pacer))
    sid = f"big-event-{ended}"
    turn = [{"role": "user", "content": "go"}]
    resp = stream_chat(http, sid, turn)
    assert resp.status_code == 200
    frames = _data_frames(resp.content)
    assert _payload(frames[0])["choices"][0]["delta"]["content"] == "a"
    err = _payload(frames[1])["error"]
    assert err["code"] == "upstream_bad_response" and "4096 bytes" in err["message"]
    assert frames[2:] == [DONE]
    assert wait_for(lambda: fake_upstream.disconnects) == [0]
    assert live_messages(http, sid) == turn
