from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import given, settings, strategies as st

from proxy.cascade.lossless import compact_text
from proxy.cascade.tables import ABSENT, tabulate_json

_BLOCK = re.compile(
    r"\[#table (\[.*?\]) \(one row per object; ~ = key absent\)\n(.*?)\n\]", re.DOTALL
)
_CELL_TOKENS = re.compile(r'("(?:[^"\\]|\\.)*")|~')
_GONE = {"\x00absent": True}


def _untable(text: str) -> Any:
    """What a reader of the tabular text gets: the tables read back into arrays of objects."""

    def block(m: re.Match[str]) -> str:
        columns = json.loads(m.group(1))
        rows = []
        for line in m.group(2).split("\n"):
            cells = json.loads(_CELL_TOKENS.sub(lambda t: t.group(1) or json.dumps(_GONE), line))
            rows.append({c: v for c, v in zip(columns, cells, strict=True) if v != _GONE})
        return json.dumps(rows)

    return json.loads(_BLOCK.sub(block, text))


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=False) == json.dumps(b, sort_keys=False)


def test_records_become_one_header_and_a_row_each_with_absent_keys_marked() -> None:
    data = {
        "url": "u",
        "elements": [
            {"index": 4, "tag": "input", "placeholder": "Email"},
            {"index": 6, "tag": "input", "placeholder": None},
            {"index": 264, "tag": "a", "href": "https://x"},
        ],
    }
    out, tables = tabulate_json(json.dumps(data, indent=2)) or ("", 0)
    assert tables == 1
    assert out == (
        '{"url":"u","elements":[#table ["index","tag","placeholder","href"] '
        f"(one row per object; {ABSENT} = key absent)\n"
        '[4,"input","Email",~]\n[6,"input",null,~]\n[264,"a",~,"https://x"]\n]}'
    )
    assert _same(_untable(out), data)


def test_numbers_kept_as_written() -> None:
    rows = [
        '{"a": 1.10, "b": 1e400}',
        '{"a": 2.50, "b": -0}',
        '{"a": 3, "b": 12345678901234567890}',
    ]
    text = "[" + ", ".join(rows + ['{"a": 0.0, "b": 1E5}'] * 6) + "]"
    out, _ = tabulate_json(text) or ("", 0)
    assert "[1.10,1e400]" in out and "[2.50,-0]" in out and "12345678901234567890" in out
    assert "[0.0,1E5]" in out


def test_refused_when_keys_repeat_or_change_order_or_too_few_rows() -> None:
    assert tabulate_json('[{"a":1,"b":2},{"b":3,"a":4},{"a":5,"b":6}]') is None
    assert tabulate_json('[{"a":1,"a":2},{"a":3},{"a":4}]') is None
    assert tabulate_json('[{"a":1},{"a":2}]') is None
    assert tabulate_json("not json") is None
    assert tabulate_json('{"a": "\\ud800", "t": [{"x":1},{"x":2},{"x":3}]}') is None


def test_compact_text_takes_the_table_when_shorter() -> None:
    rows = [{"id": i, "name": f"item {i}", "ok": True} for i in range(20)]
    done = compact_text(json.dumps(rows, indent=2))
    assert done is not None and done.json_tables == 1 and done.text.startswith("[#table")
    assert "arrays of objects as tables" in done.how


_SCALAR = st.none() | st.booleans() | st.integers() | st.text(max_size=6)
_CELL = _SCALAR | st.lists(_SCALAR, max_size=2) | st.dictionaries(st.text(max_size=2), _SCALAR)
_RECORD = st.fixed_dictionaries(
    {"id": st.integers()}, optional={"a": _CELL, "b": _CELL, "c": st.floats(allow_nan=False)}
) | st.dictionaries(st.sampled_from("abcd"), _SCALAR, min_size=1)
_VALUE = st.recursive(
    _SCALAR | st.lists(_RECORD, min_size=3, max_size=8),
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=3), kids, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(value=_VALUE, indent=st.sampled_from([None, 2]))
def test_tables_read_back_to_the_same_json(value: Any, indent: int | None) -> None:
    text = json.dumps(value, indent=indent)
    got = tabulate_json(text)
    if got is None:
        return
    out, tables = got
    assert tables >= 1 and len(out) < len(text.strip())
    assert _same(_untable(out), json.loads(text))
