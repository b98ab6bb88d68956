"""``sse.BodySplitter`` holds a body whole only while it can be a JSON answer: one that opens
with ``{`` and then holds a data line after a blank line (no JSON text has one: a JSON string
holds no line break, and ``data`` is no JSON word) is an event stream after all, relayed as
its events come from there on, not held to its end; a byte-order mark cut between reads
still opens a whole answer, and one before a stream is no part of its first event."""

from __future__ import annotations

import json

from proxy import sse

_CHUNK = b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n'


def test_a_stream_after_a_bare_json_line_goes_out_as_its_events_come() -> None:
    splitter = sse.BodySplitter()
    assert splitter.feed(b'{"notice": "warming up"}\n') == []  # a JSON answer, so far
    events = splitter.feed(b"\n" + _CHUNK[:20])
    events += splitter.feed(_CHUNK[20:])
    assert events == [b'{"notice": "warming up"}\n\n', _CHUNK]
    assert splitter.feed(sse.DONE) == [sse.DONE] and splitter.flush() == b""
    cut = sse.BodySplitter()  # the blank line and the field cut between reads
    assert cut.feed(b'{"a": 1}\r\n\r') == [] and cut.feed(b"\nda") == []
    assert cut.feed(b"ta: 1\n\n") == [b'{"a": 1}\r\n\r\n', b"data: 1\n\n"]


def test_a_pretty_printed_answer_is_held_whole() -> None:
    whole = json.dumps({"choices": [{"message": {"content": "data:\n\ndata: x"}}]}, indent=2)
    body = whole.replace("\n", "\n\n").encode()  # blank lines between its lines
    splitter = sse.BodySplitter()
    assert [e for i in range(0, len(body), 7) for e in splitter.feed(body[i : i + 7])] == []
    assert splitter.flush() == body


def test_a_byte_order_mark_cut_between_reads_still_opens_a_whole_answer() -> None:
    splitter = sse.BodySplitter()
    assert splitter.feed(b"\xef") == [] and splitter.feed(b"\xbb") == []
    assert splitter.feed(b'\xbf{"a":\n\n1}') == []
    assert splitter.flush() == b'\xef\xbb\xbf{"a":\n\n1}'


def test_a_stream_after_a_byte_order_mark_is_its_events_without_it() -> None:
    """An SSE parser skips a leading byte-order mark (a .NET writer's); the relay's reading
    and what the client gets do too, where its first event was read as an unknown field's
    (its chunk missing from the stored reply, and from the openai SDK's, which keeps it)."""
    stream = sse.BodySplitter()
    assert stream.feed(b"\xef\xbb") == [] and stream.feed(b"\xbf" + _CHUNK) == [_CHUNK]
    assert sse.parse_chunk(_CHUNK) is not None


def test_blank_lines_before_the_first_byte_go_out_as_they_come() -> None:
    """A provider that sends blank lines before its answer (a keep-alive while it thinks)
    has them relayed as they come, as events of no field: held, they left the client with
    no byte (the relay's own keep-alive waits for the provider's silence). A pretty-printed
    whole answer after them is held whole all the same."""
    splitter = sse.BodySplitter()
    assert splitter.feed(b"\n") == [b"\n"]
    assert splitter.feed(b"\r\n \t") == [b"\r\n"]  # a line's blank space waits for its end
    body = b'{\n\n  "choices": []\n\n}'
    assert splitter.feed(body[:5]) == [] and splitter.feed(body[5:]) == []
    assert splitter.flush().strip() == body
    stream = sse.BodySplitter()
    assert stream.feed(b"\n\n") == [b"\n", b"\n"] and stream.feed(_CHUNK) == [_CHUNK]
