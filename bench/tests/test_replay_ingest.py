"""The replay's ingest report: transforms read from the compacted text, originals paged back."""

from __future__ import annotations

import json

import httpx
import pytest

from bench.replay_ingest import page_back, transforms_of
from proxy.cascade.lossless import compacted_marker
from proxy.cascade.paging import raw_output_page
from proxy.cascade.tables import tabulate_json

MARK = compacted_marker("c1", 999, "x")


def test_transforms_are_read_from_the_compacted_text() -> None:
    assert transforms_of(MARK + '{"a":[1,2]}') == ["json"]
    table = tabulate_json(json.dumps([{"k": i} for i in range(9)]))
    assert table is not None and transforms_of(MARK + table[0]) == ["tables"]
    pointer = "[9 lines: same as lines 1-9 of tool result c0]"
    assert transforms_of(MARK + pointer) == ["pointers"]
    both = f"x\n[previous line repeated 4 more times]\n{pointer}"
    assert transforms_of(MARK + both) == ["collapse", "pointers"]


def _serving(text: str, max_chars: int) -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        offset = int(request.url.params.get("offset", "0"))
        page, _ = raw_output_page(text, id="c1", offset=offset, max_chars=max_chars)
        return httpx.Response(200, json={"page": page})

    return httpx.Client(transport=httpx.MockTransport(handler), base_url="http://proxy")


@pytest.mark.parametrize("max_chars", [200, 1000, 100_000])
def test_pages_put_together_are_the_original(max_chars: int) -> None:
    text = "".join(f"line {i}\r\n\tü{i * 7}\n" for i in range(300))
    with _serving(text, max_chars) as client:
        assert page_back(client, "s", "c1") == text
