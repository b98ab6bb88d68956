"""``jsonio.values_count``: a body's JSON values counted in its bytes, before it is parsed,
so that a body of tiny items is refused without the Python objects its parse would build."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from proxy.jsonio import _SLICE, values_count


def _over(data: bytes, limit: int) -> bool:
    """Whether ``data`` holds more than ``limit`` values, as the 413 reads its count."""
    return values_count(data, limit) > limit


def _values(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + sum(_values(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(_values(v) for v in value)
    return 1


SHAPES = [
    {"a": [1, 2, {"b": [], "c": {}}], "s": 'x,[{,"]'},
    [],
    {},
    [[]],
    [[], [], {}, [{}]],
    ["", "", ["a"], {"k": ""}],
    {"messages": [{"role": "user", "content": 'he said, "[x]" {} \\\\ \\" ['}]},
    {"x": "\\", "y": ['\\\\"', ",", "[]"]},
]


@pytest.mark.parametrize("value", SHAPES)
def test_the_count_is_the_values_parsed(value: Any) -> None:
    raw = orjson.dumps(value)
    count = _values(value)
    small = b" " * count + raw  # past the byte count that is not read at all
    assert _over(small, count - 1)
    assert not _over(small, count)
    spaced = json.dumps(value, indent=2).encode()  # "[ ]" is counted as holding one: never fewer
    assert _over(b" " * count + spaced, count - 1)


def test_brackets_and_commas_in_strings_are_not_values() -> None:
    text = "a, [b], {c}, " * 100_000  # a pasted file's brackets and a text's commas
    raw = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": text}]})
    assert not _over(raw, 10)
    escaped = orjson.dumps({"messages": [{"role": "tool", "content": json.dumps([text])}]})
    assert not _over(escaped, 10)


def test_tiny_items_in_any_field_are_counted_across_slices() -> None:
    for item in (b"[[]],", b"{},", b"0,", b'"",', b'"x",'):
        items = b"".join([item] * (2 * _SLICE // len(item)))
        raw = b'{"messages":[{"role":"user","content":"hi"}],"extra":[' + items + b"0]}"
        assert _over(raw, 2 * _SLICE // len(item)), item
        assert not _over(raw, 4 * _SLICE), item


def test_a_string_split_by_a_slice_edge_keeps_its_commas_out() -> None:
    text = "," * (3 * _SLICE)
    raw = orjson.dumps({"a": "x", "b": text, "c": [1, 2]})
    assert not _over(raw, 10)
    assert _over(raw, 5)


@pytest.mark.parametrize("escape", ['\\"', "\\\\", '\\\\\\"'])
@pytest.mark.parametrize("shift", range(-3, 4))
def test_an_escape_parted_by_a_slice_edge_stays_in_its_string(escape: str, shift: int) -> None:
    # The escapes are blanked in the whole body before it is split: an escaped quote (or an
    # escaped backslash before a closing quote) on a slice's edge neither ends its string
    # there nor starts one, so the commas after it are counted where they are.
    written = orjson.dumps(escape)[1:-1]  # as JSON writes it
    start = len(orjson.dumps({"a": "x" * (_SLICE // 2), "t": ""})) - 2  # where "t"'s text starts
    lead = _SLICE - start - len(written) // 2 + shift  # the escape lies on the slice's edge
    value = {"a": "x" * (_SLICE // 2), "t": "y" * lead + escape + ",[{" * 40, "v": [0] * 30}
    raw = orjson.dumps(value)
    at = raw.index(written)
    assert at + len(written) // 2 - _SLICE == shift
    assert not _over(raw, _values(value))
    assert _over(raw, _values(value) - 1)
