"""Cascade's own session API (curl-friendly JSON)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, Request

from proxy.api.deps import (
    API_BODY_LIMIT,
    BIGINT_MAX,
    BusDep,
    ConfigDep,
    KeyAgentsDep,
    LocksDep,
    PoolDep,
    SessionIdDep,
    SummarizerDep,
    TenantDep,
    read_and_recheck_reach,
    read_json_body,
    upstream_headers,
)
from proxy.api.query import BLANK_IS_UNSET, CURSOR, INTEGER, cursor_place
from proxy.api.session_schemas import BAD_CURSOR, ok
from proxy.auth import key_in_force
from proxy.cascade.types import SESSION_RESET
from proxy.errors import INVALID_TYPE, ClientRequestError, PermissionDenied
from proxy.listing import read_session_cursor
from proxy.services import session_changes, sessions as svc
from proxy.services.client_watch import ClientWatch
from proxy.store.steps import AgentRefused

log = logging.getLogger("cascade.sessions")

__all__ = ["router"]

router = APIRouter(prefix="/v1/sessions")


def _admit(request: Request) -> Callable[[], tuple[str, ...] | None]:
    """Whether the operation's key still lets it in as it takes the session, asked of the
    config in force then (``auth.key_in_force``): a reload may revoke it while it waits."""
    return lambda: key_in_force(request.scope, request.state.config.current)


@contextlib.contextmanager
def _held_to(agents: tuple[str, ...] | None, session_id: str) -> Iterator[None]:
    """A branch, reset, delete or compact of a key limited to ``agents`` that found the
    session moved to another agent while it waited for it (``store.sessions``, the
    compaction's claim): the 403 the key's check as the request arrived gives
    (``api.deps.reach_session``), nothing done."""
    try:
        yield
    except AgentRefused as refused:
        raise PermissionDenied.agent(agents or (), refused.agent, session_id=session_id) from None


_Q = (
    "Only the sessions whose id, agent or model contains this text, case aside (no "
    "wildcards); empty is unset, every session."
)


_LIST_400 = (
    "`limit`, `offset` or `q` out of range, a `q` holding a NUL (`param` `q`), or " + BAD_CURSOR
)


@router.get("", response_model=None, responses=ok("list", e400=_LIST_400))
async def list_sessions(
    pool: PoolDep,
    tenant: TenantDep,
    cfg: ConfigDep,
    agents: KeyAgentsDep,
    limit: Annotated[int, Query(ge=1, le=1000), INTEGER] = 100,
    offset: Annotated[int, Query(ge=0, le=BIGINT_MAX), INTEGER] = 0,
    q: Annotated[str, Query(max_length=1000, description=_Q), BLANK_IS_UNSET] = "",
    cursor: Annotated[str, Query(max_length=1000, description=CURSOR), BLANK_IS_UNSET] = "",
) -> dict[str, Any]:
    """A page of the key's sessions; with ``q``, only those whose id, agent or model holds
    it (case aside), filtered before the page is cut, so a client that shows a page at a
    time still finds any session without reading them all. With ``cursor``, the page after
    the one that gave it, by place rather than by count (``listing.session_cursor``)."""
    if "\x00" in q:  # no id or agent holds one, and PostgreSQL's text refuses it
        raise ClientRequestError("'q' holds a NUL character, which no session id holds", param="q")
    after = cursor_place(cursor, offset, read_session_cursor)
    return await svc.list_sessions(
        pool,
        cfg,
        tenant=tenant,
        limit=limit,
        offset=offset,
        agents=agents,
        containing=q or None,
        after=after,
    )


@router.get("/{session_id}", response_model=None, responses=ok("show"))
async def show_session(
    session_id: SessionIdDep,
    request: Request,
    pool: PoolDep,
    tenant: TenantDep,
    cfg: ConfigDep,
    agents: KeyAgentsDep,
) -> dict[str, Any]:
    view = svc.show_session(pool, cfg, tenant=tenant, session_id=session_id, agents=agents)
    return await read_and_recheck_reach(request, pool, tenant, session_id, view)


@router.get("/{session_id}/messages", response_model=None, responses=ok("messages"))
async def list_messages(
    session_id: SessionIdDep,
    request: Request,
    pool: PoolDep,
    tenant: TenantDep,
    include_superseded: Annotated[bool, BLANK_IS_UNSET] = False,
    limit: Annotated[int, Query(ge=1, le=10000), INTEGER] = 1000,
    offset: Annotated[int, Query(ge=0, le=BIGINT_MAX), INTEGER] = 0,
    form: Annotated[Literal["prompt", "sent"], BLANK_IS_UNSET] = "prompt",
) -> dict[str, Any]:
    page = svc.list_messages(
        pool,
        tenant=tenant,
        session_id=session_id,
        include_superseded=include_superseded,
        limit=limit,
        offset=offset,
        sent_form=form == "sent",
    )
    return await read_and_recheck_reach(request, pool, tenant, session_id, page)


_BRANCH_BODY = {
    "required": False,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "properties": {
                    "id": {
                        "type": "string",
                        "description": "The new session's id; without it, one is made.",
                    }
                },
            }
        }
    },
}


@router.post(
    "/{session_id}/branch",
    response_model=None,
    responses=ok("branch"),
    openapi_extra={"requestBody": _BRANCH_BODY},
)
async def branch_session(
    session_id: SessionIdDep,
    request: Request,
    pool: PoolDep,
    locks: LocksDep,
    bus: BusDep,
    tenant: TenantDep,
    agents: KeyAgentsDep,
) -> dict[str, Any]:
    body = await read_json_body(request, API_BODY_LIMIT, optional=True)
    new_id = body.get("id")
    if new_id is not None and not isinstance(new_id, str):
        raise ClientRequestError(
            "'id' must be a string: the new session's id", param="id", code=INVALID_TYPE
        )
    # the client is watched only while it waits
    with ClientWatch(request.receive) as client, _held_to(agents, session_id):
        return await session_changes.branch_session(
            pool,
            locks,
            tenant=tenant,
            session_id=session_id,
            new_id=new_id,
            client=client,
            wakeups=bus.wakeups,
            agents=agents,
            admit=_admit(request),
        )


@router.post("/{session_id}/compact", response_model=None, responses=ok("compact"))
async def compact_session(
    session_id: SessionIdDep,
    request: Request,
    pool: PoolDep,
    cfg: ConfigDep,
    locks: LocksDep,
    bus: BusDep,
    tenant: TenantDep,
    summarizer: SummarizerDep,
    agents: KeyAgentsDep,
) -> dict[str, Any]:
    # the client is watched only while it waits for the request in flight
    with ClientWatch(request.receive) as client, _held_to(agents, session_id):
        return await session_changes.compact_session(
            pool,
            summarizer,
            cfg,
            locks,
            tenant=tenant,
            session_id=session_id,
            headers=upstream_headers(request, cfg),
            client=client,
            wakeups=bus.wakeups,
            agents=agents,
            admit=_admit(request),
        )


@router.post("/{session_id}/reset", response_model=None, responses=ok("reset"))
async def reset_session(
    session_id: SessionIdDep,
    request: Request,
    pool: PoolDep,
    locks: LocksDep,
    bus: BusDep,
    tenant: TenantDep,
    agents: KeyAgentsDep,
) -> dict[str, Any]:
    # the client is watched only while it waits
    with ClientWatch(request.receive) as client, _held_to(agents, session_id):
        out = await session_changes.reset_session(
            pool,
            locks,
            tenant=tenant,
            session_id=session_id,
            client=client,
            wakeups=bus.wakeups,
            agents=agents,
            admit=_admit(request),
        )
    # the session's open streams (a console showing the history just forgotten) are told;
    # the reset is done either way, so a failed notice is logged, not answered as a failure
    try:
        await bus.publish(pool, tenant=tenant, session_id=session_id, name=SESSION_RESET, data={})
    except Exception as exc:  # noqa: BLE001 - any cause: the answer stays the reset's
        log.warning(
            "session %s was reset; its open event streams were not told: %s",
            session_id,
            type(exc).__name__,
        )
    return out


@router.delete("/{session_id}", response_model=None, responses=ok("delete"))
async def delete_session(
    session_id: SessionIdDep,
    request: Request,
    pool: PoolDep,
    locks: LocksDep,
    bus: BusDep,
    tenant: TenantDep,
    agents: KeyAgentsDep,
) -> dict[str, Any]:
    # the client is watched only while it waits
    with ClientWatch(request.receive) as client, _held_to(agents, session_id):
        return await session_changes.delete_session(
            pool,
            locks,
            tenant=tenant,
            session_id=session_id,
            client=client,
            wakeups=bus.wakeups,
            agents=agents,
            admit=_admit(request),
        )


# ``:path``: an id can hold ``/``, and the server decodes ``%2F`` before routing.
@router.get(
    "/{session_id}/tool-outputs/{tool_call_id:path}",
    response_model=None,
    responses=ok("tool_output"),
)
async def tool_output(
    session_id: SessionIdDep,
    request: Request,
    tool_call_id: str,
    pool: PoolDep,
    tenant: TenantDep,
    cfg: ConfigDep,
    offset: Annotated[int, Query(ge=0, le=BIGINT_MAX), INTEGER] = 0,
    limit: Annotated[int | None, Query(ge=1), INTEGER] = None,
    grep: str | None = None,
) -> dict[str, Any]:
    if not tool_call_id:  # a trailing slash, no id: no route, as ``/v1/models/`` is none
        raise HTTPException(404)
    page = svc.tool_output(
        pool,
        cfg,
        tenant=tenant,
        session_id=session_id,
        tool_call_id=tool_call_id,
        offset=offset,
        limit=limit,
        grep=grep,
    )
    return await read_and_recheck_reach(request, pool, tenant, session_id, page)
