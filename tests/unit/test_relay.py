"""One client stream across upstream rounds: what ``relay_round`` rewrites and what it leaves."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from proxy import answers, sse
from proxy.chunks import StreamAccumulator
from proxy.services.internal_rounds import closing_frames
from proxy.services.relay import ClientStream, RoundOutcome, relay_round


class _Body:
    """Stands for a StreamAnswer: its body arrives as the given pieces."""

    def __init__(self, pieces: Sequence[bytes]) -> None:
        self.pieces = pieces

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece

    async def aclose(self) -> None:
        pass


def frame(
    delta: dict[str, Any],
    finish: str | None = None,
    *,
    index: int = 0,
    head: dict[str, Any] | None = None,
) -> bytes:
    head = head or {"id": "c-1", "created": 1, "model": "m", "system_fingerprint": "fp_1"}
    choice = {"index": index, "delta": delta, "finish_reason": finish}
    # Spaced JSON, unlike the relay's own encoding: a re-encoded frame would show.
    data = json.dumps({**head, "choices": [choice]}, separators=(" ,", ":  "))
    return f"data: {data}\n\n".encode()


def read_call(cid: str) -> dict[str, Any]:
    return {
        "tool_calls": [
            {
                "index": 0,
                "id": cid,
                "type": "function",
                "function": {"name": "read_tool_output", "arguments": "{}"},
            }
        ]
    }


async def relay(
    pieces: Sequence[bytes],
    client: ClientStream,
    *,
    intercept: bool = False,
    max_event: int | None = None,
) -> tuple[list[bytes], RoundOutcome]:
    out = RoundOutcome()
    got = [
        p
        async for p in relay_round(
            _Body(pieces),  # type: ignore[arg-type]
            out,
            strip_usage=False,
            intercept=intercept,
            keepalive=5,
            client=client,
            max_event=max_event,
        )
    ]
    return got, out


def chunks(pieces: Sequence[bytes]) -> list[dict[str, Any]]:
    """The chunks a client reads from ``pieces`` (one may hold several events)."""
    events = sse.EventSplitter().feed(b"".join(pieces))
    return [c for e in events if (c := sse.parse_chunk(e)) is not None]


async def test_a_later_round_takes_the_first_rounds_identity_and_drops_its_role() -> None:
    client = ClientStream()
    first = [
        frame({"role": "assistant", "content": ""}),
        frame({"content": "a"}),
        frame({}, "stop"),
        sse.DONE,
    ]
    got, _ = await relay(first, client)
    assert got == first  # byte for byte

    other = {"id": "c-2", "created": 2, "model": "m2", "system_fingerprint": "fp_2"}
    second = [
        frame({"role": "assistant", "content": ""}, head=other),
        frame({"role": "assistant"}, head=other),  # nothing but a role: dropped
        frame({"content": "b"}, head=other),
        frame({}, "stop", head=other),
        sse.DONE,
    ]
    got, out = await relay(second, client)
    assert [c["choices"][0]["delta"] for c in chunks(got)] == [
        {"content": ""},
        {"content": "b"},
        {},
    ]
    assert {(c["id"], c["created"], c["model"], c["system_fingerprint"]) for c in chunks(got)} == {
        ("c-1", 1, "m", "fp_1")
    }
    assert got[-1] == sse.DONE
    assert out.acc.message() == {"role": "assistant", "content": "b"}  # what is stored


async def test_a_provider_that_repeats_the_role_sends_it_once_per_choice() -> None:
    pieces = [
        frame({"role": "assistant", "content": "a"}),
        frame({"role": "assistant", "content": "b"}, index=1),
        frame({"role": "assistant", "content": "c"}),
        frame({"role": "assistant", "content": "d"}, index=1),
        sse.DONE,
    ]
    got, _ = await relay(pieces, ClientStream())
    assert got[:2] == pieces[:2] and got[-1] == sse.DONE
    assert [c["choices"][0]["delta"] for c in chunks(got[2:])] == [
        {"content": "c"},
        {"content": "d"},
    ]


async def test_the_text_beside_an_internal_rounds_finish_still_reaches_the_client() -> None:
    # One frame says it all: role, text, a read_tool_output call and the finish reason.
    whole = frame({"role": "assistant", "content": "looking", **read_call("int_1")}, "tool_calls")
    got, out = await relay([whole, sse.DONE], ClientStream(), intercept=True)
    assert out.only_internal
    [chunk] = chunks(got)
    assert chunk["choices"] == [
        {"index": 0, "delta": {"role": "assistant", "content": "looking"}, "finish_reason": None}
    ]
    assert sse.DONE not in got


def test_closing_frames_finish_every_choice_under_the_streams_identity() -> None:
    client = ClientStream(head={"id": "c-1", "created": 1, "model": "m"})
    acc = StreamAccumulator()
    acc.add(
        {
            "id": "c-3",
            "choices": [{"index": 0, "delta": {}}, {"index": 1, "delta": {}}],
            "created": 3,
            "model": "m3",
        }
    )
    acc.add({"id": "c-3", "choices": [], "usage": {"prompt_tokens": 5}})
    finish, usage, done = closing_frames(client, acc, include_usage=True)
    first = sse.parse_chunk(finish)
    assert first is not None and first["id"] == "c-1" and first["created"] == 1
    assert [(c["index"], c["finish_reason"]) for c in first["choices"]] == [
        (0, "stop"),
        (1, "stop"),
    ]
    assert sse.parse_chunk(usage) == {
        "object": "chat.completion.chunk",
        "id": "c-1",
        "created": 1,
        "model": "m",
        "choices": [],
        "usage": {"prompt_tokens": 5},
    }
    assert done == sse.DONE


ENDINGS = {
    "done": ([frame({"content": "a"}), sse.DONE], True),
    "finish": ([frame({"content": "a"}), frame({}, "stop")], True),
    "neither": ([frame({"content": "a"})], False),
    "one-choice-of-two-finished": (
        [frame({"content": "a"}), frame({"content": "b"}, index=1), frame({}, "stop")],
        False,
    ),
    "only-comments": ([b": keep-alive\n\n"], False),
    "no-chat-stream": ([b'{"object": "chat.completion"}'], True),  # relayed as it came
    "provider-error-frame": ([b'data: {"error": {"message": "overloaded"}}\n\n'], True),
}


@pytest.mark.parametrize("intercept", [False, True], ids=["plain", "intercept"])
@pytest.mark.parametrize("name", list(ENDINGS))
async def test_a_round_that_ends_without_done_or_every_finish_reason_is_an_error(
    name: str, intercept: bool
) -> None:
    pieces, complete = ENDINGS[name]
    got, out = await relay(pieces, ClientStream(), intercept=intercept)
    assert out.complete is complete
    assert (out.error is None) is complete
    if complete:
        assert got == pieces  # as it came
    else:
        assert "ended before" in (out.error or "")


async def test_an_unfinished_tail_is_not_relayed_before_the_error_frame() -> None:
    # An event cut off without its blank line would run into the error frame after it.
    got, out = await relay([frame({"content": "a"}), b'data: {"choi'], ClientStream())
    assert out.error is not None and got == [frame({"content": "a"})]


async def test_a_whole_last_event_without_its_blank_line_is_read_and_goes_out_closed() -> None:
    # The provider closed right after the line: the event is whole, only its blank line is not.
    last = frame({}, "stop").rstrip(b"\n") + b"\n"
    got, out = await relay([frame({"content": "a"}), last], ClientStream())
    assert out.error is None and got == [frame({"content": "a"}), frame({}, "stop")]
    assert out.acc.finish_reason(0) == "stop"


@pytest.mark.parametrize(
    "big",
    [b"data: " + b"x" * 400, b"data: " + b"x" * 400 + b"\n\n"],
    ids=["open", "ended"],
)
async def test_an_event_over_the_cap_ends_the_round_before_it_unless_done_came(
    big: bytes,
) -> None:
    first = frame({"content": "a"})
    for pieces in ([first + big[:200], big[200:], frame({}, "stop")], [first + big]):
        got, out = await relay(pieces, ClientStream(), max_event=300)
        assert got == [first] and "cap of 300 bytes" in (out.error or "")
    # after [DONE] the answer is whole: the round ends there, with no error
    got, out = await relay(
        [first, frame({}, "stop"), sse.DONE + big], ClientStream(), max_event=300
    )
    assert out.error is None and out.acc.message()["content"] == "a"


async def test_the_cap_is_read_at_each_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """A round with no ``max_event`` of its own takes the module's cap as it is then, which
    the answer-cap tests lower."""
    monkeypatch.setattr(answers, "MAX_ANSWER_BYTES", 300)
    got, out = await relay([frame({"content": "a"}) + b"data: " + b"x" * 400], ClientStream())
    assert got == [frame({"content": "a"})] and "cap of 300 bytes" in (out.error or "")


@pytest.mark.parametrize("event", [b"data: ping\n\n", b"event: ping\ndata: ping\n\n"])
async def test_data_that_is_no_json_object_ends_the_round_named_or_not(event: bytes) -> None:
    # The openai SDK parses every event's data as JSON, a named one's too (JSONDecodeError).
    got, out = await relay([frame({"content": "a"}), event, frame({}, "stop")], ClientStream())
    assert "no chat stream" in (out.error or "") and got == [frame({"content": "a"})]


@pytest.mark.parametrize(
    "event", [b"event: ping\n\n", b"event: ping\ndata:\n\n", b"data:\n\n", b"id: 7\n\n"]
)
async def test_an_event_with_no_data_is_dropped_and_the_stream_goes_on(event: bytes) -> None:
    # The openai SDK reads each as an event whose data, "", it parses as JSON, and raises;
    # it carries nothing (a heartbeat), so the answer goes on without it.
    got, out = await relay([frame({"content": "a"}), event, frame({}, "stop")], ClientStream())
    assert out.error is None and got == [frame({"content": "a"}), frame({}, "stop")]


@pytest.mark.parametrize("intercept", [False, True])
@pytest.mark.parametrize(
    "pieces",
    [[sse.DONE], [b": hi\n\n", sse.DONE], [b'data: {"id": "c-1", "choices": []}\n\n', sse.DONE]],
    ids=["done", "comment-done", "no-choice-done"],
)
async def test_done_before_any_chat_chunk_is_no_answer(
    pieces: list[bytes], intercept: bool
) -> None:
    # The SDKs read it as an empty, successful answer; the provider gave none: the client
    # gets the error frame (and nothing is stored), as for a stream of nothing but comments.
    got, out = await relay(pieces, ClientStream(), intercept=intercept)
    assert "no chat stream" in (out.error or "") and sse.DONE not in got


async def test_a_named_event_with_a_json_object_is_relayed() -> None:
    named = b'event: ping\ndata: {"ping": 1}\n\n'
    got, out = await relay([frame({"content": "a"}), named, frame({}, "stop")], ClientStream())
    assert out.error is None and got == [frame({"content": "a"}), named, frame({}, "stop")]


async def test_an_error_object_instead_of_a_stream_is_an_error_frame_unless_after_done() -> None:
    failure = b'{"error": {"message": "overloaded", "type": "server_error"}}'
    got, out = await relay([failure], ClientStream())
    assert got == [b"data: " + failure + b"\n\n", b"data: [DONE]\n\n"]
    assert out.provider_error == "type 'server_error'" and out.error is None
    answer = [frame({"content": "a"}, "stop"), b"data: [DONE]\n\n"]
    got, out = await relay([*answer, failure], ClientStream())
    assert got == [*answer, failure] and out.provider_error is None


class _Stalling(_Body):
    """A body that stops after its first ``after`` pieces until ``go`` is set, then sends
    the rest."""

    def __init__(self, pieces: Sequence[bytes], after: int = 1) -> None:
        super().__init__(pieces)
        self.go, self.after = asyncio.Event(), after

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        for piece in self.pieces[: self.after]:
            yield piece
        await self.go.wait()
        for piece in self.pieces[self.after :]:
            yield piece


async def test_a_silent_provider_gets_keepalive_comments_and_the_stream_goes_on() -> None:
    pieces = [frame({"content": "a"}), frame({}, "stop"), sse.DONE]
    body = _Stalling(pieces)
    got: list[bytes] = []
    async for p in relay_round(
        body,  # type: ignore[arg-type]
        RoundOutcome(),
        strip_usage=False,
        intercept=False,
        keepalive=0.01,
    ):
        got.append(p)
        if pieces[0] in got and got[got.index(pieces[0]) :].count(sse.KEEPALIVE) == 2:
            body.go.set()
    # the silence after the first piece is filled (a loaded machine may fill one before it)
    assert got[got.index(pieces[0]) + 1 :][:2] == [sse.KEEPALIVE] * 2
    assert [p for p in got if p != sse.KEEPALIVE] == pieces


async def test_the_events_of_one_read_go_out_as_one_piece() -> None:
    events = [frame({"role": "assistant", "content": ""}), frame({"content": "a"})]
    ending = [frame({}, "stop"), sse.DONE]
    got, _ = await relay([b"".join(events), b"".join(ending)], ClientStream())
    assert got == [b"".join(events), b"".join(ending)]  # one write each, bytes untouched


@pytest.mark.parametrize("intercept", [False, True], ids=["plain", "offered"])
async def test_what_follows_done_goes_out_as_it_came_but_is_not_read(intercept: bool) -> None:
    answer = [frame({"role": "assistant", "content": "a"}), frame({}, "stop"), sse.DONE]
    after = frame({"content": " more"}, "length")
    got, out = await relay([*answer, after], ClientStream(), intercept=intercept)
    assert b"".join(got) == b"".join([*answer, after])
    assert out.acc.message()["content"] == "a" and out.acc.finish_reason(0) == "stop"


async def test_what_follows_an_internal_rounds_done_does_not_reach_the_client() -> None:
    # The round's ending is held back and the stream goes on: text sent after its [DONE]
    # would join the answer the next round continues.
    whole = frame({"role": "assistant", "content": "looking", **read_call("int_1")}, "tool_calls")
    got, out = await relay(
        [whole, sse.DONE, frame({"content": " more"})], ClientStream(), intercept=True
    )
    assert out.only_internal
    assert [c["choices"][0]["delta"].get("content") for c in chunks(got)] == ["looking"]


async def test_a_one_round_stream_keeps_its_first_chunks_created_and_one_role() -> None:
    # Ollama stamps each chunk with the second it was made and repeats the role in each.
    def stamped(content: str, created: int, finish: str | None = None) -> bytes:
        head = {"id": "c-1", "created": created, "model": "m"}
        return frame({"role": "assistant", "content": content}, finish, head=head)

    pieces = [stamped("a", 100), stamped("b", 101), stamped("", 101, "stop"), sse.DONE]
    got, _ = await relay(pieces, ClientStream())
    assert got[0] == pieces[0]
    assert [(c["created"], c["choices"][0]["delta"]) for c in chunks(got)] == [
        (100, {"role": "assistant", "content": "a"}),
        (100, {"content": "b"}),
        (100, {"content": ""}),
    ]


async def test_azures_prompt_filter_chunk_lends_the_stream_no_identity() -> None:
    # Azure OpenAI opens a stream with a chunk of no choices and an empty id, model and
    # created; the chunks after it carry the completion's own, and go out as they came.
    prefilter = {"choices": [], "created": 0, "id": "", "model": "", "object": ""}
    results = [{"prompt_index": 0, "content_filter_results": {}}]
    opening = sse.encode_event({**prefilter, "prompt_filter_results": results})
    answer = [frame({"role": "assistant", "content": "a"}), frame({}, "stop"), sse.DONE]
    got, _ = await relay([opening, *answer], ClientStream())
    assert b"".join(got) == b"".join([opening, *answer])


async def test_calls_without_an_index_are_told_apart_by_their_place() -> None:
    # Some providers send parallel calls whole, in one delta, with no index: the stored reply
    # (StreamAccumulator) numbers them by place, and so must the relay, or the client's own
    # call, taken for the read_tool_output before it, never reaches the client.
    calls = [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}}
        for cid, name in (("int_1", "read_tool_output"), ("call_c", "run_tests"))
    ]
    whole = frame({"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls")
    got, out = await relay([whole, sse.DONE], ClientStream(), intercept=True)
    assert not out.only_internal
    [chunk] = chunks(got)
    assert chunk["choices"][0]["delta"]["tool_calls"] == [{**calls[1], "index": 0}]


_CALL = {"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
MALFORMED = {
    "tool-calls-string": {"tool_calls": "x"},
    "call-not-object": {"tool_calls": [1]},
    "function-not-object": {"tool_calls": [{**_CALL, "function": "f"}]},
    "name-not-string": {"tool_calls": [{**_CALL, "function": {"name": ["f"]}}]},
    "arguments-not-string": {"tool_calls": [{**_CALL, "function": {"arguments": {"a": 1}}}]},
    "index-not-int": {"tool_calls": [{**_CALL, "index": "0"}]},
}


@pytest.mark.parametrize("intercept", [False, True], ids=["plain", "offered"])
@pytest.mark.parametrize("delta", list(MALFORMED.values()), ids=list(MALFORMED))
async def test_a_malformed_tool_call_ends_the_round_before_it_as_an_error(
    delta: dict[str, Any], intercept: bool
) -> None:
    opening = frame({"role": "assistant", "content": "a"})
    rest = [frame(delta), frame({"content": "b"}), frame({}, "tool_calls"), sse.DONE]
    got, out = await relay([opening, b"".join(rest)], ClientStream(), intercept=intercept)
    assert got == [opening] and "malformed" in (out.error or "")
    assert out.acc.message() == {"role": "assistant", "content": "a"}


@pytest.mark.parametrize(
    "event",
    [b'data: {"choices": ["x"]}\n\n', b'data: {"choices": "x"}\n\n'],
    ids=["choice-not-object", "choices-not-list"],
)
async def test_malformed_choices_end_the_round_as_an_error(event: bytes) -> None:
    got, out = await relay([event, sse.DONE], ClientStream(), intercept=True)
    assert got == [] and "malformed" in (out.error or "")


@pytest.mark.parametrize("intercept", [False, True], ids=["plain", "offered"])
async def test_null_and_missing_tool_call_fields_are_relayed_as_they_came(intercept: bool) -> None:
    bare = {"id": "c1", "function": {"name": "f", "arguments": None}}
    pieces = [
        frame({"role": "assistant", "content": None, "tool_calls": None}),
        frame({"tool_calls": []}),
        frame({"tool_calls": [bare]}),
        frame({"tool_calls": [{"index": 0, "function": {"name": None, "arguments": "{}"}}]}),
        frame({}, "tool_calls"),
        sse.DONE,
    ]
    got, out = await relay(pieces, ClientStream(), intercept=intercept)
    assert b"".join(got) == b"".join(pieces) and out.error is None  # the role frame may wait
    assert out.acc.message()["tool_calls"][0]["function"] == {"name": "f", "arguments": "{}"}


def _id_first(index: int, cid: str, name: str, args: str = "{}") -> list[bytes]:
    """A call as some providers send it: its id and type, then its name, then arguments."""
    return [
        frame({"tool_calls": [{"index": index, "id": cid, "type": "function"}]}),
        frame({"tool_calls": [{"index": index, "function": {"name": name, "arguments": ""}}]}),
        frame({"tool_calls": [{"index": index, "function": {"arguments": args}}]}),
    ]


def _client_view(got: Sequence[bytes]) -> dict[str, Any]:
    acc = StreamAccumulator()
    for chunk in chunks(got):
        acc.add(chunk)
    return acc.message()


async def test_an_internal_call_whose_id_comes_before_its_name_never_reaches_the_client() -> None:
    opening = frame({"role": "assistant", "content": None})
    pieces = [opening, *_id_first(0, "int_1", "read_tool_output"), frame({}, "tool_calls")]
    client = ClientStream()
    got, out = await relay([*pieces, sse.DONE], client, intercept=True)
    assert out.only_internal and got == [] and client.bare == [opening]


async def test_a_client_call_after_an_internal_one_both_id_first_reaches_the_client_whole() -> None:
    pieces = [
        frame({"role": "assistant", "content": None}),
        *_id_first(0, "int_1", "read_tool_output"),
        *_id_first(1, "call_c", "run_tests", '{"a": 1}'),
        frame({}, "tool_calls"),
        sse.DONE,
    ]
    got, out = await relay(pieces, ClientStream(), intercept=True)
    assert not out.only_internal
    calls = [c["choices"][0]["delta"].get("tool_calls") for c in chunks(got)]
    assert all(call["index"] == 0 for fragments in calls if fragments for call in fragments)
    assert _client_view(got)["tool_calls"] == [
        {
            "id": "call_c",
            "type": "function",
            "function": {"name": "run_tests", "arguments": '{"a": 1}'},
        }
    ]


@pytest.mark.parametrize(
    "ending", [[frame({}, "tool_calls"), sse.DONE], [sse.DONE]], ids=["finish", "done"]
)
async def test_a_call_that_never_gets_a_name_goes_out_as_the_clients(ending: list[bytes]) -> None:
    unnamed = frame({"tool_calls": [{"index": 0, "id": "call_x", "type": "function"}]})
    got, out = await relay([unnamed, *ending], ClientStream(), intercept=True)
    assert not out.only_internal and out.error is None
    assert got[-1] == sse.DONE
    assert _client_view(got)["tool_calls"] == [
        {"id": "call_x", "type": "function", "function": {"name": "", "arguments": ""}}
    ]


async def test_a_held_call_goes_out_at_the_finish_before_the_named_call_after_it() -> None:
    # The next call's start does not settle a nameless call (parallel calls may come id
    # first, every id before any name); the finish does, and the calls keep their order.
    unnamed = frame({"tool_calls": [{"index": 0, "id": "call_x", "type": "function"}]})
    pieces = [unnamed, *_id_first(1, "call_y", "run_tests")]
    got, _ = await relay(pieces, ClientStream(), intercept=True)
    assert chunks(got) == []
    got, _ = await relay([*pieces, frame({}, "tool_calls")], ClientStream(), intercept=True)
    assert [c["id"] for c in _client_view(got)["tool_calls"]] == ["call_x", "call_y"]


def _call(index: int, **fields: Any) -> bytes:
    return frame({"tool_calls": [{"index": index, **fields}]})


@pytest.mark.parametrize("internal_at", [0, 1], ids=["internal-first", "client-first"])
async def test_arguments_before_a_name_are_held_until_the_name_says_whose_call(
    internal_at: int,
) -> None:
    # Parallel calls interleaved, each call's first arguments before its name: a fragment
    # of the proxy's own call must never reach the client, whichever of the two it is.
    names = ["run_tests", "run_tests"]
    names[internal_at] = "read_tool_output"
    pieces = [
        frame({"role": "assistant", "content": None}),
        _call(0, id="call_0", type="function", function={"arguments": '{"h'}),
        _call(1, id="call_1", type="function", function={"arguments": '{"a'}),
        _call(1, function={"name": names[1]}),
        _call(0, function={"name": names[0]}),
        _call(0, function={"arguments": '": 1}'}),
        _call(1, function={"arguments": '": 2}'}),
        frame({}, "tool_calls"),
        sse.DONE,
    ]
    got, out = await relay(pieces, ClientStream(), intercept=True)
    assert not out.only_internal and out.error is None
    client_id = f"call_{1 - internal_at}"
    assert f"call_{internal_at}".encode() not in b"".join(got)
    arguments = ['{"h": 1}', '{"a": 2}'][1 - internal_at]
    assert _client_view(got)["tool_calls"] == [
        {
            "id": client_id,
            "type": "function",
            "function": {"name": "run_tests", "arguments": arguments},
        }
    ]
    calls = [c["choices"][0]["delta"].get("tool_calls") for c in chunks(got)]
    assert all(call["index"] == 0 for fragments in calls if fragments for call in fragments)
