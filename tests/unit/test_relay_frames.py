"""The relay against the frames providers actually send: an explicit ``"index": null``,
parallel calls sent every id first, ``\\r``-ended lines, comments and fields between events,
``data:`` without its space, events split at any byte, and n>1 choices."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from hypothesis import given, settings, strategies as st

from proxy import sse
from proxy.chunks import StreamAccumulator
from proxy.services.relay import ClientStream, RoundOutcome, relay_round
from tests.unit.test_relay import chunks, frame, relay


def _client_view(got: list[bytes], index: int = 0) -> dict[str, Any]:
    """The message a client builds from what it got (a piece may hold several events)."""
    acc = StreamAccumulator()
    for chunk in chunks(sse.EventSplitter().feed(b"".join(got))):
        acc.add(chunk)
    return acc.message(index)


def _call(index: int, **fields: Any) -> bytes:
    return frame({"tool_calls": [{"index": index, **fields}]})


def _name(index: int, name: str) -> bytes:
    return _call(index, function={"name": name, "arguments": ""})


def _args(index: int, args: str) -> bytes:
    return _call(index, function={"arguments": args})


# "index": null is the same as a missing index: the choice's (or the call's) place


async def test_a_choice_with_an_explicit_null_index_is_the_choice_at_its_place() -> None:
    # The id fragment of an internal call, in a choice whose index is null: held under the
    # same choice as the name after it, so it goes with the call, not to the client.
    opening = frame({"role": "assistant", "content": None})
    head = {"id": "c-1", "created": 1, "model": "m"}
    choice = {"index": None, "delta": {"tool_calls": [{"index": 0, "id": "int_1"}]}}
    id_first = sse.encode_event({**head, "choices": [choice]})
    pieces = [opening, id_first, _name(0, "read_tool_output"), _args(0, "{}")]
    client = ClientStream()
    got, out = await relay([*pieces, frame({}, "tool_calls"), sse.DONE], client, intercept=True)
    # Nothing goes out: the bare role frame waits for the next round's first frame.
    assert out.only_internal and got == [] and client.bare == [opening]


async def test_a_bare_role_frame_waits_for_the_first_frame_that_says_more() -> None:
    # With read_tool_output offered, a stream sends nothing until a frame says more than the
    # role, so a round that calls only the proxy's tool leaves the status uncommitted.
    opening = frame({"role": "assistant", "content": ""})
    text = frame({"content": "hi"})
    client = ClientStream()
    got, _ = await relay([opening, text, frame({}, "stop"), sse.DONE], client, intercept=True)
    assert got[0] == opening + text and client.opened and client.bare == []
    got, _ = await relay([opening], ClientStream())  # nothing offered: nothing waits
    assert got == [opening]


async def test_a_later_rounds_role_under_a_null_index_is_not_sent_again() -> None:
    client = ClientStream()
    await relay([frame({"role": "assistant", "content": "a"})], client)
    head = {"id": "c-2", "created": 2, "model": "m"}
    choice = {"index": None, "delta": {"role": "assistant", "content": "b"}}
    got, _ = await relay([sse.encode_event({**head, "choices": [choice]})], client)
    [chunk] = chunks(got)
    assert chunk["choices"][0]["delta"] == {"content": "b"}


# parallel calls sent every id first, then the names, then the arguments


def _interleaved(names: tuple[str, str]) -> list[bytes]:
    return [
        frame({"role": "assistant", "content": None}),
        _call(0, id="call_0", type="function"),
        _call(1, id="call_1", type="function"),
        _name(0, names[0]),
        _name(1, names[1]),
        _args(0, '{"a": 0}'),
        _args(1, '{"a": 1}'),
        frame({}, "tool_calls"),
        sse.DONE,
    ]


async def test_an_internal_call_among_calls_sent_id_first_leaks_nothing() -> None:
    got, out = await relay(
        _interleaved(("read_tool_output", "run_tests")), ClientStream(), intercept=True
    )
    assert not out.only_internal
    sent = [
        c
        for chunk in chunks(got)
        for ch in chunk["choices"]
        for c in ch["delta"].get("tool_calls") or []
    ]
    assert all(c["index"] == 0 for c in sent) and b"call_0" not in b"".join(got)
    assert _client_view(got)["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "run_tests", "arguments": '{"a": 1}'},
        }
    ]


async def test_a_client_call_before_an_internal_one_sent_id_first_reaches_the_client() -> None:
    got, _ = await relay(
        _interleaved(("run_tests", "read_tool_output")), ClientStream(), intercept=True
    )
    assert b"call_1" not in b"".join(got)
    assert _client_view(got)["tool_calls"] == [
        {
            "id": "call_0",
            "type": "function",
            "function": {"name": "run_tests", "arguments": '{"a": 0}'},
        }
    ]


async def test_a_held_call_goes_out_as_one_fragment_with_its_function() -> None:
    # An id alone (no "function") is a fragment the openai SDK's stream helper fails on.
    pieces = [_call(0, id="call_0", type="function"), _name(0, "run_tests"), _args(0, "{}")]
    got, _ = await relay(pieces, ClientStream(), intercept=True)
    sent = [c for chunk in chunks(got) for c in chunk["choices"][0]["delta"]["tool_calls"]]
    assert sent == [
        {
            "index": 0,
            "id": "call_0",
            "type": "function",
            "function": {"name": "run_tests", "arguments": ""},
        },
        {"index": 0, "function": {"arguments": "{}"}},
    ]


async def test_calls_sent_id_first_without_read_tool_output_go_out_as_they_came() -> None:
    pieces = _interleaved(("run_tests", "lint"))
    got, _ = await relay(pieces, ClientStream(), intercept=True)
    assert [c["function"]["name"] for c in _client_view(got)["tool_calls"]] == ["run_tests", "lint"]
    got, _ = await relay(pieces, ClientStream(), intercept=False)
    assert got == pieces


# an event goes out when its blank line arrives, whatever ends its lines


class _Gated:
    """A body whose pieces come one at a time, each when the test lets it."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces
        self.gate = asyncio.Semaphore(1)

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            await self.gate.acquire()
            yield piece

    async def aclose(self) -> None:
        pass


def _cr(event: bytes, ending: bytes = b"\r") -> bytes:
    return event.replace(b"\n", ending)


async def test_a_cr_ended_event_goes_out_before_the_next_one_arrives() -> None:
    events = [frame({"role": "assistant", "content": "a"}), frame({}, "stop"), sse.DONE]
    body = _Gated([_cr(e) for e in events])
    out = RoundOutcome()
    stream = relay_round(body, out, strip_usage=False, intercept=False, keepalive=5)  # type: ignore[arg-type]
    got = []
    for event in events:
        got.append(await asyncio.wait_for(anext(stream), 1))
        assert sse.parse_chunk(got[-1]) == sse.parse_chunk(event)
        body.gate.release()
    assert [p async for p in stream] == []
    assert got == [_cr(e) for e in events] and out.error is None and out.saw_done


async def test_a_crlf_read_cut_between_its_cr_and_lf_loses_no_byte() -> None:
    events = [_cr(frame({"content": "a"}), b"\r\n"), _cr(frame({}, "stop"), b"\r\n")]
    whole = b"".join([*events, _cr(sse.DONE, b"\r\n")])
    for cut in range(1, len(whole)):
        got, out = await relay([whole[:cut], whole[cut:]], ClientStream(), intercept=True)
        assert b"".join(got) == whole and out.error is None, cut
        assert out.acc.message() == {"role": "assistant", "content": "a"}


# any framing SSE allows, cut at any byte: the same answer, the same bytes


_EOLS = (b"\n", b"\r\n", b"\r")


def _render(chunk: bytes, extras: list[int], eols: list[int], spaced: bool) -> bytes:
    """One event: optional comment and ``retry:`` lines, then its data line, each line and
    the blank one ended as ``eols`` pick (a ``\\n`` never right after a ``\\r``: that would
    be one ``\\r\\n``)."""
    lines = [b": ping", b"retry: 1500", b"id: 7"][: extras[0]]
    lines.append((b"data: " if spaced else b"data:") + chunk)
    out, last = b"", b""
    for line, pick in zip([*lines, b""], eols, strict=False):
        eol = _EOLS[pick]
        if last == b"\r" and eol == b"\n":
            eol = b"\r"
        out += line + eol
        last = eol
    return out


_CHUNKS = [
    b'{"id":"c","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}',
    b'{"id":"c","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"a\\nb"}}]}',
    b'{"id":"c","created":1,"model":"m","choices":[{"index":null,"delta":{"content":" c"}}]}',
    b'{"id":"c","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
]

_event = st.tuples(
    st.lists(st.integers(0, 3), min_size=1, max_size=1),
    st.lists(st.sampled_from(range(3)), min_size=5, max_size=5),
    st.booleans(),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(_event, min_size=5, max_size=5),
    st.sampled_from([b"\n\n", b"\r\r", b"\r\n\r\n", b"\n", b""]),
    st.lists(st.integers(1, 2000), max_size=6),
    st.booleans(),
)
def test_any_framing_cut_anywhere_is_relayed_as_it_came(
    events: list[Any], done_end: bytes, cuts: list[int], intercept: bool
) -> None:
    body = [_render(c, *e) for c, e in zip([*_CHUNKS, b"[DONE]"], events, strict=False)]
    stream = b"".join(body[:-1]) + body[-1].split(b"[DONE]")[0] + b"[DONE]" + done_end
    marks = sorted({c % len(stream) for c in cuts} - {0})
    pieces = [stream[a:b] for a, b in zip([0, *marks], [*marks, len(stream)], strict=False)]
    got, out = asyncio.run(relay(pieces, ClientStream(), intercept=intercept))
    closed = done_end in (b"\n\n", b"\r\r", b"\r\n\r\n")  # else it goes out closed
    assert b"".join(got) == (stream if closed else stream.rstrip(b"\r\n") + b"\n\n")
    assert out.error is None and out.saw_done
    assert out.acc.message() == {"role": "assistant", "content": "a\nb c"}
    assert _client_view(got) == out.acc.message()


async def test_every_cut_of_a_stream_of_every_framing_relays_it_as_it_came() -> None:
    picks = [([1], [2, 2, 2], False), ([2], [1, 0, 2, 1], True), ([3], [2, 1, 0, 2, 0], False)]
    picks += [([0], [0, 2], True), ([1], [0, 1, 2], False)]
    body = [_render(c, *e) for c, e in zip([*_CHUNKS, b"[DONE]"], picks, strict=True)]
    stream = b"".join(body)
    for cut in range(1, len(stream)):
        got, out = await relay([stream[:cut], stream[cut:]], ClientStream(), intercept=True)
        assert b"".join(got) == stream and out.saw_done and out.error is None, cut
        assert _client_view(got) == out.acc.message() == {"role": "assistant", "content": "a\nb c"}


async def test_every_cut_of_an_id_first_internal_call_leaves_the_client_the_same() -> None:
    pieces = _interleaved(("read_tool_output", "run_tests"))
    stream = b"".join(_cr(p, b"\r\n") for p in pieces)
    client_call = {"id": "call_1", "type": "function"}
    client_call["function"] = {"name": "run_tests", "arguments": '{"a": 1}'}
    for cut in range(1, len(stream)):
        got, out = await relay([stream[:cut], stream[cut:]], ClientStream(), intercept=True)
        assert out.error is None and b"call_0" not in b"".join(got), cut
        assert _client_view(got)["tool_calls"] == [client_call], cut


# an event the relay rewrites keeps its other lines


async def test_a_rewritten_event_keeps_its_id_retry_and_comment_lines() -> None:
    # Only the data changes: a client's Last-Event-ID and reconnection time stay the provider's.
    head = {"id": "c-1", "created": 1, "model": "m"}
    call = {"index": 0, "id": "int_1", "type": "function"}
    call["function"] = {"name": "read_tool_output", "arguments": "{}"}
    choice = {"index": 0, "delta": {"content": "a", "tool_calls": [call]}}
    data = json.dumps({**head, "choices": [choice]}).encode()
    event = b": ping\r\nid: 7\r\nretry: 1500\r\ndata: " + data + b"\r\n\r\n"
    got, _ = await relay([event, frame({}, "stop"), sse.DONE], ClientStream(), intercept=True)
    first = got[0]
    assert first.startswith(b": ping\nid: 7\nretry: 1500\ndata: ")
    assert b"int_1" not in first
    assert sse.parse_chunk(first)["choices"][0]["delta"] == {"content": "a"}  # type: ignore[index]


async def test_a_later_rounds_event_keeps_its_fields_under_the_first_rounds_identity() -> None:
    client = ClientStream()
    await relay([frame({"role": "assistant", "content": "a"})], client)
    later = frame({"content": "b"}, head={"id": "c-2", "created": 2, "model": "m"})
    got, _ = await relay([b"event: message\nid: 9\n" + later], client)
    assert got[0].startswith(b"event: message\nid: 9\ndata: ")
    assert sse.parse_chunk(got[0])["id"] == "c-1"  # type: ignore[index]


# n > 1: each choice numbers its calls from 0


async def test_an_internal_call_in_one_choice_hides_no_call_of_another() -> None:
    # The proxy offers read_tool_output only to a request for one choice (carries_tools), but
    # the relay still keys calls by choice: choice 0's internal call hides not choice 1's.
    def call(cid: str, name: str) -> dict[str, Any]:
        fn = {"name": name, "arguments": "{}"}
        return {"index": 0, "id": cid, "type": "function", "function": fn}

    opening = {"id": "c", "created": 1, "model": "m"}
    opening["choices"] = [
        {
            "index": 0,
            "delta": {"role": "assistant", "tool_calls": [call("int_1", "read_tool_output")]},
        },
        {"index": 1, "delta": {"role": "assistant", "tool_calls": [call("call_w", "run_tests")]}},
    ]
    ends = [{"index": i, "delta": {}, "finish_reason": "tool_calls"} for i in (0, 1)]
    pieces = [sse.encode_event(opening), sse.encode_event({**opening, "choices": ends}), sse.DONE]
    got, out = await relay(pieces, ClientStream(), intercept=True)
    assert not out.only_internal and b"int_1" not in b"".join(got)
    assert _client_view(got, 0).get("tool_calls") is None
    assert _client_view(got, 1)["tool_calls"] == [
        {"id": "call_w", "type": "function", "function": {"name": "run_tests", "arguments": "{}"}}
    ]
    finishes = [(c["index"], c.get("finish_reason")) for ch in chunks(got) for c in ch["choices"]]
    assert [f for f in finishes if f[1]] == [(0, "tool_calls"), (1, "tool_calls")]
