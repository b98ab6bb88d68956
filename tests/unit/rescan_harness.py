"""The embedding worker as the rescan tests drive it: no database, no model.

The pool hands out a dummy connection, the embedder returns a vector per text, and the
store's claim, release and update are the test's own, so each test states only the table it
plays and the clock it moves.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.services import retrieval
from proxy.services.retrieval import EmbeddingWorker


class Pool:
    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[object]:
        yield object()


class Embedder:
    model = "m"

    async def warm(self) -> None:
        return None

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [[1.0] for _ in texts]


async def nothing(conn: Any, **_: Any) -> int:
    return 0


def rescan_worker(
    monkeypatch: pytest.MonkeyPatch,
    claim: Callable[..., Awaitable[Any]],
    *,
    release_stale: Callable[[Any], Awaitable[int]] = nothing,
    update: Callable[..., Awaitable[Any]] | None = None,
    clock: list[float] | None = None,
    rescan_seconds: float = 60.0,
) -> EmbeddingWorker:
    """The worker over the test's ``claim`` and ``release_stale`` for an agent with retrieval
    on; ``update`` (with every message's text ``x``) where the test embeds what it claims,
    ``clock[0]`` as ``time.monotonic`` where the test moves time itself."""
    monkeypatch.setattr(retrieval.store, "claim_unembedded", claim)
    monkeypatch.setattr(retrieval.store, "release_stale_claims", release_stale)
    if update is not None:
        monkeypatch.setattr(retrieval.store, "update_embeddings", update)
        monkeypatch.setattr(retrieval, "_text", lambda c, cfg: "x")
    if clock is not None:
        monkeypatch.setattr(retrieval.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(retrieval, "retrieval_agents", lambda cfg: (("ret",), ("ret",), False))
    cfg = SimpleNamespace(embedding=SimpleNamespace(batch_size=16))
    embedders = SimpleNamespace(current=lambda: Embedder())
    return EmbeddingWorker(Pool(), lambda: cfg, embedders, rescan_seconds=rescan_seconds)  # type: ignore[arg-type]
