"""A search the race filter leaves short of ``maxResults`` fetches again, with room for it.

A compaction that lands while a turn's search runs folds messages the prompt still carries;
the search calls them "summarised" and the filter drops them (``RetrievalNeed.carried``). The
best candidates are often exactly those (the turn's own recent context), so a search for
``maxResults`` alone came back with fewer, or none, though older messages matched.
"""

from __future__ import annotations

from typing import Any

import pytest

from proxy.cascade.retrieval import RetrievalNeed
from proxy.services import retrieval
from proxy.session_id import SessionKey
from proxy.store.embeddings import Found


class _Embedder:
    model = "fake"

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]


class _Hub:
    def current(self) -> _Embedder:
        return _Embedder()


def _found(pos: int, origin: str, score: float) -> Found:
    return Found(pos, "user", None, {"role": "user", "content": f"m{pos}"}, origin, score)


CANDIDATES = [  # best first: the six the prompt still carries, then three folded long ago
    *(_found(20 + i, "summarised", 0.9 - i / 100) for i in range(6)),
    *(_found(i, "summarised", 0.5 - i / 100) for i in range(3)),
]


@pytest.mark.parametrize(("carried", "shown"), [(range(20, 26), [0, 1]), ((), [20, 21])])
async def test_the_race_filter_does_not_starve_the_result(
    monkeypatch: pytest.MonkeyPatch, carried: range, shown: list[int]
) -> None:
    limits: list[int] = []

    async def search(conn: Any, *, limit: int, **kw: Any) -> list[Found]:
        limits.append(limit)
        return CANDIDATES[:limit]

    monkeypatch.setattr(retrieval, "embedders_here", _Hub)
    monkeypatch.setattr(retrieval.store, "search_outside_prompt", search)
    need = RetrievalNeed(
        query="q", min_score=0.0, max_results=2, timeout_ms=300, carried=frozenset(carried)
    )
    answer = await retrieval.related_messages(need, None, SessionKey("t", "s"))
    assert answer["positions"] == shown and answer["hits"] == 2
    assert limits == ([2, 2 + 6] if carried else [2]), "one wider search, only when short"


async def test_a_folded_hit_the_prompt_carries_only_as_a_placeholder_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A compaction that lands while the search runs folds a result the step's window holds
    evicted: the prompt carries its placeholder, not its text, so the hit stays."""
    found = [
        Found(20, "tool", "c", {"role": "tool", "content": "t"}, "summarised", 0.9, cleared=True),
        _found(21, "summarised", 0.8),
    ]

    async def search(conn: Any, *, limit: int, **kw: Any) -> list[Found]:
        return found

    monkeypatch.setattr(retrieval, "embedders_here", _Hub)
    monkeypatch.setattr(retrieval.store, "search_outside_prompt", search)
    need = RetrievalNeed(
        query="q", min_score=0.0, max_results=2, timeout_ms=300, carried=frozenset({20, 21})
    )
    answer = await retrieval.related_messages(need, None, SessionKey("t", "s"))
    assert answer["positions"] == [20]


async def test_repeated_texts_do_not_starve_the_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent prints one output turn after turn: its copies are the best candidates, and
    each text is quoted once, so the wider search makes room for as many copies as the race
    slack allows, not only for the few messages a small window (just after a compaction)
    carries."""
    copy = {"role": "tool", "content": "On branch main, nothing to commit"}
    found = [
        *(Found(i, "tool", f"c{i}", copy, "summarised", 0.9 - i / 100) for i in range(6)),
        *(_found(10 + i, "summarised", 0.5 - i / 100) for i in range(3)),
    ]
    limits: list[int] = []

    async def search(conn: Any, *, limit: int, **kw: Any) -> list[Found]:
        limits.append(limit)
        return found[:limit]

    monkeypatch.setattr(retrieval, "embedders_here", _Hub)
    monkeypatch.setattr(retrieval.store, "search_outside_prompt", search)
    need = RetrievalNeed(
        query="q", min_score=0.0, max_results=2, timeout_ms=300, carried=frozenset({30, 31})
    )
    answer = await retrieval.related_messages(need, None, SessionKey("t", "s"))
    assert answer["positions"] == [0, 10], limits
