"""ChatService: the only place a chat request's steps are sequenced.

1. take the session's advisory lock (held until the reply is stored);
2. reconcile the resent history, ingest new messages, load the window;
3. assemble the prompt (pure), persist its intents (placeholders, trims, events);
4. call upstream, relay the answer (answering read_tool_output internally);
5. store the reply and the provider's real prompt size, publish ``context.usage``.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import anyio
import asyncpg
from starlette.background import BackgroundTask
from starlette.responses import Response, StreamingResponse

from proxy import sse
from proxy.bus import EventBus
from proxy.cascade.pipeline import (
    READ_TOOL_SCHEMA,
    Assembled,
    StepInput,
    assemble,
    compact_reply_text,
    is_compact_command,
)
from proxy.cascade.tokens import MemoCounter, calibrate, effective_input_tokens
from proxy.cascade.types import (
    MESSAGE_APPENDED,
    USAGE,
    Budget,
    ContextLengthExceeded,
    Event,
    Message,
    TokenCounter,
)
from proxy.config import Config, ModelConfig
from proxy.errors import ClientRequestError
from proxy.history import chain_hash
from proxy.jsonio import dumps
from proxy.requestlog import note_session
from proxy.services.chaincache import ChainCache
from proxy.services.compaction import CompactionResult, DurableSummarizer, job_for
from proxy.services.forward import ChatContext, Forwarder, Route, Step
from proxy.services.history import SessionState, load_window, reconcile_and_load, store_unstored
from proxy.services.resent import ResentBodies
from proxy.services.session_locks import SessionLocks
from proxy.settings import Settings
from proxy.store import messages as msgs, sessions
from proxy.store.db import acquire, mark_unlocked, unavailable_when_lost
from proxy.upstream import Upstream

__all__ = ["ChatService", "ChatContext", "Route"]

log = logging.getLogger("cascade.chat")
_JSON = "application/json"


def route(cfg: Config, body: Mapping[str, Any]) -> Route:
    agent_name, agent = cfg.agent_for(body.get("model"))
    model = agent.model or str(body.get("model") or "")
    return Route(
        agent=agent_name, provider=cfg.providers[agent.provider], model=model,
        limits=cfg.model_limits(model), ctx=cfg.context_for(agent_name),
    )


def reserved_output(body: Mapping[str, Any], limits: ModelConfig) -> int:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return limits.reserved_output


class ChatService:
    def __init__(
        self, *, pool: asyncpg.Pool, upstream: Upstream, bus: EventBus,
        cost: Callable[[Message], int], settings: Settings, summarizer: DurableSummarizer,
    ) -> None:
        self.summarizer = summarizer
        self.pool = pool
        self.upstream = upstream
        self.bus = bus
        self.cost = cost
        self.settings = settings
        self.locks = SessionLocks()
        self._holding: dict[Any, tuple[str, str]] = {}  # connection -> session it is queued for
        self.chains = ChainCache()
        self._tools_cost: dict[bytes, int] = {}  # a tools array's tokens, by its JSON
        self._schema_tokens = self._json_tokens(dumps([READ_TOOL_SCHEMA]))
        self.bodies = ResentBodies()
        self.forward = Forwarder(
            upstream=upstream, settings=settings, finish=self._finalize,
            release=lambda step: self._release(step.conn, step.ctx),
        )

    async def complete(
        self, cfg: Config, rt: Route, body: dict[str, Any], ctx: ChatContext
    ) -> Response:
        """Answer one chat request; ``rt`` is ``route(cfg, body)``, which the caller made
        already (the session id may depend on the agent)."""
        if not rt.model:
            raise ClientRequestError("'model' is required: name the model to call", param="model")
        # CPU-bound and outside the lock: the chain over the whole resent history.
        key = (ctx.tenant, ctx.session_id)
        hashes = self.chains.chain(key, body["messages"])
        if ctx.derived:  # a guessed session never queues: a busy one sends it to a lane
            key, ctx = self._lane(key, ctx, hashes)
        await self.locks.acquire(key)  # this session's earlier requests go first
        try:
            conn = await acquire(self.pool, self.settings.pool_timeout_seconds)
        except BaseException:
            self.locks.release(key)
            raise
        self._holding[conn] = key
        with unavailable_when_lost():  # a connection lost before the answer: a 503
            try:
                step = await self._prepare(conn, cfg, rt, body, ctx, hashes,
                                           self.chains.head(key))
            except BaseException:
                self.chains.set_head(key, None)
                await self._release(conn, ctx)
                raise
            self.chains.set_head(key, (step.state.head_len, step.state.head_hash))
            if step.command is not None:
                return await self._answer_command(step)
            if step.stream:
                return await self.forward.stream(step)
            return await self.forward.nonstream(step)

    def _lane(
        self, key: tuple[str, str], ctx: ChatContext, hashes: list[str]
    ) -> tuple[tuple[str, str], ChatContext]:
        """The derived session's lane this request takes (``SessionLocks.lane``), named in
        the response's X-Session-Id so the client can pin it."""
        lane = self.locks.lane(key, hashes, self.chains.head)
        if lane == key:
            return key, ctx
        note_session(lane[1])
        return lane, dataclasses.replace(ctx, session_id=lane[1])

    def _json_tokens(self, tools_json: bytes) -> int:
        return self.cost({"role": "system", "content": tools_json.decode()})

    def _fixed_tokens(self, rt: Route, body: Mapping[str, Any]) -> tuple[int, int]:
        """Tokens a prompt carries besides its messages: the request's ``tools`` (agents
        send the same array every turn, so its count is cached), and read_tool_output's
        schema when the proxy may offer it. Providers count both against the window."""
        tools = body.get("tools")
        cost = 0
        if isinstance(tools, list) and tools:
            key = dumps(tools)
            cost = self._tools_cost.get(key, -1)
            if cost < 0:
                if len(self._tools_cost) >= 256:
                    self._tools_cost.clear()
                cost = self._tools_cost[key] = self._json_tokens(key)
        return cost, self._schema_tokens if rt.ctx.tool_output.persist_raw else 0

    async def _release(self, conn: Any, ctx: ChatContext) -> None:
        """Give the connection back, then the session's place in this replica's queue;
        unless ``_finalize`` released the session lock, the pool's reset does
        (``store.db._reset``), so the next request never finds it still held."""
        key = self._holding.pop(conn, None)
        try:
            await self.pool.release(conn)  # asyncpg shields the release from cancellation
        finally:
            if key is not None:
                self.locks.release(key)

    async def _prepare(
        self, conn: Any, cfg: Config, rt: Route, body: dict[str, Any], ctx: ChatContext,
        hashes: list[str], guess: tuple[int, str | None] | None,
    ) -> Step:
        count = MemoCounter(self.cost)
        state = await reconcile_and_load(
            conn, tenant=ctx.tenant, session_id=ctx.session_id, agent=rt.agent,
            model=rt.model, messages=body["messages"], hashes=hashes, ctx=rt.ctx, count=count,
            stamp=lambda events: self.bus.split(ctx.tenant, ctx.session_id, events)[0],
            guess=guess, hold_new=True,
        )
        tools, schema = self._fixed_tokens(rt, body)
        fixed = tools + schema  # what the budget must leave for, whether offered or not
        command = None
        if is_compact_command(body["messages"]):
            state = await store_unstored(conn, tenant=ctx.tenant, session_id=ctx.session_id,
                                         state=state)
            command = await self.summarizer.compact_now(self._job(cfg, rt, ctx, "command"), conn)
            command = command or CompactionResult(None, None, 0, 0, 0, "nothing to fold")
            state = await load_window(
                conn, tenant=ctx.tenant, session_id=ctx.session_id, state=state, count=count
            )
        else:
            state = await self._maybe_compact(conn, cfg, rt, body, ctx, state, count, fixed)
        try:
            assembled = self._assemble(rt, body, state, count, fixed)
        except ContextLengthExceeded:  # refused; what the client sent is stored all the same
            await store_unstored(conn, tenant=ctx.tenant, session_id=ctx.session_id, state=state)
            raise
        reclaimed = await self._persist_step(conn, ctx, state, assembled, count)
        stream = bool(body.get("stream"))
        so = body.get("stream_options")
        wants_usage = isinstance(so, dict) and bool(so.get("include_usage"))
        return Step(ctx, rt, state, assembled, body, stream, wants_usage, conn, count, command,
                    reclaimed=reclaimed,
                    overhead=tools + (schema if assembled.offer_read_tool else 0))

    def _job(self, cfg: Config, rt: Route, ctx: ChatContext, trigger: str) -> Any:
        return job_for(cfg, tenant=ctx.tenant, session_id=ctx.session_id, agent=rt.agent,
                       model=rt.model, headers=ctx.headers, trigger=trigger)

    @staticmethod
    def _occupancy(state: SessionState, count: TokenCounter, fixed: int) -> int:
        """Occupancy of the prompt this state would send: the window with its summary folded,
        and the ``fixed`` tokens of its tools.

        ``last_estimate`` counted the folded summary and the tools, so the current estimate
        must too, or every step after a compaction under-reports occupancy by the summary's
        size, and the tools would count only through the calibration ratio (capped at 2).
        """
        row = state.session
        return effective_input_tokens(
            state.estimate + fixed, ratio=row["calibration"],
            last_real=row["last_prompt_tokens"], last_estimate=row["last_estimate"],
        )

    async def _maybe_compact(
        self, conn: Any, cfg: Config, rt: Route, body: Mapping[str, Any], ctx: ChatContext,
        state: SessionState, count: MemoCounter, fixed: int,
    ) -> SessionState:
        """Soft: start a background compaction. Hard or overflowing: wait, then compact now.

        The hard path first waits for the compaction already in flight and re-measures, so a
        request only compacts again when that one did not bring it under the threshold.
        """
        s = rt.ctx.summarize
        if not s.enabled:
            return state
        limit = rt.limits.context_limit
        room = limit - reserved_output(body, rt.limits) - fixed

        def pressure(st: SessionState) -> tuple[float, bool]:
            return self._occupancy(st, count, fixed) / limit, st.estimate > room

        fraction, overflowing = pressure(state)
        if fraction >= min(s.soft_fraction, s.hard_fraction) or overflowing:
            # a compaction reads the store: what a new session holds back goes in first
            state = await store_unstored(conn, tenant=ctx.tenant, session_id=ctx.session_id,
                                         state=state)
        if fraction >= s.hard_fraction or overflowing:
            await self.summarizer.wait_inflight(ctx.tenant, ctx.session_id)
            state = await load_window(conn, tenant=ctx.tenant, session_id=ctx.session_id,
                                      state=state, count=count)
            fraction, overflowing = pressure(state)
            if fraction >= s.hard_fraction or overflowing:
                trigger = "overflow" if overflowing else "hard"
                await self.summarizer.compact_now(self._job(cfg, rt, ctx, trigger), conn)
                state = await load_window(conn, tenant=ctx.tenant, session_id=ctx.session_id,
                                          state=state, count=count)
        elif fraction >= s.soft_fraction:
            job = self._job(cfg, rt, ctx, "soft")
            if s.background:
                self.summarizer.start_background(job)
            else:
                await self.summarizer.compact_now(job, conn)
                state = await load_window(conn, tenant=ctx.tenant, session_id=ctx.session_id,
                                          state=state, count=count)
        return state

    async def _answer_command(self, step: Step) -> Response:
        """Answer ``/compact`` ourselves: the exchange never reaches the upstream model."""
        assert step.command is not None
        c = step.command
        text = compact_reply_text(version=c.version, folded=c.folded,
                                  tokens_before=c.tokens_before, tokens_after=c.tokens_after,
                                  reason=c.reason)
        reply = {"role": "assistant", "content": text}
        completion = {
            "id": f"chatcmpl-cascade-{secrets.token_hex(8)}", "object": "chat.completion",
            "created": int(time.time()), "model": step.route.model,
            "choices": [{"index": 0, "message": reply, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }
        if not step.stream:
            task = BackgroundTask(self._finalize, step, reply, None)
            return Response(dumps(completion), 200, media_type=_JSON, background=task)

        async def body() -> AsyncIterator[bytes]:
            try:
                for frame in sse.completion_to_chunks(
                    completion, include_usage=step.client_wants_usage
                ):
                    yield frame
            finally:
                with anyio.CancelScope(shield=True):
                    await self._finalize(step, reply, None)

        return StreamingResponse(body(), media_type="text/event-stream")

    def _assemble(
        self, rt: Route, body: Mapping[str, Any], state: SessionState, count: MemoCounter,
        fixed: int,
    ) -> Assembled:
        # The tools are not messages the stages can shed: the budget sets their tokens
        # aside beside the output's.
        budget = Budget(
            limit=rt.limits.context_limit,
            reserved_output=reserved_output(body, rt.limits) + fixed,
            occupancy=self._occupancy(state, count, fixed),
        )
        return assemble(StepInput(
            window=state.window, system_count=state.system_count, summary=state.summary,
            count=count, budget=budget, ctx=rt.ctx, unspillable=state.redacted_ids,
            ratio=state.session["calibration"],
        ))

    async def _persist_step(
        self, conn: Any, ctx: ChatContext, state: SessionState, asm: Assembled,
        count: MemoCounter,
    ) -> int:
        """Persist the step's intents and its events (eviction/trimming; ingestion's went out
        with the messages) in one round trip; returns the tokens its eviction reclaimed.

        An evicted result needs no spill: its row keeps its body beside the placeholder
        (``store.messages.persist_step``), and read_tool_output pages it from there. A new
        session's held-back messages go in with all of it (``store.messages.append_step``).
        """
        evicted = [
            (state.positions[i], dict(asm.window[i]), count.one(asm.window[i]))
            for i in asm.evicted
        ]
        reclaimed = sum(count.one(state.window[i]) - count.one(asm.window[i]) for i in asm.evicted)
        trimmed = [state.positions[i] for i in asm.trimmed]
        persisted, transient = self.bus.split(ctx.tenant, ctx.session_id, asm.events)
        held = state.unstored
        if held is not None:
            await msgs.append_step(
                conn, tenant=ctx.tenant, session_id=ctx.session_id, rows=held.rows,
                raw=held.raw, head_len=state.head_len, head_hash=state.head_hash,
                system_count=state.system_count, evicted=evicted, trimmed=trimmed,
                reclaimed=reclaimed,
                events=([*held.events[0], *persisted[0]], [*held.events[1], *persisted[1]]),
                transient=transient,
            )
            return reclaimed
        await msgs.persist_step(
            conn, tenant=ctx.tenant, session_id=ctx.session_id,
            evicted=evicted, trimmed=trimmed, reclaimed=reclaimed, events=persisted,
            transient=transient,
        )
        return reclaimed

    # -- after the answer ----------------------------------------------------------------

    async def _finalize(
        self, step: Step, reply: Mapping[str, Any] | None, prompt_tokens: int | None
    ) -> None:
        """Store the reply, the real prompt size and ``context.usage``; release the session.

        One statement after the answer (reply + head + usage + events, the events table's
        trigger NOTIFYs, and the session lock's release), so returning the connection to
        the pool costs no round trip.
        """
        ctx, conn, state = step.ctx, step.conn, step.state
        key = (ctx.tenant, ctx.session_id)
        try:
            row = state.session
            estimate = step.assembled.tokens + step.overhead  # as the provider counts it
            ratio = row["calibration"]
            real = prompt_tokens if isinstance(prompt_tokens, int) and prompt_tokens > 0 else None
            if real is not None:
                ratio = calibrate(ratio, real=real, estimated=estimate)
            stored = None
            if reply:
                digest = chain_hash(state.head_hash or "", reply)
                stored = msgs.NewMessage(
                    pos=state.head_len, hash=digest, role="assistant", message=dict(reply),
                    tokens=step.count.one(reply), source="upstream",
                )
            limit = step.route.limits.context_limit
            used = real if real is not None else round(estimate * ratio)
            events = [Event(USAGE, {
                "prompt_tokens": real, "estimated_tokens": estimate, "occupancy": used,
                "limit": limit, "fraction": round(used / limit, 4) if limit else None,
                "calibration": round(ratio, 4), "model": step.route.model,
                "reclaimed_tokens": row["reclaimed_tokens"] + step.reclaimed,
            })]
            if stored is not None:
                events.insert(0, Event(MESSAGE_APPENDED, {
                    "from_pos": stored.pos, "count": 1, "superseded": 0, "source": "upstream",
                }))
            persisted, _ = self.bus.split(ctx.tenant, ctx.session_id, events)
            if stored is not None:
                # Before the statement, not after it: the client may send its next request
                # the moment it has this reply, and that request reads the guess at once.
                self.chains.set_head(key, (stored.pos + 1, stored.hash))
            if await msgs.record_step(
                conn, tenant=ctx.tenant, session_id=ctx.session_id, reply=stored,
                prompt_tokens=real, estimate=estimate, calibration=ratio, events=persisted,
                unlock=sessions.session_lock_key(ctx.tenant, ctx.session_id),
            ):
                mark_unlocked(conn)
        except Exception:
            self.chains.set_head(key, None)
            log.exception("could not record the reply of session %s", ctx.session_id)
        finally:
            await self._release(conn, ctx)
