"""``ResentBodies.counted`` is a sum (the last body's count plus what the new bytes add),
and a 413 is decided by it before the body is parsed: no body a client can build may hold
more values than that sum says. The new bytes are spliced where the last body's last message
ends (outside any string, its tail starting with whitespace or ``]``), so they cannot change
how the bytes before them read; these bodies try to make them change how the tail reads
(open a string it closes, escape its first byte, close ``messages`` and reopen it) or hide
values from the sum (escapes, empty pairs across the seam)."""

from __future__ import annotations

import json
import random
from typing import Any

import orjson
import pytest

from proxy.jsonio import values_in
from proxy.services.resent import ResentBodies

KEY = ("t", "s")


def _values(raw: bytes) -> int:
    """Every value the body holds, its outermost one and each duplicate key's too."""

    def walk(value: Any) -> int:
        if isinstance(value, list) and value and isinstance(value[0], tuple):
            return 1 + sum(walk(v) for _, v in value)  # an object, as its pairs
        if isinstance(value, list):
            return 1 + sum(walk(v) for v in value)
        return 1

    return walk(json.loads(raw, object_pairs_hook=list))


def _valid(raw: bytes) -> bool:
    try:
        json.loads(raw)
    except ValueError:
        return False
    return True


_TAILS = [
    {"x": "[[],[],[]]"},
    {"x": '\\"[1,2]\\\\', "y": [[], {}]},
    {"tools": [{"a": [1, {}]}], "s": '"],["'},
    {",": ",[[],[],[],[],[]]"},
    {},
]
_ADDED = [
    b',{"role":"user","content":"a"}',
    b',"[1,2,3]"',
    b',"\\\\",[[[]]]',
    b',"\\"",{}',
    b'],"k":[1,2,[3]],"messages":[',
    b'],"k":"',
    b',"',
    b',"a\\',
    b",[",
    b",[[],[],{}]",
    b',{"a":[],"b":{}}',
    b'], "y": [[1,2,3]], "z": {"a": [',
]


def _cached(tail: dict[str, Any]) -> tuple[ResentBodies, bytes, int]:
    cache = ResentBodies(min_bytes=0)
    raw = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], **tail})
    count = 1 + values_in(raw)  # as jsonio.values_count counts a body past its limit
    cache.parse(KEY, raw, count)
    return cache, raw, raw.index(b'"hi"}') + len(b'"hi"}')


@pytest.mark.parametrize("tail", _TAILS)
def test_no_spliced_body_holds_more_values_than_its_sum(tail: dict[str, Any]) -> None:
    rng = random.Random(68)
    alphabet = b'",[]{}\\:a1 '
    tried = summed = 0
    for added in _ADDED:
        for _ in range(400):
            new = bytearray(added)
            for _ in range(rng.randint(0, 3)):  # a few bytes put in, taken out, changed
                at = rng.randint(0, len(new))
                op = rng.random()
                if op < 0.4:
                    new[at:at] = bytes([rng.choice(alphabet)])
                elif op < 0.7 and at < len(new):
                    del new[at]
                elif at < len(new):
                    new[at] = rng.choice(alphabet)
            cache, raw, end = _cached(tail)
            body = raw[:end] + bytes(new) + raw[end:]
            total = cache.counted(KEY, body)
            valid = _valid(body)
            tried += valid
            if total is None:
                continue
            summed += valid
            # invalid, it is parsed up to its error: the values read so far are built too
            assert total >= 1 + values_in(body), body
            assert not valid or total >= _values(body), body
    assert tried > 100 and summed > 50  # the bodies exercised the sum, not only the refusal


def test_closing_messages_and_reopening_it_is_counted() -> None:
    """New bytes that close ``messages`` and add a field of values before reopening it."""
    cache, raw, end = _cached(_TAILS[0])
    body = raw[:end] + b'],"k":[[[],[1,2,3]]],"messages":[{}' + raw[end:]
    assert _valid(body)
    total = cache.counted(KEY, body)
    assert total is not None and total >= _values(body)


def test_new_bytes_that_open_a_string_the_tail_closes_are_counted_whole() -> None:
    """The tail's strings read as JSON once new bytes open one: here a key and a value of
    commas and brackets become items of ``messages``, which a parser builds before it fails
    at the body's end. The sum (which read them inside strings) would let them through."""
    tail = {",": "," + orjson.dumps([[]] * 50).decode()}
    cache, raw, end = _cached(tail)
    body = raw[:end] + b',"a' + raw[end:]
    assert not _valid(body) and 1 + values_in(body) > 50
    total = cache.counted(KEY, body)
    assert total is None or total >= 1 + values_in(body)
