"""What a step does about context pressure: the shell side of ``cascade.pressure`` and
``cascade.handoff``.

The core decides (``compaction_need``: none, soft or hard; ``handoff_step``: whether the step
carries a nudge); this runs what it decided. A soft need starts a background compaction; a
hard one waits for the compaction in flight, measures again and compacts now. While it waits
for another compaction or for the fast model the turn holds no pooled connection: the
session's lease keeps it the turn's. ``ChatService`` calls these between loading the window
and assembling the prompt.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from proxy.cascade.handoff import handoff_step
from proxy.cascade.pressure import backing_off, compaction_need
from proxy.cascade.tokens import MemoCounter
from proxy.cascade.types import Event
from proxy.config import Config
from proxy.errors import PermissionDenied
from proxy.services import budget as budgets
from proxy.services.client_watch import COMPACTION_WAITING, ClientWatch, watching
from proxy.services.compaction import CompactionResult, DurableSummarizer
from proxy.services.compaction_job import job_for
from proxy.services.history import SessionState, load_window
from proxy.services.request import ChatContext, Route
from proxy.services.turn import Turn
from proxy.store import sessions

__all__ = ["PressureRelief", "admitted", "compaction_job"]

_MEASURES = 3
"""How often a step over the hard threshold measures its window: once after the wait, and
again after each compaction another one's newer summary superseded; each of those needs a
summary stored meanwhile, so the bound only ends a step raced by compaction after
compaction."""


def compaction_job(
    cfg: Config, rt: Route, ctx: ChatContext, trigger: str, state: SessionState | None = None
) -> Any:
    """The compaction job for the request's session, named by what triggered it; with
    ``state``, the window its pressure was measured on (its summary's version)."""
    return job_for(
        cfg,
        tenant=ctx.tenant,
        session_id=ctx.session_id,
        agent=rt.agent,
        model=rt.model,
        headers=ctx.headers,
        trigger=trigger,
        summary_version=None if state is None else state.summary_version,
        query=ctx.query,
    )


def owed_due(due: object, now: datetime) -> bool:
    """Whether a session row's ``promotion_due`` (ISO text, as the row's JSON carries it)
    names a promotion owed and past its due time (``summaries.take_owed`` decides on the
    database's clock; this spares the statement while none is)."""
    if due is None:
        return False
    return (due if isinstance(due, datetime) else datetime.fromisoformat(str(due))) <= now


def admitted(ctx: ChatContext, agent: str) -> Callable[[], object] | None:
    """``ctx.admit`` held to the session's ``agent`` too: a key a reload limited to other
    agents while the chat waited is the 403 it gets as it takes the session, naming it."""
    admit, session_id = ctx.admit, ctx.session_id
    if admit is None:
        return None

    def check() -> None:
        agents = admit()
        if agents is not None and agent not in agents:
            raise PermissionDenied.agent(agents, agent, session_id=session_id)

    return check


@contextlib.contextmanager
def _waiting(client: ClientWatch | None, admit: Callable[[], object] | None) -> Iterator[None]:
    """A chat's wait for the compaction of its session in flight, which it began holding
    the session: its client leaving ends it, and a key a reload revoked meanwhile is
    refused once it is over (``auth.key_in_force``), before anything is sent for it."""
    with watching(client, COMPACTION_WAITING):
        yield
    if admit is not None:
        admit()


class PressureRelief:
    """Compaction and the handoff nudge of one step, through the replica's summarizer."""

    def __init__(self, summarizer: DurableSummarizer) -> None:
        self.summarizer = summarizer

    async def compact_now(
        self,
        turn: Turn,
        job: Any,
        client: ClientWatch | None = None,
        admit: Callable[[], object] | None = None,
    ) -> CompactionResult | None:
        """``compact_now`` holding no connection while it waits and the fast model answers;
        the session stays the turn's by its lease. With the request's ``client``, its
        waits for a compaction in flight end when the client leaves (``ClientDisconnected``),
        and none starts for a client already gone: run after it, the fast model is called,
        billed, for nobody, and the session stays held meanwhile. ``admit`` (``admitted``)
        is asked after each such wait, as ``POST /compact`` asks:
        a key a reload revoked meanwhile is the 401, nothing compacted for it."""
        guard = functools.partial(_waiting, client, admit)
        if client is not None:
            client.check(COMPACTION_WAITING)
        await turn.park()
        try:
            return await self.summarizer.compact_now(job, guard)
        finally:
            await turn.connect()

    async def maybe_compact(
        self,
        turn: Turn,
        cfg: Config,
        rt: Route,
        body: Mapping[str, Any],
        ctx: ChatContext,
        state: SessionState,
        count: MemoCounter,
        fixed: int,
    ) -> SessionState:
        """Do what ``cascade.pressure.compaction_need`` decides: start a background
        compaction (soft), or wait for the one in flight, measure again and compact now
        (hard, overflow). A hard compaction that held its claim only after another one (on
        another replica, or a ``/compact`` here) stored a newer summary folds nothing
        (``compaction_span.read_span``): the step rebuilds its window on that summary and
        measures again, and compacts only if still over (at most ``_MEASURES`` times; the
        overflow guard fits what is left). A soft need starts nothing while the session
        backs off after a failed compaction (``cascade.pressure.backing_off``, as the row
        read at the start of the request says; the claim checks it again on the database's
        clock). A row that says the session owes a memory promotion past its due time (a stop
        or a kill cut it) starts its takeover apart from the step (``Promotions.resume``)."""
        s, row, now = rt.ctx.summarize, state.session, datetime.now(UTC)
        if owed_due(row.get("promotion_due"), now):  # a stop or a kill cut its promotion
            self.summarizer.resume_owed(compaction_job(cfg, rt, ctx, "owed"))
        need = compaction_need(budgets.pressure(state, rt, body, fixed), s)
        if need is None:
            return state
        if need.trigger == "soft" and backing_off(
            row.get("compaction_owner"), row.get("compaction_expires"), now
        ):
            return state
        key, admit = ctx.key, admitted(ctx, rt.agent)
        if need.wait_first:
            await turn.park()
            try:
                with _waiting(ctx.client, admit):
                    await self.summarizer.wait_inflight(ctx.tenant, ctx.session_id)
            finally:
                await turn.connect()
            for _ in range(_MEASURES):
                state = await load_window(turn.conn, key, state, count)
                need = compaction_need(budgets.pressure(state, rt, body, fixed), s, waited=True)
                if need is None:
                    return state
                job = compaction_job(cfg, rt, ctx, need.trigger, state)
                result = await self.compact_now(turn, job, ctx.client, admit)
                if result is None or not result.superseded:
                    break
            state = await load_window(turn.conn, key, state, count)
        elif s.background:
            await turn.flush()  # the compaction reads the store (turn.py)
            self.summarizer.start_background(compaction_job(cfg, rt, ctx, need.trigger, state))
        else:
            job = compaction_job(cfg, rt, ctx, need.trigger, state)
            await self.compact_now(turn, job, ctx.client, admit)
            state = await load_window(turn.conn, key, state, count)
        return state

    async def handoff(
        self,
        turn: Turn,
        rt: Route,
        body: Mapping[str, Any],
        ctx: ChatContext,
        state: SessionState,
        sent: int,
    ) -> Event | None:
        """The handoff nudge of this step (``cascade.handoff``), measured on the prompt the
        step sends (``sent``: its estimate with the tools it carries), after any compaction,
        eviction and trimming; the session row's crossing flag is written when it flips."""
        above = bool(state.session.get("handoff_above"))
        out = handoff_step(
            budgets.sent_pressure(state, rt, body, sent),
            rt.ctx.handoff,
            above=above,
            summarized=state.summary is not None,
            compacting=self.summarizer.running(ctx.tenant, ctx.session_id),
        )
        if out.above != above:
            await turn.connect()
            await sessions.set_handoff_above(
                turn.conn, tenant=ctx.tenant, session_id=ctx.session_id, above=out.above
            )
        return out.event
