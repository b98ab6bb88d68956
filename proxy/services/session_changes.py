"""The session API's use cases that change a session: branch, reset, delete and compact.

Each one takes its turn on the session first: its place in this replica's queue, then the
session's lease, which a request in flight on another replica may hold. A client that leaves
while its operation waits ends it, nothing changed. Branch, reset and delete change the
session in their turn; compact gives its turn back before it runs through the replica's
summarizer (which waits for a compaction already running): it folds the reply of the
request it waited for, and requests on the session go on while the summariser answers.
Each one is scoped by tenant, as the reads are (``sessions.py``): another tenant's session
is a 404.
"""

from __future__ import annotations

import contextlib
import functools
import secrets
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Container,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any

import asyncpg

from proxy.config import Config
from proxy.errors import (
    ClientRequestError,
    CompactionFailed,
    NotFound,
    PermissionDenied,
    ServerBusy,
    SessionBusy,
)
from proxy.services.client_watch import OPERATION_WAITING, ClientWatch, pause, watching
from proxy.services.compaction import DurableSummarizer
from proxy.services.compaction_job import job_for
from proxy.services.lease_wakeups import LeaseWakeups
from proxy.services.session_locks import SessionLocks
from proxy.services.sessions import require_session
from proxy.session_id import validate_session_id
from proxy.store import sessions

__all__ = ["Admit", "branch_session", "compact_session", "delete_session", "reset_session"]

_COMPACTION_WAITING = "while its compaction waited for the one in flight; nothing was compacted"
"""Why a forced compaction ended when its client left as it waited for another one: run
after it, it would call the fast model, billed, for nobody."""

_REBUILDS = 3
"""How many times a forced compaction is built for a session that keeps moving to another
agent before it held the claim; past that it is a 409 ``session_busy``, nothing done."""

Admit = Callable[[], Sequence[str] | None]
"""Asks the config in force whether the operation's proxy key still lets it in, raising
``Unauthorized`` when not, and which agents it may use now (``auth.key_in_force``)."""


class _InForce(Container[str]):
    """The agents the operation's key may use as ``admit`` last answered (None: any): what
    the store holds the session's agent to under its row lock, so a reload that limits the
    key while the operation waits counts there too, where the session can no longer move."""

    def __init__(self, now: Sequence[str] | None) -> None:
        self.now = now

    def __contains__(self, agent: object) -> bool:
        return self.now is None or agent in self.now


@contextlib.asynccontextmanager
async def _turn(
    locks: SessionLocks,
    client: ClientWatch | None,
    wakeups: LeaseWakeups | None,
    tenant: str,
    session_id: str,
    admit: Admit | None = None,
    agents: Sequence[str] | None = None,
    conn: Any = None,
) -> AsyncIterator[tuple[sessions.Pause | None, Container[str] | None]]:
    """An operation's turn on a session: its place in this replica's queue (``locks``),
    then the pause between two tries at a lease another replica holds, which the store's
    ``_locked`` calls. The pause ends the operation when its client leaves and ends early
    when that replica frees the session (``wakeups``, registered from the first pause only);
    None without either: the store's plain sleep. ``admit`` (``auth.key_in_force``) is asked
    as the turn comes and after each pause: a key a reload revoked while the operation
    waited raises there, before the store changes anything, and one a reload limited to
    agents other than the session's (read on ``conn``) is the 403. Beside the pause it yields
    the agents the key may use (``agents``, the arrival's, without ``admit``; with it, those
    the key was last asked for, ``_InForce``), which the store holds the session's agent to
    under its row lock: it may move between the pause's read and the lock."""
    async with locks.turn((tenant, session_id), client, OPERATION_WAITING):
        if admit is not None:
            agents = admit()
        if client is None and wakeups is None and admit is None:
            yield None, agents
            return
        with wakeups.watch(tenant, session_id) if wakeups else contextlib.nullcontext() as wake:
            between = functools.partial(pause, client, wake=wake, why=OPERATION_WAITING)
            if admit is None:
                yield between, agents
                return

            held = _InForce(agents)

            async def admitted(seconds: float) -> None:
                await between(seconds)
                now, before = admit(), held.now
                held.now = now
                if now is None or now == before or conn is None:
                    return
                agent = await sessions.fetchval_agent(conn, tenant=tenant, session_id=session_id)
                if agent is not None and agent not in now:
                    raise PermissionDenied.agent(now, agent, session_id=session_id)

            yield admitted, held


async def _in_turn(
    change: Callable[..., Awaitable[bool]],
    conn: Any,
    locks: SessionLocks,
    tenant: str,
    session_id: str,
    client: ClientWatch | None,
    wakeups: LeaseWakeups | None,
    agents: Sequence[str] | None,
    admit: Admit | None,
) -> None:
    """The store's ``change`` of the session (reset or delete), made in its turn (``_turn``);
    NotFound when there was no session to change (one deleted while this waited included)."""
    async with _turn(locks, client, wakeups, tenant, session_id, admit, agents, conn) as (
        between,
        held,
    ):
        found = await change(conn, tenant=tenant, session_id=session_id, pause=between, agents=held)
    if not found:
        raise NotFound(f"no session {session_id!r} (for this API key)")


async def branch_session(
    conn: Any,
    locks: SessionLocks,
    *,
    tenant: str,
    session_id: str,
    new_id: str | None,
    client: ClientWatch | None = None,
    wakeups: LeaseWakeups | None = None,
    agents: Sequence[str] | None = None,
    admit: Admit | None = None,
) -> dict[str, Any]:
    """Copy the live history, raw outputs and summaries into an independent new session.

    Reset, delete and branch take their turn in this replica's queue for the session
    (``locks``), then wait for a request in flight on another replica (``store.sessions``).
    One whose ``client`` leaves during either wait ends there (``ClientDisconnected``),
    nothing changed: run later, a branch its client retried would find its target taken.
    ``wakeups`` ends a pause between tries when the other replica frees the session."""
    await require_session(conn, tenant, session_id)
    target = (
        validate_session_id(new_id, source="body 'id'", param="id")
        if new_id is not None
        else (f"{session_id[:100]}-branch-{secrets.token_hex(4)}")
    )
    taken = ClientRequestError(f"session {target!r} already exists; pick another id", param="id")
    if await sessions.fetchrow_session(conn, tenant=tenant, session_id=target):
        raise taken
    try:
        async with _turn(locks, client, wakeups, tenant, session_id, admit, agents, conn) as (
            between,
            held,
        ):
            copied = await sessions.copy_session(
                conn, tenant=tenant, source=session_id, target=target, pause=between, agents=held
            )
    except asyncpg.UniqueViolationError:  # made meanwhile: a concurrent branch or request
        raise taken from None
    if not copied:  # deleted while this waited its turn
        raise NotFound(f"no session {session_id!r} (for this API key)")
    return {"id": target, "object": "session", "parent_id": session_id}


async def reset_session(
    conn: Any,
    locks: SessionLocks,
    *,
    tenant: str,
    session_id: str,
    client: ClientWatch | None = None,
    wakeups: LeaseWakeups | None = None,
    agents: Sequence[str] | None = None,
    admit: Admit | None = None,
) -> dict[str, Any]:
    await require_session(conn, tenant, session_id)
    change = sessions.reset_session
    await _in_turn(change, conn, locks, tenant, session_id, client, wakeups, agents, admit)
    return {"id": session_id, "object": "session", "reset": True}


async def delete_session(
    conn: Any,
    locks: SessionLocks,
    *,
    tenant: str,
    session_id: str,
    client: ClientWatch | None = None,
    wakeups: LeaseWakeups | None = None,
    agents: Sequence[str] | None = None,
    admit: Admit | None = None,
) -> dict[str, Any]:
    change = sessions.delete_session
    await _in_turn(change, conn, locks, tenant, session_id, client, wakeups, agents, admit)
    return {"id": session_id, "object": "session", "deleted": True}


async def compact_session(
    conn: Any,
    summarizer: DurableSummarizer,
    cfg: Config,
    locks: SessionLocks,
    *,
    tenant: str,
    session_id: str,
    headers: Mapping[str, str],
    client: ClientWatch | None = None,
    wakeups: LeaseWakeups | None = None,
    agents: Sequence[str] | None = None,
    admit: Admit | None = None,
) -> dict[str, Any]:
    """Force a compaction now, regardless of thresholds (waits for one already running),
    with the session's agent's fast model. It first waits for the request in flight on the
    session, as reset, delete and branch do (``_turn``; its ``client`` leaving ends it,
    nothing compacted), so a compact sent the instant a reply arrives folds that reply, and
    gives its turn back before the summariser is called: the compaction holds its own claim,
    not the session's lease. Its client leaving while it then waits for a compaction in
    flight (here, or its claim on another replica) ends it too, nothing compacted; once the
    summariser is called it is not watched: the call is paid for, and the compaction
    completes and is stored for the session's next request (README, "Timing of writes"). A key
    limited to ``agents`` is held to them as it arrives (``api.deps.reach_session``), as it
    takes its turn, and again once the compaction holds its claim: one that waited while
    another key's request moved the session to another agent raises ``AgentRefused``,
    nothing compacted, as reset, delete and branch do. One that another request moved to an
    agent the key may use, before it held the claim, is built again for that agent (its fast
    model, its settings), nothing sent to the old agent's; one that moves before each of
    ``_REBUILDS`` tries is a 409 ``session_busy``, nothing compacted (an answer of
    ``compacted: false`` would read as nothing to fold)."""
    async with _turn(locks, client, wakeups, tenant, session_id, admit, agents, conn) as (
        between,
        held,
    ):
        await sessions.wait_turn(
            conn, tenant=tenant, session_id=session_id, pause=between, agents=held
        )
    agents = held.now if isinstance(held, _InForce) else agents

    @contextlib.contextmanager
    def guard() -> Iterator[None]:
        """Each wait for the compaction in flight: its client leaving ends it, and so does a
        key a reload revoked, or limited to other agents than the session's, meanwhile,
        asked once the wait is over."""
        with watching(client, _COMPACTION_WAITING):
            yield
        if admit is not None and (now := admit()) is not None and row["agent"] not in now:
            raise PermissionDenied.agent(now, row["agent"], session_id=session_id)

    for _ in range(_REBUILDS):
        row = await require_session(conn, tenant, session_id)
        job = job_for(
            cfg,
            tenant=tenant,
            session_id=session_id,
            agent=row["agent"],
            model=row["model"] or "",
            headers=headers,
            trigger="api",
            agents=None if agents is None else tuple(agents),
        )
        result = await summarizer.compact_now(job, guard)
        if result is None or result.moved_to is None:
            break
    else:
        raise SessionBusy(
            f"session {session_id!r} moved to another agent before each of {_REBUILDS} tries"
            " to compact it held its claim; nothing was compacted: try again"
        )
    if result is None:
        raise NotFound(f"no session {session_id!r} (for this API key)")
    if result.failed:  # a failure is not a success with compacted: false
        if result.busy:  # a 503 to retry: no fast model failed, and no later one is sure
            raise ServerBusy(f"the compaction was put off: {result.reason}; retry it shortly")
        raise CompactionFailed(f"the compaction failed: {result.reason}")
    return {
        "id": session_id,
        "object": "session.compaction",
        "version": result.version,
        "boundary": result.boundary,
        "folded": result.folded,
        "tokens_before": result.tokens_before,
        "tokens_after": result.tokens_after,
        "compacted": result.version is not None,
        "reason": result.reason or None,
    }
