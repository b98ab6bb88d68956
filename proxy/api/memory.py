"""The memory API: long-term facts per scope, and the suggestions memory promotion makes."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse
from starlette.convertors import StringConvertor, register_url_convertor

from proxy.api import memory_schemas as doc
from proxy.api.deps import (
    API_BODY_LIMIT,
    BIGINT_MAX,
    ConfigDep,
    PoolDep,
    TenantDep,
    read_json_body,
)
from proxy.api.query import BLANK_IS_UNSET, CURSOR, INTEGER, cursor_place
from proxy.auth import check_agent, key_agents, may_use_agent
from proxy.errors import INVALID_TYPE, MISSING, ClientRequestError, PermissionDenied
from proxy.listing import FACTS, SUGGESTIONS, read_row_cursor
from proxy.services import memory as svc, memory_suggestions as suggestions
from proxy.session_id import validate_session_id

__all__ = ["router"]

router = APIRouter(prefix="/v1/memory")


class _FactId(StringConvertor):
    """A fact id's path segment: any but ``suggestions``, which names the suggestions list,
    so a method the list does not take is its 405, whose ``Allow`` offers no DELETE (any
    other segment is checked as digits, a 400 naming ``fact_id``)."""

    regex = "(?!suggestions$)[^/]+"


register_url_convertor("fact_id", _FactId())


def _scope(request: Request, scope: Any, *, param: str | None = "scope") -> str:
    """The scope, checked against the key's agents: a key limited to some agents reads and
    writes only their scopes and global. The 403 names ``param``, the field the scope came
    from, as a 400 of the scope does (None: a stored fact's scope, which no field named).
    The log line leaves the agent out, as it leaves out any query or body value."""
    parsed = svc.parse_scope(scope)
    if parsed != svc.GLOBAL:
        try:
            check_agent(request.scope, parsed.removeprefix("agent:"))
        except PermissionDenied as denied:
            denied.param = param
            if param is not None:
                agents = ", ".join(key_agents(request.scope) or ())
                denied.log_message = f"this API key may not use the scope sent; it may use {agents}"
            raise
    return parsed


@router.get("", responses=doc.LIST)
async def list_facts(
    request: Request,
    pool: PoolDep,
    tenant: TenantDep,
    scope: Annotated[str, BLANK_IS_UNSET] = "global",
    limit: Annotated[int, Query(ge=1, le=1000), INTEGER] = 100,
    offset: Annotated[int, Query(ge=0, le=BIGINT_MAX), INTEGER] = 0,
    cursor: Annotated[str, Query(max_length=1000, description=CURSOR), BLANK_IS_UNSET] = "",
) -> dict[str, Any]:
    """A page of the scope's facts, oldest first (``limit``, ``offset`` or ``cursor``), as
    the other lists are paged: an ``auto`` scope grows with every compaction."""
    after = cursor_place(cursor, offset, functools.partial(read_row_cursor, FACTS)) or 0
    return await svc.list_facts(
        pool,
        tenant=tenant,
        scope=_scope(request, scope),
        may_use=None if key_agents(request.scope) is None else _uses(request),
        limit=limit,
        offset=offset,
        after=after,
    )


def _uses(request: Request) -> Callable[[str], bool]:
    """Whether the key may use an agent: a fact's source session is named to a key limited
    to some agents only when that session runs one of them (``svc.list_facts``)."""
    return lambda agent: may_use_agent(request.scope, agent)


@router.post("", status_code=201, responses=doc.ADD, openapi_extra={"requestBody": doc.FACT_BODY})
async def add_fact(
    request: Request, pool: PoolDep, cfg: ConfigDep, tenant: TenantDep
) -> JSONResponse:
    body = await read_json_body(request, API_BODY_LIMIT)
    text = body.get("text")
    if not isinstance(text, str):
        raise ClientRequestError(
            "'text' must be a string: the fact to remember",
            param="text",
            code=MISSING if text is None else INVALID_TYPE,
        )
    fact = await svc.add_fact(
        pool, cfg, tenant=tenant, scope=_scope(request, body.get("scope")), text=text
    )
    return JSONResponse(fact, status_code=201)


def _reaches(request: Request) -> Callable[[str, str], bool]:
    """Whether the key may see and answer a suggestion: its scope is checked as an add's,
    and its session's agent as the session's (a suggestion's facts are read from it, so a
    key limited to other agents may not answer one from a ``default`` session either). One
    it may not is left out of its list, and answering it is an unknown id's 404."""

    def reaches(scope: str, agent: str) -> bool:
        return may_use_agent(request.scope, agent) and (
            scope == svc.GLOBAL or may_use_agent(request.scope, scope.removeprefix("agent:"))
        )

    return reaches


@router.get("/suggestions", responses=doc.SUGGESTIONS)
async def list_suggestions(
    request: Request,
    pool: PoolDep,
    cfg: ConfigDep,
    tenant: TenantDep,
    limit: Annotated[int, Query(ge=1, le=1000), INTEGER] = 100,
    offset: Annotated[int, Query(ge=0, le=BIGINT_MAX), INTEGER] = 0,
    session_id: Annotated[
        str, Query(description=doc.SESSION_FILTER, json_schema_extra=doc.SESSION_FILTER_SCHEMA)
    ] = "",
    cursor: Annotated[str, Query(max_length=1000, description=CURSOR), BLANK_IS_UNSET] = "",
) -> dict[str, Any]:
    """The pending suggestions the key may answer; with ``session_id``, only that
    session's, so a client showing one session need not read every other's (empty is the
    parameter unset, as everywhere). Another agent's session, for a key limited to some
    agents, lists none, as its suggestions are left out of the whole list."""
    if session_id:
        validate_session_id(session_id, source="the session_id query parameter", param="session_id")
    after = cursor_place(cursor, offset, functools.partial(read_row_cursor, SUGGESTIONS)) or 0
    return await suggestions.list_suggestions(
        pool,
        cfg,
        tenant=tenant,
        limit=limit,
        offset=offset,
        may_see=_reaches(request),
        session_id=session_id or None,
        after=after,
    )


@router.post(
    "/suggestions/{suggestion_id}/accept",
    responses=doc.ACCEPT,
    openapi_extra={"requestBody": doc.ACCEPT_BODY},
)
async def accept_suggestion(
    request: Request,
    pool: PoolDep,
    cfg: ConfigDep,
    tenant: TenantDep,
    suggestion_id: str = Path(max_length=200),
) -> dict[str, Any]:
    body = await read_json_body(request, API_BODY_LIMIT, optional=True)
    facts = body.get("facts")
    if facts is not None and (
        not isinstance(facts, list) or not all(isinstance(f, str) for f in facts)
    ):
        raise ClientRequestError(
            "'facts' must be a list of strings: the facts to keep", param="facts", code=INVALID_TYPE
        )
    return await suggestions.accept_suggestion(
        pool,
        cfg,
        tenant=tenant,
        suggestion_id=suggestion_id,
        facts=facts,
        check=_reaches(request),
    )


@router.post("/suggestions/{suggestion_id}/reject", responses=doc.REJECT)
async def reject_suggestion(
    request: Request,
    pool: PoolDep,
    cfg: ConfigDep,
    tenant: TenantDep,
    suggestion_id: str = Path(max_length=200),
) -> dict[str, Any]:
    return await suggestions.reject_suggestion(
        pool,
        cfg,
        tenant=tenant,
        suggestion_id=suggestion_id,
        check=_reaches(request),
    )


@router.delete("/{fact_id:fact_id}", responses=doc.DELETE)
async def delete_fact(
    request: Request,
    pool: PoolDep,
    tenant: TenantDep,
    fact_id: Annotated[int, Path(ge=1, le=BIGINT_MAX), INTEGER],
) -> dict[str, Any]:
    def check(scope: str) -> None:
        _scope(request, scope, param=None)

    return await svc.delete_fact(pool, tenant=tenant, fact_id=fact_id, check=check)
