"""``lossless.is_compacted_from``: which spill a compacted result the client resent (marker
and all) was made from, so its pinned handle reads that original back, not the text."""

from __future__ import annotations

import json

from proxy.cascade.lossless import EarlierLines, compact_text, compacted_marker, is_compacted_from

RECORDS = json.dumps([{"name": f"item{i}", "value": i} for i in range(20)], indent=2)
LOG = "".join(f"2026-01-01 worker-{i:03d} GET /api/v1/items 200 in 12ms\n" for i in range(12))


def compacted(raw: str, handle: str, earlier: EarlierLines = EarlierLines()) -> str:
    done = compact_text(raw, earlier)
    assert done is not None
    return compacted_marker(handle, len(raw), done.how) + done.text


def test_the_original_of_a_compacted_text_is_found() -> None:
    text = compacted(RECORDS, "c1@2")
    assert is_compacted_from(text, RECORDS, "c1@2")


def test_another_handle_another_text_or_a_plain_text_is_not_it() -> None:
    text = compacted(RECORDS, "c1@2")
    other = RECORDS.replace('"item3"', '"item9"')
    assert not is_compacted_from(text, RECORDS, "c1@4")
    assert not is_compacted_from(text, other, "c1@2")
    assert not is_compacted_from(RECORDS, RECORDS, "c1@2")
    assert not is_compacted_from(text.replace("item5", "item6"), RECORDS, "c1@2")


def test_with_pointers_the_marker_ties_the_text_to_its_original() -> None:
    earlier = EarlierLines.build([("c0@1", LOG)])
    raw = "header\n" + LOG
    text = compacted(raw, "c1@3", earlier)
    assert "pointed to earlier results" in text.partition("\n")[0]
    assert is_compacted_from(text, raw, "c1@3")
    assert not is_compacted_from(text, raw + "x", "c1@3")
