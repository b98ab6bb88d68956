from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from proxy.sse import (
    DONE,
    KEEPALIVE,
    EventSplitter,
    encode_event,
    error_event,
    event_data,
    is_done,
    is_usage_only,
    parse_chunk,
    parse_general,
    usage_of,
)


def chunk(*choices: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 7,
        "model": "m",
        "choices": list(choices),
        **extra,
    }


def delta(index: int = 0, finish: str | None = None, **d: Any) -> dict[str, Any]:
    return {"index": index, "delta": d, "finish_reason": finish}


def joined(events: list[bytes]) -> list[bytes]:
    """``events`` with a lone ``\\n`` put back on the ``\\r``-ended event before it: the one
    place a split of the input shows in the events' bytes."""
    out: list[bytes] = []
    for event in events:
        if event == b"\n" and out and out[-1].endswith(b"\r"):
            out[-1] += event
        else:
            out.append(event)
    return out


def split_all(data: bytes, cuts: list[int]) -> tuple[list[bytes], bytes]:
    s = EventSplitter()
    events: list[bytes] = []
    prev = 0
    for cut in [*sorted(cuts), len(data)]:
        events += s.feed(data[prev:cut])
        prev = cut
    return events, s.flush()


# EventSplitter


def test_splitter_returns_complete_events_with_their_blank_line() -> None:
    s = EventSplitter()
    assert s.feed(b'data: {"a":1}\n\ndata: [DO') == [b'data: {"a":1}\n\n']
    assert s.feed(b"NE]\n\n") == [DONE]
    assert s.flush() == b""


@pytest.mark.parametrize(
    "stream",
    [
        b"data: a\r\n\r\ndata: b\r\n\r\n",
        b"data: a\r\rdata: b\r\r\n",
        b"event: x\ndata: a\ndata: b\n\n: ping\n\n",
        b"data: a\n\r\ndata: b\r\n\n",
    ],
)
def test_splitter_handles_every_line_ending(stream: bytes) -> None:
    events, rest = split_all(stream, [])
    assert len(events) == 2 and rest == b""
    assert b"".join(events) == stream


def test_splitter_releases_an_event_whose_blank_line_ends_in_the_last_cr_read() -> None:
    # "\r" alone ends a line (a CR-only stream): the event is whole, whatever comes next.
    assert split_all(b"data: a\r\r", []) == ([b"data: a\r\r"], b"")
    s = EventSplitter()
    assert s.feed(b"data: a\r\r") == [b"data: a\r\r"]
    assert s.feed(b"data: b\r\r") == [b"data: b\r\r"]
    assert s.feed(b"\ndata: c") == [b"\n"]  # the rest of a "\r\n": no line, no data
    assert s.flush() == b"data: c"


def test_splitter_holds_a_cr_that_ends_a_line_inside_an_event() -> None:
    s = EventSplitter()
    assert s.feed(b"data: a\r") == []
    assert s.feed(b"\n\r\n") == [b"data: a\r\n\r\n"]
    assert s.feed(b"data: b\r") == []
    assert s.feed(b"\r") == [b"data: b\r\r"]


def test_splitter_flush_returns_unterminated_tail_and_resets() -> None:
    s = EventSplitter()
    assert s.feed(b"data: a\n") == []
    assert s.flush() == b"data: a\n"
    assert s.feed(b"data: b\n\n") == [b"data: b\n\n"]


def test_splitter_emits_stray_blank_line_as_own_event() -> None:
    assert split_all(b"\ndata: a\n\n", []) == ([b"\n", b"data: a\n\n"], b"")


_piece = st.sampled_from(
    [b"data: ", b"{}", b"[DONE]", b":", b" ", b"x", b"\n", b"\r", b"\r\n", b"\xc3\xa9", b"e"]
)


@settings(max_examples=100, deadline=None)
@given(st.lists(_piece, max_size=40).map(b"".join), st.lists(st.integers(0, 200), max_size=8))
def test_splitter_is_independent_of_chunk_boundaries(data: bytes, cuts: list[int]) -> None:
    whole, whole_rest = split_all(data, [])
    events, rest = split_all(data, [c for c in cuts if c <= len(data)])
    assert (joined(events), rest) == (whole, whole_rest)
    assert b"".join(events) + rest == data


_lf_piece = st.sampled_from([b"data: ", b"{}", b"[DONE]", b":", b"x", b"\n", b"\n\n", b"\r"])


@settings(max_examples=200, deadline=None)
@given(st.lists(_lf_piece, max_size=30).map(b"".join))
def test_splitter_reads_whole_events_as_it_reads_them_byte_by_byte(data: bytes) -> None:
    # A read of whole events takes a shortcut; one byte at a time never does.
    s = EventSplitter()
    events = s.feed(data)
    rest = s.flush()
    one_by_one, one_rest = split_all(data, list(range(1, len(data))))
    assert (events, rest) == (joined(one_by_one), one_rest)


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=30), st.lists(st.integers(0, 30), max_size=5))
def test_splitter_never_loses_bytes(data: bytes, cuts: list[int]) -> None:
    events, rest = split_all(data, [c for c in cuts if c <= len(data)])
    assert b"".join(events) + rest == data
    assert joined(events) == split_all(data, [])[0]


# frame helpers


def test_event_data_joins_data_lines() -> None:
    assert event_data(b"event: m\ndata: a\ndata:b\r\ndata\n\n") == "a\nb\n"


def test_event_data_none_for_comments() -> None:
    assert event_data(KEEPALIVE) is None
    assert event_data(b"\n") is None


def test_parse_chunk() -> None:
    assert parse_chunk(b'data: {"a": 1}\n\n') == {"a": 1}
    assert parse_chunk(DONE) is None
    assert parse_chunk(KEEPALIVE) is None
    assert parse_chunk(b"data: not json\n\n") is None
    assert parse_chunk(b"data: [1]\n\n") is None
    # nested past orjson's depth limit and Python's recursion limit: no chunk, not a crash
    assert parse_chunk(b'data: {"a":' + b"[" * 5000 + b"]" * 5000 + b"}\n\n") is None


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
_ODD = [  # what orjson refuses and json takes, or neither takes
    b"NaN", b"-Infinity", b'{"a": NaN}', b'{"n": 123456789012345678901234567890}',
    b'{"a": "\xff"}', b'{"s": "\\ud800"}', b"", b" ", b"[DONE]", b"{", b'{"a":1} x',
    b'{"a":' * 300 + b"[1]" + b"}" * 300,
    b'{"n": -9999999999999999999}', b'{"n": 18446744073709551615}', b'{"a": 1e400}',
    b'{"id": "x\\n", "n": -9223372036854775808}', b'{"a": 0.12345678901234567890123}',
]  # fmt: skip


@given(st.one_of(_JSON.map(lambda v: json.dumps(v).encode()), st.sampled_from(_ODD)))
@settings(max_examples=200, deadline=None)
def test_parse_chunk_reads_one_data_line_as_the_general_path_does(value: bytes) -> None:
    for event in (b"data: " + value + b"\n\n", b"data:" + value + b"\r\n\r\n"):
        fast, general = parse_chunk(event), parse_general(event)
        assert fast == general or (fast != fast and general != general)  # NaN inside


def test_parse_chunk_takes_what_only_json_takes() -> None:
    assert parse_chunk(b'data: {"n": 123456789012345678901234567890}\n\n') == {
        "n": 123456789012345678901234567890
    }
    assert parse_chunk(b'data: {"a": "\xff"}\n\n') == {"a": "\ufffd"}  # replaced, as before
    assert parse_chunk(b'data: {\ndata: "a": 1}\n\n') == {"a": 1}  # two data lines


def test_is_done() -> None:
    assert is_done(DONE) and is_done(b"data:[DONE]\r\n\r\n")
    assert not is_done(b'data: {"a":1}\n\n') and not is_done(KEEPALIVE)
    assert not is_done(b'data: {"text": "[DONE]"}\n\n') and is_done(b"data:  [DONE] \n\n")


def test_usage_of_and_usage_only() -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    final = chunk(usage=usage)
    assert usage_of(final) == usage and is_usage_only(final)
    mid = chunk(delta(content="x"), usage=None)
    assert usage_of(mid) is None and not is_usage_only(mid)
    assert not is_usage_only(chunk(delta(content="x"), usage=usage))
    assert not is_usage_only(chunk())


def test_error_event_shape() -> None:
    ev = error_event("boom", code="c")
    assert ev.startswith(b"data: ") and ev.endswith(b"\n\n")
    assert parse_chunk(ev) == {
        "error": {"message": "boom", "type": "upstream_error", "param": None, "code": "c"}
    }
    assert json.loads(error_event("x", type="t")[6:])["error"]["type"] == "t"


def test_encode_event_keeps_unicode() -> None:
    assert encode_event({"a": "é"}) == 'data: {"a": "é"}\n\n'.encode()
