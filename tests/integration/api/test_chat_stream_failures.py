"""Streaming chat through the real proxy when the stream breaks or ends early.

A client that hangs up cancels the upstream request and leaves the session unlocked; an
upstream reset, an error frame or a stream that ends without a finish reason or ``[DONE]``
ends the relay with one OpenAI-shaped error frame and ``[DONE]``, stores no partial reply and
raises ``APIError`` in the official SDK; ``[DONE]`` or a finish reason on every choice marks
an answer complete, and it is stored.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.replies import Pacer, Reply, raw, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import Records, wait_for
from tests.integration.api.sessions_helpers import live_messages
from tests.integration.api.sse_frames import DONE, _data_frames, _payload, stream_chat


@pytest.mark.parametrize(
    ("slow", "hang_up_after"),
    [
        # the rest of the answer waits for the test, which never lets it go
        (reply("x" * 40, chunks=20, pacer=Pacer()), "data:"),
        # a proxy that kept reading would hold the call 20 s: 5x the bound below
        (reply("late", first_token_delay=20.0), ": keep-alive"),
        (reply("late", first_byte_delay=20.0), ": keep-alive"),
    ],
    ids=["mid_stream", "waiting_for_first_token", "waiting_for_headers"],
)
def test_client_disconnect_cancels_upstream_request(
    slow: Reply, hang_up_after: str, http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(slow)
    body = {"model": "gpt-fake", "messages": [{"role": "user", "content": "long"}], "stream": True}
    headers = {"x-session-id": "disconnect-me"}

    with http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as resp:
        for line in resp.iter_lines():
            if line.startswith(hang_up_after):
                break
    t_closed = time.monotonic()

    assert wait_for(lambda: fake_upstream.disconnects, timeout=4) == [0]
    assert time.monotonic() - t_closed < 4
    # The session is not left locked: the next turn on it goes through at once.
    fake_upstream.script(reply("again"))
    again = http.post(
        "/v1/chat/completions", json={**body, "stream": False}, headers=headers, timeout=3
    )
    assert again.status_code == 200
    assert again.json()["choices"][0]["message"]["content"] == "again"


def test_mid_stream_reset_ends_with_error_frame_then_done(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    headers = {"x-session-id": "reset-me"}
    turn1 = [{"role": "user", "content": "hello"}]
    fake_upstream.script(reply("hi"), reply("partial answer here", chunks=3, reset_after=2))
    http.post(
        "/v1/chat/completions", json={"model": "gpt-fake", "messages": turn1}, headers=headers
    )
    before = wait_for(lambda: _live_messages(http, "reset-me", 2))
    turn2 = [*turn1, {"role": "assistant", "content": "hi"}, {"role": "user", "content": "go"}]

    resp = http.post(
        "/v1/chat/completions",
        json={"model": "gpt-fake", "messages": turn2, "stream": True},
        headers=headers,
    )

    assert resp.status_code == 200
    frames = _data_frames(resp.content)
    assert frames[-1] == DONE
    # The frames the upstream did send are relayed, then the error.
    relayed = [_payload(f)["choices"][0]["delta"] for f in frames[:-2]]
    assert relayed == [{"role": "assistant", "content": ""}, {"content": "partial"}]
    err = _payload(frames[-2])["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert "provider" in err["message"] and "broke off" in err["message"]
    # Nothing stored before the broken turn is lost.
    assert _live_messages(http, "reset-me", 0)[:2] == before


def test_a_provider_error_frame_mid_stream_is_relayed_and_no_reply_is_stored(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    # As on a reset: the answer failed, so it is not stored as if it were whole.
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": "partial "}}],
    }
    failure = {"error": {"message": "overloaded", "type": "server_error", "code": None}}
    fake_upstream.script(
        raw(
            f"data: {json.dumps(chunk)}\n\n", f"data: {json.dumps(failure)}\n\n", "data: [DONE]\n\n"
        ),
        reply("later"),
    )
    turn = [{"role": "user", "content": "go"}]
    resp = stream_chat(http, "err-frame", turn)
    assert resp.status_code == 200
    frames = _data_frames(resp.content)
    assert _payload(frames[-2]) == failure and frames[-1] == DONE
    # the step ended with the body (the stream's last act), and stored no partial reply
    assert _live_messages(http, "err-frame", 0) == turn
    again = http.post(
        "/v1/chat/completions",
        headers={"x-session-id": "err-frame"},
        json={"model": "gpt-fake", "messages": turn},
    )
    assert again.json()["choices"][0]["message"]["content"] == "later"


_CALL = {"id": "call_1", "type": "function", "function": {"name": "run", "arguments": '{"x": 1}'}}
_WHOLE = {
    "id": "c1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": "let me look", "tool_calls": [_CALL]},
        }
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
}


@pytest.mark.parametrize("usage", [True, False], ids=["usage-asked", "usage-not-asked"])
def test_a_whole_json_answer_to_a_stream_reaches_the_sdk_as_a_stream_and_is_stored(
    client: openai.OpenAI,
    http: httpx.Client,
    fake_upstream: FakeUpstream,
    records: Records,
    usage: bool,
) -> None:
    # A provider that ignores "stream" answers with a whole completion: its bytes went out as
    # they came, which the SDK read as an empty, successful stream, and nothing was stored.
    fake_upstream.script(raw(json.dumps(_WHOLE), headers={"content-type": "application/json"}))
    turn = [{"role": "user", "content": "go"}]
    with client.chat.completions.stream(
        model="gpt-fake",
        messages=turn,  # type: ignore[arg-type]
        stream_options={"include_usage": True} if usage else openai.NOT_GIVEN,
        extra_headers={"x-session-id": "json-stream"},
    ) as stream:
        final = stream.get_final_completion()
    (choice,) = final.choices
    assert (choice.message.content, choice.finish_reason) == ("let me look", "tool_calls")
    calls = [c.model_dump(exclude_none=True) for c in choice.message.tool_calls or []]
    assert calls == [{**_CALL, "index": 0}]  # the stream helper keeps each delta's index
    assert (final.usage.total_tokens if final.usage else None) == (8 if usage else None)
    stored = wait_for(lambda: _live_messages(http, "json-stream", 2))
    assert stored == [*turn, _WHOLE["choices"][0]["message"]]  # type: ignore[index]
    warned = [r.getMessage() for r in records.errors() if "whole" in r.getMessage()]
    assert len(warned) == 1 and fake_upstream.origin in warned[0], warned


def _live_messages(http: httpx.Client, sid: str, at_least: int) -> list[Any]:
    live = live_messages(http, sid)
    return live if len(live) >= at_least else []


def test_mid_stream_reset_raises_api_error_in_sdk(
    client: openai.OpenAI, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(reply("partial answer here", chunks=3, reset_after=2))

    stream = client.chat.completions.create(
        model="gpt-fake", messages=[{"role": "user", "content": "go"}], stream=True
    )
    with pytest.raises(openai.APIError, match="provider"):
        for _ in stream:
            pass


# --------------------------------------------------------------------------- ended early

_HEAD = {"id": "c-early", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def _frame(delta: dict[str, Any], finish: str | None = None) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return f"data: {json.dumps({**_HEAD, 'choices': [choice]})}\n\n"


_START = (_frame({"role": "assistant", "content": ""}), _frame({"content": "partial"}))


@pytest.mark.parametrize(
    "ending",
    [(), (": keep-alive\n\n",), ('data: {"id": "c-early", "choices": [{"ind',)],
    ids=["closed", "after-a-comment", "mid-event"],
)
def test_a_stream_that_ends_without_finish_or_done_is_an_error_and_stores_nothing(
    http: httpx.Client, fake_upstream: FakeUpstream, ending: tuple[str, ...]
) -> None:
    # Issue 21 item 2: the connection closes normally, but the answer never said it was done.
    sid = "ended-early"
    turn = [{"role": "user", "content": "go"}]
    fake_upstream.script(raw(*_START, *ending), reply("whole", chunks=1))
    resp = stream_chat(http, sid, turn)
    assert resp.status_code == 200
    frames = _data_frames(resp.content)
    assert [_payload(f)["choices"][0]["delta"] for f in frames[:2]] == [
        {"role": "assistant", "content": ""},
        {"content": "partial"},
    ]
    err = _payload(frames[2])["error"]
    assert set(err) == {"message", "type", "param", "code"} and "provider" in err["message"]
    assert frames[3:] == [DONE]
    assert _live_messages(http, sid, 0) == turn  # no assistant row for the step

    again = stream_chat(http, sid, turn)
    assert b"whole" in again.content and _data_frames(again.content)[-1] == DONE
    stored = wait_for(lambda: _live_messages(http, sid, 2))
    assert stored == [*turn, {"role": "assistant", "content": "whole"}]


def test_a_stream_of_nothing_but_comments_is_an_error(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(raw(": hello\n\n"))
    resp = http.post(
        "/v1/chat/completions",
        headers={"x-session-id": "only-comments"},
        json={"model": "gpt-fake", "messages": [{"role": "user", "content": "go"}], "stream": True},
    )
    frames = _data_frames(resp.content)
    assert "error" in _payload(frames[0]) and frames[1:] == [DONE]


@pytest.mark.parametrize(
    "ending",
    [("data: [DONE]\n\n",), ("data: [DONE]",), (_frame({}, "stop"),)],
    ids=["done-without-finish", "done-without-blank-line", "finish-without-done"],
)
def test_a_stream_with_done_or_a_finish_reason_is_complete_and_stored(
    http: httpx.Client, fake_upstream: FakeUpstream, ending: tuple[str, ...]
) -> None:
    # Either signal says the answer ended: [DONE], or a finish reason on every choice.
    sid = "complete-" + str(abs(hash(ending)))
    turn = [{"role": "user", "content": "go"}]
    fake_upstream.script(raw(*_START, *ending))
    resp = stream_chat(http, sid, turn)
    # relayed as it came, a last event without its blank line given one
    assert resp.content == "".join((*_START, *ending)).rstrip("\n").encode() + b"\n\n"
    stored = wait_for(lambda: _live_messages(http, sid, 2))
    assert stored == [*turn, {"role": "assistant", "content": "partial"}]


def test_a_stream_that_ends_early_raises_api_error_in_sdk(
    client: openai.OpenAI, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(raw(*_START))
    stream = client.chat.completions.create(
        model="gpt-fake", messages=[{"role": "user", "content": "go"}], stream=True
    )
    with pytest.raises(openai.APIError, match="provider"):
        for _ in stream:
            pass


def test_what_follows_done_is_relayed_but_not_stored(
    client: openai.OpenAI, http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    # The official SDK stops reading at [DONE]: the stored reply is the text before it, the
    # one the client carries on with, not that text with what a provider sent after it.
    sid = "after-done"
    turn = [{"role": "user", "content": "go"}]
    sent = (*_START, _frame({}, "stop"), "data: [DONE]\n\n", _frame({"content": " and more"}))
    fake_upstream.script(raw(*sent))
    resp = stream_chat(http, sid, turn)
    assert resp.content == "".join(sent).encode()  # relayed as it came
    fake_upstream.script(raw(*sent))
    stream = client.chat.completions.create(
        model="gpt-fake", messages=turn, stream=True, extra_headers={"x-session-id": sid}
    )
    kept = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert kept == "partial"
    stored = wait_for(lambda: _live_messages(http, sid, 2))
    assert stored == [*turn, {"role": "assistant", "content": kept}]


@pytest.mark.parametrize("asks_usage", [False, True], ids=["usage-stripped", "usage-asked"])
def test_a_last_event_without_its_blank_line_is_read_as_a_whole_one(
    http: httpx.Client, fake_upstream: FakeUpstream, asks_usage: bool
) -> None:
    # The provider closes right after its last line: that event still counts, its usage too,
    # and goes out ended by its blank line (an SSE client drops an event cut off at the end).
    sid = f"last-unended-{asks_usage}"
    turn = [{"role": "user", "content": "go"}]
    usage = {"prompt_tokens": 4321, "completion_tokens": 1, "total_tokens": 4322}
    last = f"data: {json.dumps({**_HEAD, 'choices': [], 'usage': usage})}\n"
    fake_upstream.script(raw(*_START, _frame({}, "stop"), last))
    body: dict[str, Any] = {"model": "gpt-fake", "messages": turn, "stream": True}
    if asks_usage:
        body["stream_options"] = {"include_usage": True}
    resp = http.post("/v1/chat/completions", headers={"x-session-id": sid}, json=body)
    shown = "".join((*_START, _frame({}, "stop"), last + "\n" if asks_usage else "")).encode()
    assert resp.content == shown
    assert wait_for(lambda: _live_messages(http, sid, 2)) == [
        *turn,
        {"role": "assistant", "content": "partial"},
    ]
    seen = wait_for(lambda: http.get(f"/v1/sessions/{sid}").json().get("last_prompt_tokens"))
    assert seen == 4321
