"""A ``read_tool_output`` answer cut to the room the internal round has
(``toolloop.answer_in_room``) reads and redacts the stored output once, however many times
the page is cut: each try pages the same redacted text at a smaller cap. Reading it again
for each try fetched and redacted up to ``rawCapBytes`` of text per try."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from proxy.services import raw_cache, toolloop
from tests.unit.raw_reads import stub_reads

TEXT = "line of output\n" * 400 + "token=sk-abcdefghijklmnopqrstuvwx\n" + "tail\n" * 50


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    seen = {"fetch": 0, "redact": 0}
    real_redact = raw_cache.redact
    raw_cache.clear()

    async def fetchrow_raw_output(conn: Any, **key: Any) -> dict[str, Any] | None:
        seen["fetch"] += 1
        return {"content": TEXT, "original_bytes": len(TEXT), "capped": False}

    def redact(text: str, patterns: Any) -> Any:
        seen["redact"] += 1
        return real_redact(text, patterns)

    async def fetchval_version(conn: Any, **key: Any) -> str:
        return "v1"

    stub_reads(monkeypatch, fetchrow_raw_output, fetchval_version)
    monkeypatch.setattr(raw_cache, "redact", redact)
    return seen


def _call(**args: Any) -> dict[str, Any]:
    arguments = json.dumps({"id": "c1", **args})
    return {"id": "r1", "function": {"name": "read_tool_output", "arguments": arguments}}


async def test_a_page_cut_to_fit_is_read_and_redacted_once(counts: dict[str, int]) -> None:
    answer = await toolloop.answer_in_room(
        object(),
        tenant="t",
        session_id="s",
        call=_call(),
        max_chars=20_000,
        room=100,
        cost=lambda m: len(str(m["content"])) // 4,
        patterns=(re.compile(r"sk-[a-z]{24}"),),
    )
    assert len(str(answer["content"])) // 4 <= 100  # it was cut, more than once
    assert counts == {"fetch": 1, "redact": 1}


async def test_each_cut_still_shows_the_redacted_text(counts: dict[str, int]) -> None:
    answer = await toolloop.answer_in_room(
        object(),
        tenant="t",
        session_id="s",
        call=_call(offset=len("line of output\n") * 400 - 10),
        max_chars=20_000,
        room=30,
        cost=lambda m: len(str(m["content"])) // 4,
        patterns=(re.compile(r"sk-[a-z]{24}"),),
    )
    content = str(answer["content"])
    assert "sk-abc" not in content and "token=" in content
    assert counts["redact"] == 1


SECRET_AT = TEXT.index("sk-")


async def test_a_secret_across_a_page_edge_shows_on_neither_page(
    counts: dict[str, int],
) -> None:
    # The whole text is redacted before a page is cut from it, and offsets count the
    # redacted text: an edge in the middle of where the secret was stored falls inside
    # its replacement, never inside the secret.
    shown = ""
    offset: int | None = 0
    while offset is not None:
        page = await toolloop.read_page(
            object(),
            tenant="t",
            session_id="s",
            tool_call_id="c1",
            offset=offset,
            limit=SECRET_AT + 10 if offset == 0 else None,
            max_chars=20_000,
            patterns=(re.compile(r"sk-[a-z]{24}"),),
        )
        assert page is not None
        assert "sk-" not in page and "ghijklmnopqrstuvwx" not in page
        body = page.split("\n", 1)[1].split("\n[... more: ")[0]
        shown += body
        next_at = re.search(r'"offset": (\d+)', page.rsplit("\n", 1)[-1])
        offset = int(next_at[1]) if next_at and "[... more" in page else None
    assert shown == raw_cache.redact(TEXT, (re.compile(r"sk-[a-z]{24}"),))[0]
