"""The shell of the retrieval stage: the fulfiller that embeds a new turn and searches, and
the background worker that embeds stored messages.

``related_messages`` answers ``cascade.retrieval.RetrievalNeed`` on the request's connection:
it embeds the query, waiting at most ``timeoutMs``, then runs one search statement
(``store.embeddings.search_outside_prompt``), or a second, wider one (``RACE_SLACK``) when a
compaction that landed meanwhile left the first short of ``maxResults``. A missing, slow or
failing embedder, or a search the database refuses, is an answer with an error and no hits:
the turn goes out without the block, and its ``context.retrieval`` event says why.

``EmbeddingWorker`` runs one task per replica for the app's life. While some agent has
retrieval on, it claims batches of the unembedded messages of those agents' sessions, embeds
them off the request path (the builtin model on a worker thread) and stores the vectors, each
step a short statement of its own; a batch is stored while the next one is embedded, so the
database's index work and the model's overlap. It loads the builtin model's weights as soon
as an agent has retrieval on, so no turn waits for them. Its cursor moves through
``messages`` by id, so new messages are embedded within a poll; a change of model or of the
agents that have retrieval on restarts it from the first message (the backfill). Every
``rescan`` interval a second cursor walks the ids below the first, at most ``RESCAN_WINDOWS``
claim windows with nothing to claim an interval, resuming where the last interval stopped and
polled between the first cursor's polls: it picks up what a failed batch, a dead replica's
claim, ids committed out of order or a session moved to an agent with retrieval left behind,
at a cost per interval that does not grow with the table.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from typing import Any

import asyncpg

from proxy.cascade.commands import is_command_exchange
from proxy.cascade.redaction import head_reach, patterns_of
from proxy.cascade.retrieval import (
    Hit,
    RetrievalNeed,
    distinct_hits,
    fit_hits,
    hidden_hits,
    retrieved,
    text_key,
)
from proxy.config import Config
from proxy.embeddings import Embedders, embedders_here, embedding_text, message_text
from proxy.observe import note_embedding_failure
from proxy.session_id import SessionKey
from proxy.store import embeddings as store
from proxy.tasks import stop_task

__all__ = ["related_messages", "EmbeddingWorker", "retrieval_agents"]

log = logging.getLogger("cascade.retrieval")


async def related_messages(need: RetrievalNeed, conn: Any, key: SessionKey) -> dict[str, Any]:
    """The new turn's answer (``cascade.retrieval.retrieved``, module docstring); never
    raises for the embedder or the search."""
    started = time.perf_counter()
    hub = embedders_here()
    if hub is None:
        return retrieved((), snippet_chars=need.snippet_chars, error="no embedder is running")
    embedder = hub.current()

    def failed(error: str) -> dict[str, Any]:
        took = (time.perf_counter() - started) * 1000
        return retrieved(
            (), snippet_chars=need.snippet_chars, took_ms=took, error=error, model=embedder.model
        )

    try:
        vectors = await asyncio.wait_for(embedder.embed([need.query]), need.timeout_ms / 1000)
    except TimeoutError:
        note_embedding_failure()
        slow = f"the embedding took longer than {need.timeout_ms} ms"
        log.warning("retrieval skipped for a turn: %s", slow)
        return failed(slow)
    except Exception as exc:  # the embedder's failure is this turn's no-op, never the request's
        note_embedding_failure()
        log.warning("retrieval skipped for a turn: the embedding failed: %s", exc)
        return failed(f"embedding failed: {exc}")
    limit = need.max_results
    try:
        while True:
            found = await store.search_outside_prompt(
                conn,
                tenant=key.tenant,
                session_id=key.session_id,
                model=embedder.model,
                vector=vectors[0],
                min_score=need.min_score,
                limit=limit,
            )
            hits, repeated = _hits(found, need)
            # the race drops at most the rows the prompt carries; the text filters, any
            # number of copies of one text (an output printed turn after turn)
            slack = RACE_SLACK if repeated else min(len(need.carried), RACE_SLACK)
            wider = need.max_results + slack
            if len(hits) >= need.max_results or len(found) < limit or limit >= wider:
                break
            limit = wider  # the filter dropped some: once more, with room for them
    except asyncpg.PostgresError as exc:  # a refused statement leaves the connection usable
        log.warning("retrieval skipped for a turn: the search failed: %s", exc)
        return failed(f"search failed: {exc}")
    kept = fit_hits(hidden_hits(hits[: need.max_results], need), need)
    took = (time.perf_counter() - started) * 1000
    return retrieved(kept, snippet_chars=need.snippet_chars, took_ms=took, model=embedder.model)


RACE_SLACK = 32
"""The most candidates a search fetches beyond ``maxResults`` when the first fetch came back
short after the filter (``_hits``): a compaction that landed meanwhile folded messages the
prompt still carries, and a hit on one is dropped; the second fetch makes room for as many as
the prompt carries, within this, or for this many when a row was dropped as a copy of a text
(quoted once, or one the prompt carries), of which there may be any number."""


def _hits(found: list[store.Found], need: RetrievalNeed) -> tuple[tuple[Hit, ...], bool]:
    """The search's rows as hits, but for a ``/compact`` exchange and a message the prompt
    still carries that a compaction folded after the window was read (``need.carried``;
    not an evicted result, whose placeholder alone the prompt carries) or one saying what
    a message of the prompt says (``need.carried_texts``), each text once
    (``distinct_hits``); and whether a row was dropped for its text, a copy."""
    rows = [
        f
        for f in found
        if not (isinstance(f.message, dict) and is_command_exchange(f.message))
        and not (f.origin == "summarised" and f.pos in need.carried and not f.cleared)
    ]
    hits = [
        Hit(
            f.pos,
            f.role,
            _quotable(f.message, need),
            f.score,
            f.origin,
            f.tool_call_id,
        )
        for f in rows
        if not (isinstance(f.message, dict) and text_key(f.message) in need.carried_texts)
    ]
    distinct = distinct_hits(hits, snippet_chars=need.snippet_chars)
    return tuple(distinct), len(distinct) < len(rows)


def _quotable(message: Any, need: RetrievalNeed) -> str:
    """What a hit's snippet may be cut from: the message's text up to the snippet, the
    character that tells it was cut, and as far past them as its redaction may read
    (``head_reach``: ``hidden_hits`` redacts it before the cut, and a search's rows are not
    all redacted), and one more, which tells that redaction the text goes on."""
    if not isinstance(message, dict):
        return ""
    return message_text(message)[: head_reach(need.snippet_chars + 1) + 1]


def retrieval_agents(cfg: Config) -> tuple[tuple[str, ...], tuple[str, ...], bool]:
    """The agents whose sessions are embedded: those with retrieval on, every agent the
    config names, and whether the default context (an agent it does not name) has it on."""
    on = tuple(sorted(name for name, ctx in cfg.resolved.items() if ctx.retrieval.enabled))
    return on, tuple(sorted(cfg.resolved)), cfg.context.retrieval.enabled


def _text(claimed: store.Claimed, cfg: Config) -> str:
    """What the worker embeds of a stored message: nothing of a ``/compact`` exchange,
    which no prompt carries, so no search brings it back; else its text redacted with its
    agent's patterns in force, since a secret the model wrote is stored as it came and the
    embedding provider may be a third party."""
    message = claimed.message
    if not isinstance(message, dict) or is_command_exchange(message):
        return ""
    return embedding_text(message, patterns_of(cfg.context_for(claimed.agent).redaction))


RESCAN_WINDOWS = 100
"""Claim windows (``store.CLAIM_WINDOW`` ids each) with nothing to claim the rescan reads per
``rescan`` interval; a table larger than that is rescanned whole over several intervals."""


class EmbeddingWorker:
    """The background embedder of one replica (module docstring)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        config: Callable[[], Config],
        embedders: Embedders,
        *,
        idle_seconds: float = 1.0,
        rescan_seconds: float = 60.0,
        on_failure: Callable[[], None] = lambda: None,
    ) -> None:
        self.pool = pool
        self.config = config
        self.embedders = embedders
        self.idle_seconds = idle_seconds
        self.rescan_seconds = rescan_seconds
        self.on_failure = on_failure  # counts a batch the embedder failed
        self.embedded = 0  # messages this worker stored a vector for
        self._cursor = 0
        self._rescan: int | None = None  # the rescan's cursor; None: none under way
        self._rescan_polls = 0  # claim windows the rescan may still read this interval
        self._scope: tuple[Any, ...] | None = None
        self._scan_started = time.monotonic()
        self._task: asyncio.Task[None] | None = None
        self._storing: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="cascade-embedding-worker")

    async def aclose(self) -> None:
        if self._task is not None:
            await stop_task(self._task)
            self._task = None
        with contextlib.suppress(Exception):
            await self.flush()

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                busy = await self.run_once()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # database or embedder down: back off, never stop
                failures += 1
                if failures == 1 or failures % 60 == 0:
                    log.warning("background embedding failed (%d in a row): %s", failures, exc)
                busy = False
            if not busy:
                await asyncio.sleep(self.idle_seconds * min(failures + 1, 30))

    async def run_once(self) -> bool:
        """Claim, embed and store one batch; True when there may be more right away."""
        cfg = self.config()
        on, configured, default_on = retrieval_agents(cfg)
        if not on and not default_on:
            return False
        embedder = self.embedders.current()
        await embedder.warm()  # before any turn asks, not only when there is work
        scope = (embedder.model, cfg.embedding, on, configured, default_on)
        if scope != self._scope:  # a new model, or new sessions to cover: from the start
            self._scope, self._cursor = scope, 0
            self._rescan, self._rescan_polls = None, 0
            self._scan_started = time.monotonic()
        claim = functools.partial(
            store.claim_unembedded,
            model=embedder.model,
            agents=on,
            configured=configured,
            default_on=default_on,
            limit=cfg.embedding.batch_size,
        )
        start = self._cursor
        async with self.pool.acquire() as conn:
            claimed, last, at_end = await claim(conn, after_id=start)
        if last is None:  # the end of the table: the rescan's turn, when one is under way
            await self.flush()
            await self._rescan_when_due()
            return await self._rescan_once(claim, embedder, cfg)
        self._cursor = last
        if claimed:
            await self._embed(claimed, embedder, start, cfg)
        if at_end:  # new messages may keep coming: the end is here all the same
            await self._rescan_when_due()
            await self._rescan_once(claim, embedder, cfg)
        return True

    async def _rescan_once(self, claim: Any, embedder: Any, cfg: Config) -> bool:
        """One claim window of the rescan, below the first cursor; False when none is due.
        Only a window that claims nothing spends the interval's budget: what the rescan
        finds is work the walk exists for, and new messages are polled between batches."""
        if self._rescan is None or self._rescan_polls <= 0:
            return False
        start = self._rescan
        async with self.pool.acquire() as conn:
            claimed, last, _ = await claim(conn, after_id=start)
        self._rescan_polls -= 0 if claimed else 1
        if last is None or last >= self._cursor:  # up to the first cursor: the walk is done
            self._rescan, self._rescan_polls = None, 0
        else:
            self._rescan = last
        if claimed:
            await self._embed(claimed, embedder, start, cfg, rescan=True)
        return True

    async def _rescan_when_due(self) -> None:
        """At the table's end, once every ``rescan`` interval: release dead replicas'
        claims and give the rescan ``RESCAN_WINDOWS`` more windows, from where it stopped
        (the first message when none is under way). The batch this replica is storing is
        stored first: its claims, as old as its embedding call, are no dead replica's to
        release."""
        if time.monotonic() - self._scan_started >= self.rescan_seconds:
            await self.flush()
            async with self.pool.acquire() as conn:
                await store.release_stale_claims(conn)
            self._rescan = self._rescan or 0
            self._rescan_polls, self._scan_started = RESCAN_WINDOWS, time.monotonic()

    async def _embed(
        self,
        claimed: list[store.Claimed],
        embedder: Any,
        start: int,
        cfg: Config,
        *,
        rescan: bool = False,
    ) -> None:
        texts = [_text(c, cfg) for c in claimed]
        todo = [i for i, t in enumerate(texts) if t]
        vectors: list[Any] = [None] * len(claimed)
        try:
            for i, v in zip(todo, await embedder.embed([texts[i] for i in todo]), strict=True):
                vectors[i] = v
        except BaseException as exc:
            if isinstance(exc, Exception):
                self.on_failure()
            if rescan:  # the batch again, after the back-off
                self._rescan = start
            else:
                self._cursor = start
            with contextlib.suppress(Exception):
                async with self.pool.acquire() as conn:
                    await store.release_claims(
                        conn, model=embedder.model, ids=[c.message_id for c in claimed]
                    )
            raise
        await self.flush()  # one batch stored at a time, while the next one is embedded
        ids = [c.message_id for c in claimed]
        self._storing = asyncio.create_task(self._store(embedder.model, ids, vectors, len(todo)))

    async def _store(self, model: str, ids: list[int], vectors: list[Any], n: int) -> None:
        async with self.pool.acquire() as conn:
            await store.update_embeddings(conn, model=model, ids=ids, vectors=vectors)
        self.embedded += n

    async def flush(self) -> None:
        """Wait for the batch being stored; its failure is raised here (its claims go
        stale and are released, then claimed again by a rescan)."""
        task, self._storing = self._storing, None
        if task is not None:
            await task
