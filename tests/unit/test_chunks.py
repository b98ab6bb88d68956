"""``proxy.chunks``: the message a stream's chunks build, and the chunks of a completion."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy import answers
from proxy.chunks import StreamAccumulator, completion_to_chunks
from proxy.services.round_outcome import RoundOutcome
from proxy.sse import DONE, EventSplitter, is_usage_only, parse_chunk
from proxy.stream_whole import stream_completion
from tests.unit.test_sse import chunk, delta

# StreamAccumulator


def test_accumulator_builds_text_message() -> None:
    acc = StreamAccumulator()
    acc.add(chunk(delta(role="assistant", content="")))
    acc.add(chunk(delta(content="Hel")))
    acc.add(chunk(delta(content="lo")))
    acc.add(chunk(delta(finish="stop")))
    assert acc.message() == {"role": "assistant", "content": "Hello"}
    assert acc.finish_reason() == "stop"
    assert (acc.id, acc.model, acc.created) == ("c1", "m", 7)


def test_accumulator_keeps_a_providers_own_fields_merged_as_the_sdk_merges_them() -> None:
    acc = StreamAccumulator()
    acc.add(chunk(delta(role="assistant", content=None, reasoning_content="Think", extra="")))
    acc.add(chunk(delta(reasoning_content="ing.", audio={"id": "a"}, tokens=[1])))
    acc.add(chunk(delta(content="Hi", reasoning_content=None, audio={"transcript": "Hi"})))
    acc.add(chunk(delta(finish="stop")))
    assert acc.message() == {
        "role": "assistant",
        "content": "Hi",
        "reasoning_content": "Thinking.",
        "extra": "",
        "audio": {"id": "a", "transcript": "Hi"},
        "tokens": [1],
    }


def test_accumulator_holds_a_choices_own_fields_to_its_cap() -> None:
    acc = StreamAccumulator(own_cap=40)
    acc.add(chunk(delta(role="assistant", content="Hi", reasoning_content="a" * 20)))
    acc.add(chunk(delta(audio={"data": "b" * 30})))  # past the cap: left out whole
    acc.add(chunk(delta(audio={"data": "c"}, reasoning_content="d")))
    assert acc.message() == {
        "role": "assistant",
        "content": "Hi",
        "reasoning_content": "a" * 20 + "d",
    }


def test_a_rounds_accumulator_holds_own_fields_to_a_whole_answers_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(answers, "MAX_ANSWER_BYTES", 50)
    acc = RoundOutcome().acc
    acc.add(chunk(delta(role="assistant", content="", reasoning_content="a" * 30)))
    acc.add(chunk(delta(reasoning_content="b" * 30)))
    assert acc.message() == {"role": "assistant", "content": ""}


def test_accumulator_builds_tool_calls_by_index() -> None:
    acc = StreamAccumulator()
    acc.add(chunk(delta(role="assistant", content=None)))
    for i, (cid, name) in enumerate([("a", "grep"), ("b", "read")]):
        first = {"index": i, "id": cid, "type": "function", "function": {"name": name}}
        acc.add(chunk(delta(tool_calls=[{**first, "function": {**first["function"]}}])))
    acc.add(chunk(delta(tool_calls=[{"index": 1, "function": {"arguments": '{"p":'}}])))
    acc.add(chunk(delta(tool_calls=[{"index": 0, "function": {"arguments": "{}"}}])))
    acc.add(chunk(delta(tool_calls=[{"index": 1, "function": {"arguments": "1}"}}])))
    acc.add(chunk(delta(finish="tool_calls")))
    assert acc.message() == {
        "role": "assistant",
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "grep", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "read", "arguments": '{"p":1}'}},
        ],
    }
    assert acc.finish_reason() == "tool_calls"


def test_accumulator_joins_the_halves_of_a_character_cut_between_chunks() -> None:
    acc = StreamAccumulator()
    acc.add(chunk(delta(role="assistant", content="a \ud83d")))
    acc.add(chunk(delta(content="\ude00 b \ud83d")))  # the last half has no partner
    call = {"index": 0, "id": "x", "type": "function", "function": {"name": "f"}}
    acc.add(chunk(delta(tool_calls=[{**call, "function": {"name": "f", "arguments": '"\ud83d'}}])))
    acc.add(chunk(delta(tool_calls=[{"index": 0, "function": {"arguments": '\ude00"'}}])))
    acc.add(chunk(delta(reasoning_details=[{"index": 0, "text": "\ud83d"}])))
    acc.add(chunk(delta(reasoning_details=[{"index": 0, "text": "\ude00"}])))
    message = acc.message()
    assert message["content"] == "a \U0001f600 b \ufffd"
    assert message["reasoning_details"] == [{"index": 0, "text": "\U0001f600"}]
    assert message["tool_calls"][0]["function"]["arguments"] == '"\U0001f600"'


def test_a_lone_half_in_a_calls_name_id_or_own_field_is_stored_as_a_replacement() -> None:
    acc = StreamAccumulator()
    call = {"index": 0, "id": "x\ud83d", "type": "function", "extra": {"sig": "s\ud83d"}}
    acc.add(chunk(delta(tool_calls=[{**call, "function": {"name": "f\ud83d"}}])))
    acc.add(chunk(delta(function_call={"name": "g\ud83d", "arguments": "{}"})))
    message = acc.message()
    made = message["tool_calls"][0]
    assert (made["id"], made["function"]["name"], made["extra"]) == (
        "x\ufffd",
        "f\ufffd",
        {"sig": "s\ufffd"},
    )
    assert message["function_call"]["name"] == "g\ufffd"
    json.dumps(message, ensure_ascii=False).encode()  # what the reply's hash writes


def test_accumulator_keeps_a_tool_calls_unknown_fields() -> None:
    # Gemini's OpenAI endpoint wants extra_content (a thought signature) back next turn
    signature = {"google": {"thought_signature": "c2ln"}}
    acc = StreamAccumulator()
    head = {
        "index": 0,
        "id": "a",
        "type": "function",
        "function": {"name": "grep"},
        "extra_content": signature,
    }
    acc.add(chunk(delta(tool_calls=[head])))
    acc.add(chunk(delta(tool_calls=[{"index": 0, "function": {"arguments": "{}"}}])))
    assert acc.message()["tool_calls"] == [
        {
            "id": "a",
            "type": "function",
            "function": {"name": "grep", "arguments": "{}"},
            "extra_content": signature,
        }
    ]


def test_accumulator_tolerates_repeated_tool_name() -> None:
    acc = StreamAccumulator()
    for args in ("{", "}"):
        call = {"index": 0, "id": "a", "function": {"name": "grep", "arguments": args}}
        acc.add(chunk(delta(tool_calls=[call])))
    assert acc.message()["tool_calls"][0]["function"] == {"name": "grep", "arguments": "{}"}


def test_accumulator_refusal_and_multiple_choices() -> None:
    acc = StreamAccumulator()
    acc.add(chunk(delta(0, role="assistant", refusal="No"), delta(1, content="Yes")))
    acc.add(chunk(delta(0, finish="stop"), delta(1, finish="length")))
    assert acc.message(0) == {"role": "assistant", "refusal": "No"}
    assert acc.message(1) == {"role": "assistant", "content": "Yes"}
    assert (acc.finish_reason(0), acc.finish_reason(1), acc.finish_reason(2)) == (
        "stop",
        "length",
        None,
    )


def test_accumulator_empty_reply_keeps_empty_content() -> None:
    acc = StreamAccumulator()
    acc.add(chunk(delta(role="assistant", content="", finish="stop")))
    assert acc.message() == {"role": "assistant", "content": ""}


def test_accumulator_keeps_last_usage() -> None:
    acc = StreamAccumulator()
    acc.add(chunk(delta(content="x"), usage=None))
    acc.add(chunk(usage={"total_tokens": 1}))
    acc.add(chunk(usage={"total_tokens": 2}))
    assert acc.usage == {"total_tokens": 2}


def test_accumulator_ignores_malformed_chunks() -> None:
    acc = StreamAccumulator()
    acc.add({"choices": "x"})
    acc.add({"choices": [1, {"index": 0, "delta": "x"}]})
    assert acc.message() == {"role": "assistant", "content": ""}


def test_to_completion() -> None:
    acc = StreamAccumulator()
    acc.add(chunk(delta(role="assistant", content="hi"), system_fingerprint="fp"))
    acc.add(chunk(delta(finish="stop")))
    acc.add(chunk(usage={"total_tokens": 4}))
    assert acc.to_completion() == {
        "id": "c1",
        "object": "chat.completion",
        "created": 7,
        "model": "m",
        "system_fingerprint": "fp",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "hi"},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {"total_tokens": 4},
    }


def test_to_completion_tool_calls_have_null_content() -> None:
    acc = StreamAccumulator()
    call = {"index": 0, "id": "a", "type": "function", "function": {"name": "f", "arguments": ""}}
    acc.add(chunk(delta(role="assistant", tool_calls=[call])))
    assert acc.to_completion()["choices"][0]["message"]["content"] is None


# completion_to_chunks


def completion(message: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    return {
        "id": "c9",
        "object": "chat.completion",
        "created": 9,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
    }


def replay(frames: list[bytes]) -> StreamAccumulator:
    s = EventSplitter()
    acc = StreamAccumulator()
    for ev in s.feed(b"".join(frames)):
        if (c := parse_chunk(ev)) is not None:
            acc.add(c)
    assert s.flush() == b""
    return acc


def test_completion_to_chunks_frame_sequence() -> None:
    frames = completion_to_chunks(
        completion({"role": "assistant", "content": "hi"}), include_usage=True
    )
    chunks = [parse_chunk(f) for f in frames[:-1]]
    assert frames[-1] == DONE
    assert all(c is not None and c["object"] == "chat.completion.chunk" for c in chunks)
    deltas = [c["choices"][0]["delta"] for c in chunks if c and c["choices"]]
    assert deltas == [{"role": "assistant", "content": ""}, {"content": "hi"}, {}]
    assert chunks[-2] is not None and chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1] is not None and is_usage_only(chunks[-1])
    assert all(c is not None and c["usage"] is None for c in chunks[:-1])


def test_completion_to_chunks_without_usage() -> None:
    frames = completion_to_chunks(
        completion({"role": "assistant", "content": "hi"}), include_usage=False
    )
    chunks = [parse_chunk(f) for f in frames[:-1]]
    assert all(c is not None and "usage" not in c and c["choices"] for c in chunks)


def test_completion_to_chunks_tool_call_frames_carry_index_id_name() -> None:
    msg = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "grep", "arguments": "{}"}}
        ],
    }
    frames = completion_to_chunks(completion(msg, "tool_calls"), include_usage=False)
    calls = [
        c["choices"][0]["delta"]["tool_calls"][0]
        for f in frames
        if (c := parse_chunk(f)) and "tool_calls" in c["choices"][0]["delta"]
    ]
    assert calls == [
        {"index": 0, "id": "a", "type": "function", "function": {"name": "grep", "arguments": ""}},
        {"index": 0, "function": {"arguments": "{}"}},
    ]


@pytest.mark.parametrize(
    "message",
    [
        {"role": "assistant", "content": "hello"},
        {"role": "assistant", "content": None, "refusal": "no"},
        {
            "role": "assistant",
            "content": "thinking",
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"x":1}'}},
                {"id": "b", "type": "function", "function": {"name": "g", "arguments": ""}},
            ],
        },
    ],
)
@pytest.mark.parametrize("include_usage", [True, False])
def test_completion_round_trips_through_accumulator(
    message: dict[str, Any], include_usage: bool
) -> None:
    original = completion(message, "tool_calls" if "tool_calls" in message else "stop")
    rebuilt = replay(completion_to_chunks(original, include_usage=include_usage)).to_completion()
    if not include_usage:
        rebuilt["usage"] = original["usage"]
    assert rebuilt == original


def test_accumulator_keeps_arguments_a_provider_streamed_as_an_object() -> None:
    """A provider may stream a call's arguments as a JSON object, not its text: stored as
    sent, the client's resend of the reply hashes as the stored one and the history extends;
    joined as text pieces alone they were stored as ``""`` and the resend diverged."""
    from proxy.history import chain

    args = {"path": "/tmp", "n": [1, 2.5]}
    acc = StreamAccumulator()
    head = {"index": 0, "id": "a", "type": "function", "function": {"name": "grep"}}
    acc.add(chunk(delta(role="assistant", content=None, tool_calls=[head])))
    acc.add(chunk(delta(tool_calls=[{"index": 0, "function": {"arguments": args}}])))
    acc.add(chunk(delta(function_call={"name": "f", "arguments": {"q": "x"}})))
    acc.add(chunk(delta(finish="tool_calls")))
    msg = acc.message()
    assert msg["tool_calls"][0]["function"] == {"name": "grep", "arguments": args}
    assert msg["function_call"] == {"name": "f", "arguments": {"q": "x"}}
    resent = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{**head, "function": {"name": "grep", "arguments": args}}],
        "function_call": {"name": "f", "arguments": {"q": "x"}},
    }
    assert chain([msg]) == chain([resent])


def test_stream_completion_builds_a_finished_stream_and_nothing_else() -> None:
    head = {"id": "c", "object": "chat.completion.chunk", "model": "m"}

    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return b"data: " + json.dumps({**head, "choices": [choice]}).encode() + b"\n\n"

    body = event({"role": "assistant", "content": "a"}) + event({"content": "b"}, "stop")
    built = stream_completion(b"\n: hello\n\n" + body)  # finished by its finish reason
    assert built is not None and built["choices"][0]["message"]["content"] == "ab"
    assert stream_completion(event({"content": "cut"}) + b"data: [DONE]\n\n") is not None
    assert stream_completion(event({"content": "cut"})) is None  # neither DONE nor a finish
    assert stream_completion(b'data: {"error": {"message": "busy"}}\n\n') == {
        "error": {"message": "busy"}
    }
    assert stream_completion(b"data: not json\n\n" + body) is None
    assert stream_completion(b'{"choices": []}') is None  # JSON, no events


def test_stream_completion_keeps_each_choices_logprobs_and_the_service_tier() -> None:
    """A non-streamed call that asked for ``logprobs`` gets them when its provider streamed
    the answer: each choice's tokens in order, across its chunks, with the stream's
    ``service_tier``, as the provider's own whole answer would carry them."""

    def event(index: int, text: str, finish: str | None = None) -> bytes:
        logprobs = {"content": [{"token": text, "logprob": -0.5}], "refusal": None}
        choice = {"index": index, "delta": {"content": text}, "finish_reason": finish}
        data = {"id": "c", "service_tier": "default", "choices": [{**choice, "logprobs": logprobs}]}
        return b"data: " + json.dumps(data).encode() + b"\n\n"

    body = event(0, "a") + event(1, "x") + event(0, "b", "stop") + event(1, "y", "stop")
    built = stream_completion(body + b"data: [DONE]\n\n")
    assert built is not None and built["service_tier"] == "default"
    tokens = [[t["token"] for t in c["logprobs"]["content"]] for c in built["choices"]]
    assert tokens == [["a", "b"], ["x", "y"]]
    assert built["choices"][0]["logprobs"]["refusal"] is None
    plain = stream_completion(b'data: {"choices": [{"delta": {}, "finish_reason": "stop"}]}\n\n')
    assert plain is not None and plain["choices"][0]["logprobs"] is None
    assert "service_tier" not in plain


def test_stream_completion_reads_a_stream_after_a_byte_order_mark() -> None:
    first = {"choices": [{"index": 0, "delta": {"content": "Hel"}}]}
    last = {"choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]}
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in (first, last))
    built = stream_completion(b"\xef\xbb\xbf" + body)
    assert built is not None and built["choices"][0]["message"]["content"] == "Hello"
