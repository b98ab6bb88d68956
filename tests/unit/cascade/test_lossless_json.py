"""The JSON path of ``compact_text`` gives, byte for byte, what the implementation it replaced
gave (``bench.json_speed.before``: three parses, a substitution with a call per token, the
tables written with ``json.dumps``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from bench.json_speed import before, real_results, tabulate_before
from proxy.cascade.lossless import compact_text, minify_json
from proxy.cascade.tables import may_tabulate, tabulate_json


def _check(text: str) -> None:
    assert tabulate_json(text) == tabulate_before(text), text[:200]
    want = before(text)
    got = compact_text(text)
    if want is None:
        assert got is None or not got.json_minified, text[:200]
    else:
        assert got == want, text[:200]


ROWS = [{"id": i, "name": f"item {i}", "ok": i % 2 == 0, "n": None} for i in range(6)]
FIXTURES = [
    json.dumps({"results": ROWS, "total": 6}, indent=2),
    json.dumps({"results": ROWS[:2], "total": 2}, indent=2),  # too few rows for a table
    json.dumps(ROWS, indent=4, ensure_ascii=False),
    json.dumps([{"id": i, "sub": [{"k": j} for j in range(3)]} for i in range(4)], indent=2),
    json.dumps([{"id": 1}, {"id": 2, "x": [{"k": 1}, {"k": 2}, {"k": 3}]}, {"x": 3}], indent=1),
    '{\n  "f": 1.0, "g": 1, "e": 1e5, "E": -2.5E-3, "big": 123456789012345678901234567890\n}',
    '[\n  {"x": NaN, "y": 1}, {"x": Infinity, "y": 2}, {"x": -Infinity, "y": 3}\n]',
    '{ "k": 1, "k": 2, "rows": [ {"a": 1, "a": 2}, {"a": 3}, {"a": 4} ] }',  # duplicates
    '{\n  "s": "caf\\u00e9 \\"q\\" \\/ \\ud83d\\ude00",\n'
    '  "t": [{"u": "\\u00e9"}, {"u": 1}, {"u": 2}]\n}',
    '{\n  "text": "an array [ {\\"of\\": 1} ] in a string only", "n": 1\n}',
    '{\n  "lone": "\\ud800", "t": [{"x": 1}, {"x": 2}, {"x": 3}]\n}',  # table refused
    '\u00a0{\n  "t": [{"x": 1}, {"x": 2}, {"x": 3}, {"x": 4}]\n}\u00a0',  # not JSON whitespace
    '{\n  "raw tab": "a\tb"\n}',  # a raw control character: not JSON
    '{\n  "x": NaN, "big": 1234567890123456789012345678901234567890, "s": "\\ud800"\n}',
    "[INFO] step 1\n[INFO] step 2 {\n  a: 1\n}",
    "[1, 2]\n[3, 4]",
    '{"already": "minified"}',
    '  {"padded": 1}  \n',
    "[\n]",
    "{}",
]


@pytest.mark.parametrize("text", FIXTURES)
def test_json_path_is_what_separate_parses_gave(text: str) -> None:
    _check(text)


def test_real_json_results_are_unchanged_byte_for_byte() -> None:
    """Every JSON tool result of transcripts 4 (OpenHands, browser JSON) and 8 (tau-bench),
    read from the shared data directory when it is there."""
    texts = real_results((4, 8))
    if not texts:
        pytest.skip("the shared transcripts are not on this machine")
    assert len(texts) > 100
    for text in texts:
        _check(text)


def test_too_deep_json_is_left_to_the_line_transforms() -> None:
    """A text nested deeper than the parser recurses is not JSON here (it used to raise)."""
    deep = "[" * 100_000 + "]" * 100_000
    assert minify_json(deep) is None
    assert compact_text(deep) is None


_LEAF = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
)
_JSON = st.recursive(
    _LEAF,
    lambda kids: (
        st.lists(kids, max_size=5)
        | st.dictionaries(st.text(max_size=4), kids, max_size=4)
        | st.lists(st.dictionaries(st.sampled_from("abc"), kids, min_size=1), min_size=3)
    ),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(
    value=_JSON,
    indent=st.sampled_from([None, 1, 2, "\t"]),
    ascii_only=st.booleans(),
    pad=st.sampled_from(["", " \n", "\u2028", "\x0b"]),
)
def test_generated_json_is_unchanged(value: Any, indent: Any, ascii_only: bool, pad: str) -> None:
    text = json.dumps(value, indent=indent, ensure_ascii=ascii_only)
    _check(pad + text + pad)
    if not may_tabulate(text):
        assert tabulate_json(text) is None


def test_text_that_only_opens_like_json_is_not_scanned(monkeypatch: pytest.MonkeyPatch) -> None:
    """A log full of ``[`` fails the parse at its first token; the scan for ``[{`` (a pass
    over all of it) runs only for text that parses."""

    def scanned(text: str) -> bool:
        raise AssertionError("scanned")

    monkeypatch.setattr("proxy.cascade.lossless.may_tabulate", scanned)
    log = "".join(f"[INFO] step {i} [{{x}}]\n" for i in range(50))
    assert compact_text(log) is None
    with pytest.raises(AssertionError, match="scanned"):
        compact_text('[\n  {"a": 1}\n]')


def test_json_after_a_byte_order_mark_is_compacted_and_keeps_the_mark() -> None:
    records = [{"name": f"item{i}", "value": i} for i in range(8)]
    for value in (records, {"a": [1, 2], "b": {"c": None}}):
        text = json.dumps(value, indent=2)
        plain = compact_text(text)
        assert plain is not None
        done = compact_text("\ufeff" + text)
        assert done is not None and done.text == "\ufeff" + plain.text
        assert done.how == plain.how
