"""``jsonio.loads_exact``: a client's body keeps an integer beyond 64 bits exact wherever it
sits beside ``messages``, and a body without one is orjson's own parse."""

from __future__ import annotations

import json

import pytest

from proxy.jsonio import dumps, loads_exact

WIDE = 2**64 + 1


@pytest.mark.parametrize(
    "field",
    [
        {"response_format": {"json_schema": {"schema": {"maximum": WIDE}}}},
        {"tools": [{"function": {"parameters": {"properties": {"n": {"enum": [1, -WIDE]}}}}}]},
        {"seed": 2**63},
    ],
)
def test_an_integer_beyond_64_bits_is_read_exact(field: dict[str, object]) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **field}
    parsed = loads_exact(json.dumps(body).encode())
    assert parsed == body
    assert json.dumps(parsed) == json.dumps(body)  # ints, not floats equal to them


def test_an_exponent_in_a_string_or_a_narrow_float_changes_nothing() -> None:
    body = {"model": "m", "messages": [], "temperature": 1e15, "user": "a e+ b", "x": 1e300}
    parsed = loads_exact(json.dumps(body).encode())
    assert parsed == body
    assert isinstance(parsed["x"], float)


def test_a_lone_surrogate_escape_is_read_as_the_stored_reply_holds_it() -> None:
    """A reply the provider cut after a character's first half is relayed as it came, and the
    SDK hands the caller that half; the next request resends it. It is read with U+FFFD, as
    the stored reply holds it, so the history extends (orjson refuses the escape: a 400)."""
    raw = b'{"model":"m","messages":[{"role":"assistant","content":"cut \\ud83d"},'
    raw += b'{"x":"\\ud83dA"}]}'
    parsed = loads_exact(raw)
    assert parsed["messages"] == [{"role": "assistant", "content": "cut \ufffd"}, {"x": "\ufffdA"}]
    pair = b'{"messages":[],"a":"\\ud83d\\ude00","b":"\\ud83d"}'
    assert loads_exact(pair) == {"messages": [], "a": "\U0001f600", "b": "\ufffd"}


@pytest.mark.parametrize(
    ("raw", "read"),
    [
        (b'{"a":"\\udcff"}', {"a": "\ufffd"}),  # surrogateescape's byte, as a stream's is read
        (b'{"a":"\\ude00 cut"}', {"a": "\ufffd cut"}),  # the second half, its first dropped
        (b'{"a":"\\ud83d","b":"\\udcff"}', {"a": "\ufffd", "b": "\ufffd"}),
        (b'{"a":"\\ude00\\ud83d"}', {"a": "\ufffd\ufffd"}),  # the wrong order: no pair
        (b'{"a":"\\ud83d","\\udcff":1}', {"a": "\ufffd", "\ufffd": 1}),
    ],
)
def test_a_lone_low_half_is_read_as_a_lone_high_one_is(raw: bytes, read: object) -> None:
    """Either half alone reads as U+FFFD: a provider's reply may hold a low half alone, and
    the SDK resends it; refused, the session's history could not go on."""
    assert loads_exact(raw) == read


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a":"\\ud83d',
        b'{"a":"\\ud83d","b":NaN}',
        b'{"a":"\\ud83d","b":1e400}',  # orjson's "number is infinity"; json reads inf
        b"[" * 2000 + b"]" * 2000,
        b'{"a":"\xed\xa0\x80"}',  # a surrogate's bytes: no UTF-8, unlike its escape
        b'{"a":"\xed\xb0\x80"}',
    ],
)
def test_what_json_refuses_or_orjson_refuses_otherwise_stays_refused(raw: bytes) -> None:
    with pytest.raises(ValueError):
        loads_exact(raw)


def test_a_lone_half_nested_past_the_recursion_limit_is_refused_as_json() -> None:
    with pytest.raises(ValueError):
        loads_exact(b"[" * 1020 + b'"\\ud83d"' + b"]" * 1020)


def test_a_lone_half_beside_a_deep_nesting_json_reads_is_read() -> None:
    """``json`` reads the body, and making its strings storable walks it again, without
    recursion: a nesting ``json`` took is taken (as orjson takes it without a lone half)."""
    body = loads_exact(b'{"a":"\\ud83d","b":' + b"[" * 600 + b"]" * 600 + b"}")
    assert body["a"] == "\ufffd"
    assert isinstance(body["b"], list)


def test_a_lone_half_is_written_as_the_escape_it_came_as() -> None:
    """A rewritten answer (internal rounds) keeps what else the provider sent, a lone half in
    a logprobs token among it: it goes out as its escape, where no UTF-8 can carry it."""
    body = {"a": "cut \ud83d", "n": 2**70}
    assert dumps(body) == b'{"a":"cut \\ud83d","n":1180591620717411303424}'
    assert json.loads(dumps(body)) == body
