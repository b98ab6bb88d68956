"""A turn's query embedding that fails or times out is a silent no-op for the turn, logged
and counted (DESIGN §5, stage 4): the request goes on without the block, the operator sees
a WARNING and ``cascade_embedding_failures_total`` grows, whichever way it failed."""

from __future__ import annotations

import asyncio
import logging

import pytest

from proxy.cascade.retrieval import RetrievalNeed
from proxy.services import retrieval
from proxy.session_id import SessionKey


class _Stuck:
    model = "fake"

    async def embed(self, texts: list[str]) -> list[list[float]]:
        await asyncio.Event().wait()  # never answers: the turn's timeoutMs ends the wait
        raise AssertionError("unreachable")


class _Broken:
    model = "fake"

    async def embed(self, texts: list[str]) -> list[list[float]]:
        raise ConnectionError("embedding service refused the connection")


@pytest.mark.parametrize(
    ("embedder", "said"),
    [(_Stuck(), "took longer than 20 ms"), (_Broken(), "refused the connection")],
)
async def test_a_failed_query_embedding_is_logged_and_counted(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    embedder: object,
    said: str,
) -> None:
    counted: list[None] = []

    class _Hub:
        def current(self) -> object:
            return embedder

    monkeypatch.setattr(retrieval, "embedders_here", _Hub)
    monkeypatch.setattr(retrieval, "note_embedding_failure", lambda: counted.append(None))
    need = RetrievalNeed(query="q", min_score=0.0, max_results=2, timeout_ms=20)
    with caplog.at_level(logging.WARNING, logger="cascade.retrieval"):
        answer = await retrieval.related_messages(need, None, SessionKey("t", "s"))
    assert answer["hits"] == 0 and said in answer["error"]
    assert len(counted) == 1
    warnings = [r.getMessage() for r in caplog.records if r.name == "cascade.retrieval"]
    assert len(warnings) == 1 and said in warnings[0], warnings
