"""A fast model's answer whose content is a list of parts (some OpenAI-compatible servers
answer so, a reasoning model's thinking in a part of its own) is read as its text parts
joined, as a message's text is everywhere else: its briefing is usable, not the list's repr.
An answer streamed although the call asked for none (a gateway that always streams) reads as
its chunks joined, its finish reason the last one's, rather than as a body that is no JSON."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.cascade.briefing import parse_briefing
from proxy.services.fastmodel import answer_data, read_fast_answer

_BRIEFING = (
    "## Objective\nFix the parser\n\n## Decisions & Facts\n- keep the public API\n\n"
    "## Files & State\n(none)\n\n## Open Tasks\n- finish the fix\n\n## Next Step\nrun the tests"
)

_JOB = SimpleNamespace(fast_model="fast", provider=SimpleNamespace(name="p"))


class _Reply:
    status_code = 200

    def __init__(self, content: Any) -> None:
        message = {"role": "assistant", "content": content}
        self.text = json.dumps({"choices": [{"index": 0, "message": message}]})

    def json(self) -> Any:
        return json.loads(self.text)


def test_an_answer_in_parts_reads_as_its_text_parts() -> None:
    thinking = {"type": "thinking", "thinking": [{"type": "text", "text": "## Objective\nno"}]}
    reply = _Reply([thinking, {"type": "text", "text": _BRIEFING}])
    status, text = read_fast_answer(_JOB, reply)
    assert status == 200 and text == _BRIEFING
    assert parse_briefing(text) == _BRIEFING


def test_a_string_answer_is_read_as_it_is() -> None:
    _, text = read_fast_answer(_JOB, _Reply(_BRIEFING))
    assert text == _BRIEFING


class _Streamed:
    status_code = 200

    def __init__(self, pieces: list[str], finish: str) -> None:
        def frame(delta: dict[str, Any], reason: str | None = None) -> str:
            choice = {"index": 0, "delta": delta, "finish_reason": reason}
            return f"data: {json.dumps({'choices': [choice]})}\n\n"

        frames = [frame({"role": "assistant", "content": ""})]
        frames += [frame({"content": p}) for p in pieces] + [frame({}, finish)]
        usage = {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}
        frames.append(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n")
        self.text = ": keep-alive\n\n" + "".join(frames) + "data: [DONE]\n\n"
        self.headers = {"content-type": "text/event-stream"}

    def json(self) -> Any:
        return json.loads(self.text)


def test_a_streamed_answer_reads_as_its_chunks_joined() -> None:
    reply = _Streamed([_BRIEFING[:40], _BRIEFING[40:]], "stop")
    status, text = read_fast_answer(_JOB, reply)
    assert status == 200 and text == _BRIEFING
    data = answer_data(reply)
    assert data["choices"][0]["finish_reason"] == "stop"
    assert data["usage"]["total_tokens"] == 12
    assert answer_data(_Streamed([_BRIEFING[:40]], "length"))["choices"][0]["finish_reason"] == (
        "length"
    )


_KEY = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"


class _Raw:
    """A 200 whose body is ``text`` as it came, sent with ``_KEY`` as its bearer."""

    status_code = 200
    headers = {"content-type": "text/event-stream"}
    request = SimpleNamespace(headers={"authorization": f"Bearer {_KEY}"})

    def __init__(self, text: str) -> None:
        self.text = text

    def json(self) -> Any:
        return json.loads(self.text)


def _frames(*chunks: dict[str, Any]) -> str:
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)


def _content(text: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}


def test_a_stream_with_an_error_event_is_unusable_and_quotes_it_without_the_key() -> None:
    """A gateway's stream that breaks off with an error event holds the briefing only up to
    there: unusable (its missing sections would keep the previous summary's stale text), the
    error quoted for the failure's event, the key it may echo scrubbed."""
    error = {"error": {"message": f"upstream reset (key {_KEY})", "type": "server_error"}}
    reply = _Raw(_frames(_content(_BRIEFING[:40]), error) + "data: [DONE]\n\n")
    with pytest.raises(ValueError, match="upstream reset") as caught:
        read_fast_answer(_JOB, reply)
    assert _KEY not in str(caught.value) and "[REDACTED]" in str(caught.value)


def test_a_stream_cut_before_its_finish_reason_and_done_is_unusable() -> None:
    """A stream that stops with neither a finish reason nor ``[DONE]`` (a connection a gateway
    closed mid-answer) is cut short, as ``finish_reason: length`` is; one that ends with either
    is whole."""
    cut = _Raw(_frames(_content(_BRIEFING[:40]), _content(_BRIEFING[40:])))
    with pytest.raises(ValueError, match="cut"):
        read_fast_answer(_JOB, cut)
    done = _Raw(_frames(_content(_BRIEFING)) + "data: [DONE]\n\n")
    assert read_fast_answer(_JOB, done) == (200, _BRIEFING)
    stop = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    finished = _Raw(_frames(_content(_BRIEFING), stop))
    assert read_fast_answer(_JOB, finished) == (200, _BRIEFING)


def test_an_answer_nested_past_the_decoders_depth_is_a_value_error() -> None:
    """A body (or a streamed chunk) nested deeper than Python's recursion allows is no chat
    completion: the ValueError the summary call and the extraction handle, not a
    RecursionError escaping them."""
    deep = '{"choices": ' + "[" * 5000 + "]" * 5000 + "}"
    for text in (deep, f"data: {deep}\n\ndata: [DONE]\n\n"):
        with pytest.raises(ValueError, match="nests too deep"):
            read_fast_answer(_JOB, _Raw(text))
