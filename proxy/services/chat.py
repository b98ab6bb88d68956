"""ChatService: the only place a chat request's steps are sequenced.

1. take the session's place in this replica's queue: a ``Turn`` (``turn.py``) that owns it,
   and the session's lease, until the reply is stored;
2. guess the stored head and ingest the new messages after it, no connection held
   (``incoming.py``); connect, reconcile the resent history, ingest what the guess missed
   and load the window (``history.py``): its first statement takes the lease; while another
   replica's request (or a session API operation) holds it, the turn parks and tries again
   shortly. A client that leaves while its request waits ends it (``client_watch.py``);
3. compact when the window is under pressure (``cascade.pressure`` decides, ``pressure.py``
   acts);
4. plan the stages' needs, fulfil them, and assemble the prompt (pure, ``cascade.pipeline``);
   persist its marks (placeholders, trims) and events;
5. give the connection back, call upstream and relay the answer (``forward.py``), which
   ends the turn: no connection is held while the provider answers.

A stream's client hears keep-alive comments while any of it takes longer than the interval
(``prep_wait.py``). Budget accounting is ``budget.py``; the ``/compact`` command's answer is
``command.py``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import asyncpg
from starlette.responses import Response

from proxy.bus import EventBus
from proxy.cascade.phases import kept_text
from proxy.cascade.pipeline import (
    Assembled,
    StepInput,
    assemble,
    is_compact_command,
    plan_step,
    turn_start,
)
from proxy.cascade.redaction import patterns_of
from proxy.cascade.tokens import MemoCounter
from proxy.cascade.types import Message
from proxy.config import Config
from proxy.errors import ClientRequestError
from proxy.jsonio import TooDeep
from proxy.observe import note_step_events
from proxy.requestlog import note_session
from proxy.services import budget as budgets, incoming, toolloop
from proxy.services.budget import FixedTokens, reserved_output
from proxy.services.chaincache import ChainCache
from proxy.services.client_watch import pause
from proxy.services.command import answer_command
from proxy.services.compaction import CompactionResult, DurableSummarizer
from proxy.services.forward import Forwarder
from proxy.services.history import SessionState, load_window, reconcile_and_load
from proxy.services.ingestmemo import IngestMemo
from proxy.services.leases import Leases
from proxy.services.needs import fulfil
from proxy.services.pressure import PressureRelief, admitted, compaction_job
from proxy.services.request import ChatContext, Route, Step
from proxy.services.rescan import WindowRescan
from proxy.services.resent import ResentBodies
from proxy.services.session_locks import SessionLocks
from proxy.services.turn import Turn
from proxy.session_id import SessionKey
from proxy.settings import Settings
from proxy.stopping import StopClock
from proxy.store import writes
from proxy.store.db import unavailable_when_lost
from proxy.store.leases import SessionBusy, poll_delays
from proxy.upstream import Upstream

__all__ = ["ChatService", "ChatContext", "Route", "route", "reserved_output"]

log = logging.getLogger("cascade.chat")


def _all_new(state: SessionState) -> bool:
    """Whether this request stored (and so ingested) every message of the window."""
    first = state.head_len - state.appended
    return state.appended > 0 and min(state.positions, default=first) >= first


def route(cfg: Config, body: Mapping[str, Any]) -> Route:
    agent_name, agent = cfg.agent_for(body.get("model"))
    model = agent.model or str(body.get("model") or "")
    return Route(
        agent=agent_name,
        provider=cfg.providers[agent.provider],
        model=model,
        limits=cfg.model_limits(model),
        ctx=cfg.context_for(agent_name),
    )


def _turn_key(messages: Sequence[Message], hashes: Sequence[str], rt: Route) -> str:
    """The name of the request's turn (``cascade.phases``): its agent's, then the chain hash of
    the message that began it ("" before any user message); a turn's values are its agent's."""
    start = turn_start(messages, rt.ctx.observations.user_prefixes)
    return f"{rt.agent}:" + ("" if start is None else hashes[start])


def _kept(session: Mapping[str, Any], turn_key: str | None = None) -> Mapping[str, Any]:
    """The per-turn values the session keeps for this turn (any turn's: its last, with no
    ``turn_key``); none when it kept another turn's (or a text this version cannot read:
    the turn's stages then run again)."""
    text = session.get("turn_blocks")
    if turn_key is not None and session.get("turn_key") != turn_key or not isinstance(text, str):
        return {}
    try:
        kept = json.loads(text)
    except ValueError:
        return {}
    return kept if isinstance(kept, dict) else {}


class ChatService:
    def __init__(
        self,
        *,
        pool: asyncpg.Pool,
        upstream: Upstream,
        bus: EventBus,
        cost: Callable[[Message], int],
        settings: Settings,
        summarizer: DurableSummarizer,
        leases: Leases,
        stop: StopClock | None = None,
    ) -> None:
        self.summarizer = summarizer
        self.leases = leases
        self.pool = pool
        self.upstream = upstream
        self.bus = bus
        self.cost = cost
        self.settings = settings
        self.locks = SessionLocks()
        self.chains = ChainCache()
        self.ingested = IngestMemo()
        self.rescan = WindowRescan()  # a window stored before its agent's patterns changed
        self.fixed = FixedTokens(cost)
        self.bodies = ResentBodies()
        self.relief = PressureRelief(summarizer)
        self.forward = Forwarder(
            upstream=upstream, settings=settings, bus=bus, pool=pool, stop=stop
        )

    async def complete(
        self, cfg: Config, rt: Route, body: dict[str, Any], ctx: ChatContext
    ) -> Response:
        """Answer one chat request; ``rt`` is ``route(cfg, body)``, which the caller made
        already (the session id may depend on the agent). A stream's ``ctx.keepalive`` keeps
        its client alive meanwhile (``prep_wait.py``)."""
        if not rt.model:
            raise ClientRequestError("'model' is required: name the model to call", param="model")
        # CPU-bound and outside the lock: the chain over the whole resent history.
        key = ctx.key
        try:
            hashes = self.chains.chain(key, body["messages"])
        except TooDeep as exc:  # orjson reads 1024 levels; the proxy sends on 512
            raise ClientRequestError(
                f"a message {exc}: send one nested fewer levels", param="messages"
            ) from None
        if ctx.derived:  # a guess queues only behind its own conversation, else takes a lane
            key, ctx = self._lane(key, ctx, hashes)
        await self.locks.acquire(key, ctx.client, sent=(len(hashes), hashes[-1]))
        turn = Turn(
            key,
            pool=self.pool,
            locks=self.locks,
            leases=self.leases,
            chains=self.chains,
            bus=self.bus,
            acquire_timeout=self.settings.pool_timeout_seconds,
        )
        with unavailable_when_lost():  # a connection lost before the answer: a 503
            try:
                turn.step = step = await self._begin(turn, cfg, rt, body, ctx, hashes)
                await turn.park()  # the lease keeps the session; no connection while waiting
            except BaseException:
                self.chains.set_head(key, None)
                await turn.abort()
                raise
            self.chains.set_head(key, (step.state.head_len, step.state.head_hash))
            if step.command is not None:
                return await answer_command(turn)
            if step.stream:
                return await self.forward.stream(turn)
            return await self.forward.nonstream(turn)

    async def _begin(
        self,
        turn: Turn,
        cfg: Config,
        rt: Route,
        body: dict[str, Any],
        ctx: ChatContext,
        hashes: list[str],
    ) -> Step:
        """Prepare the step, the history read before each try connects (issue 24); between
        tries at a held lease, connection pooled, wait for its release or the next poll."""
        delays, count = poll_delays(), MemoCounter(self.cost)
        with self.bus.wakeups.watch(*turn.key) as wake:
            while True:
                if ctx.admit is not None:  # a reload while it waited may have revoked the key
                    ctx = replace(ctx, agents=ctx.admit())
                guess = self.chains.head(turn.key)
                got = incoming.read(body["messages"], hashes, rt.ctx, count, guess, self.ingested)
                await turn.connect()
                try:
                    return await self._prepare(turn, cfg, rt, body, ctx, got, count)
                except SessionBusy:
                    self.chains.set_head(turn.key, None)  # another replica moves the head
                    await turn.park()
                    await pause(ctx.client, next(delays), wake=wake)  # a client that leaves ends it

    def _lane(
        self, key: SessionKey, ctx: ChatContext, hashes: list[str]
    ) -> tuple[SessionKey, ChatContext]:
        """The derived session's lane this request takes (``SessionLocks.lane``), named in
        the response's X-Session-Id so the client can pin it."""
        lane = SessionKey(*self.locks.lane(key, hashes, self.chains.head))
        if lane == key:
            return key, ctx
        note_session(lane.session_id)
        return lane, replace(ctx, session_id=lane.session_id)

    async def _prepare(
        self,
        turn: Turn,
        cfg: Config,
        rt: Route,
        body: dict[str, Any],
        ctx: ChatContext,
        got: incoming.Incoming,
        count: MemoCounter,
    ) -> Step:
        key, hashes = turn.key, got.hashes
        state = await reconcile_and_load(
            turn.conn,
            key,
            got,
            agent=rt.agent,
            model=rt.model,
            ctx=rt.ctx,
            count=count,
            stamp=lambda events: self.bus.split(ctx.tenant, ctx.session_id, events)[0],
            hold=turn.hold,  # a new session's messages: stored by the turn (history.py)
            # Else the rest is CPU (the window, the assembly) and now and then a statement that
            # connects again: meanwhile the connection serves other sessions' statements.
            park=turn.park,
            owner=turn.owner,
            ttl=turn.ttl,
            memo=self.ingested,
            agents=ctx.agents,  # checked again where the lease is taken (history.py)
        )
        tools, schema = self.fixed.of(rt, body)
        fixed = tools + schema  # what the budget must leave for, whether offered or not
        command = None
        if is_compact_command(body["messages"]):
            job = compaction_job(cfg, rt, ctx, "command")
            command = await self.relief.compact_now(turn, job, ctx.client, admitted(ctx, rt.agent))
            command = command or CompactionResult(None, None, 0, 0, 0, "nothing to fold")
            state = await load_window(turn.conn, key, state, count)
        else:
            state = await self.relief.maybe_compact(turn, cfg, rt, body, ctx, state, count, fixed)
        turn_key = _turn_key(body["messages"], hashes, rt)
        kept = _kept(state.session, turn_key)
        inp = StepInput(
            window=self.rescan.window(
                key,
                state.window,
                patterns_of(rt.ctx.redaction),
                positions=state.positions,
                fresh=_all_new(state),
                born=state.session.get("created_at"),
            ),
            system_count=state.system_count,
            summary=state.summary,
            count=count,
            budget=budgets.budget(state, rt, body, fixed),
            ctx=rt.ctx,
            unspillable=state.redacted_ids,
            ratio=state.session["calibration"],
            kept=kept,
            positions=state.positions,
            previous={} if kept else _kept(state.session),  # read at a turn's start only
        )
        needs = plan_step(inp) if command is None else {}  # a command's prompt reaches no model
        answers: dict[str, Any] = {}
        if needs:  # a stage's store reads (the memory facts, retrieval's search)
            await turn.connect()
            answers = await fulfil(needs, conn=turn.conn, key=key)
        # refused (ContextLengthExceeded): the turn's abort stores what the client sent
        assembled = toolloop.fit_offer(assemble(inp, answers=answers or None), body, rt.ctx)
        overhead = tools + (schema if assembled.offer_read_tool else 0)
        sent = assembled.tokens + overhead  # the prompt as sent: what the nudge measures
        if command is None and (
            nudge := await self.relief.handoff(turn, rt, body, ctx, state, sent)
        ):
            assembled = replace(assembled, events=(*assembled.events, nudge))
        reclaimed = await self._persist_step(turn, ctx, state, assembled, count)
        so = body.get("stream_options")
        wants_usage = isinstance(so, dict) and bool(so.get("include_usage"))
        return Step(
            ctx,
            rt,
            state,
            assembled,
            body,
            bool(body.get("stream")),
            wants_usage,
            count,
            command,
            reclaimed=reclaimed,
            overhead=overhead,
            turn=None if assembled.kept is None else (turn_key, kept_text(assembled.kept)),
        )

    async def _persist_step(
        self,
        turn: Turn,
        ctx: ChatContext,
        state: SessionState,
        asm: Assembled,
        count: MemoCounter,
    ) -> int:
        """Write the step's marks and events (eviction/trimming; ingestion's went out with
        the messages) as one value in one round trip; returns the tokens eviction reclaimed.

        An evicted result needs no spill: its row keeps its body beside the placeholder
        (``store.writes.persist_step``), and read_tool_output pages it from there. A new
        session's held-back messages go in with all of it (``Turn.write_step``).
        """
        evicted = [
            (state.positions[i], dict(asm.window[i]), count.one(asm.window[i])) for i in asm.evicted
        ]
        reclaimed = sum(count.one(state.window[i]) - count.one(asm.window[i]) for i in asm.cleared)
        note_step_events((*state.events, *asm.events))  # tokens reclaimed, by stage
        persisted, transient = self.bus.split(ctx.tenant, ctx.session_id, asm.events)
        marks = writes.StepWrite(
            evicted=evicted,
            trimmed=[state.positions[i] for i in asm.trimmed],
            reclaimed=reclaimed,
            events=persisted,
            transient=transient,
        )
        await turn.write_step(marks)
        return reclaimed
