"""``services.raw_cache``: a text read for a page is kept under its rows' version and read
again only when that changes; the texts kept stay within their memory budget, least
recently used out first."""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from proxy.services import raw_cache
from tests.unit.raw_reads import stub_reads


class Store:
    """What the queries answer: per id, (version, text or None); reads counted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rows: dict[str, tuple[str, str | None]] = {}
        self.reads: list[str] = []

        async def version(conn: Any, *, tenant: str, session_id: str, tool_call_id: str) -> str:
            return self.rows[tool_call_id][0]

        async def fetch(
            conn: Any, *, tenant: str, session_id: str, tool_call_id: str
        ) -> dict[str, Any] | None:
            self.reads.append(tool_call_id)
            text = self.rows[tool_call_id][1]
            if text is None:
                return None
            return {"content": text, "original_bytes": len(text), "capped": False}

        stub_reads(monkeypatch, fetch, version)

    async def read(self, cid: str) -> str | None:
        out = await raw_cache.read_output(None, tenant="t", session_id="s", tool_call_id=cid)
        return None if out is None else out.content


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    raw_cache.clear()
    yield Store(monkeypatch)
    raw_cache.clear()


async def test_a_text_is_read_again_only_when_its_version_changes(store: Store) -> None:
    store.rows["a"] = ("v1", "one")
    assert [await store.read("a"), await store.read("a")] == ["one", "one"]
    assert store.reads == ["a"]
    store.rows["a"] = ("v2", "two")
    assert await store.read("a") == "two"
    assert store.reads == ["a", "a"]


async def test_the_texts_kept_stay_within_the_budget(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(raw_cache, "BUDGET_BYTES", 3 * sys.getsizeof("x" * 1000))
    for cid in "abcd":
        store.rows[cid] = ("v", cid * 1000)
        await store.read(cid)
    await store.read("b")  # kept; a, read least recently, made room for d
    await store.read("a")
    assert store.reads == ["a", "b", "c", "d", "a"]
    store.rows["huge"] = ("v", "h" * 5000)
    await store.read("huge")
    await store.read("huge")  # past the budget alone: never kept, and nothing made room
    await store.read("b")
    assert store.reads[5:] == ["huge", "huge"]


async def test_a_text_whose_rows_are_gone_is_not_kept(store: Store) -> None:
    store.rows["a"] = ("v1", "one")
    await store.read("a")
    store.rows["a"] = ("gone", None)
    assert await store.read("a") is None
    store.rows["a"] = ("v1", "one")  # even a version equal to the one kept is read anew
    assert await store.read("a") == "one"
    assert store.reads == ["a", "a", "a"]


async def test_the_budget_counts_a_text_as_it_was_kept(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A C extension that asks for a kept text's UTF-8 (tiktoken does) makes CPython keep
    # that form beside it, which ``sys.getsizeof`` then counts: a text dropped must give
    # back what it took, or the budget grows with every such text replaced.
    text = "é" * 1000
    monkeypatch.setattr(raw_cache, "BUDGET_BYTES", 3 * sys.getsizeof(text))
    store.rows["a"] = ("v1", text)
    kept = await raw_cache.read_output(None, tenant="t", session_id="s", tool_call_id="a")
    assert kept is not None
    as_utf8 = ctypes.pythonapi.PyUnicode_AsUTF8
    as_utf8.argtypes, as_utf8.restype = [ctypes.py_object], ctypes.c_char_p
    as_utf8(kept.content)
    store.rows["a"] = ("v2", "ê" * 1000)
    for cid in "abcd":
        store.rows.setdefault(cid, ("v", cid * 1000 + "é"))
        await store.read(cid)
    await store.read("a")  # pushed out by d: the budget holds three
    assert store.reads == ["a", "a", "b", "c", "d", "a"]
