"""Resources reach handlers only through these helpers (lifespan state, no globals).

Every dependency is ``async def``: FastAPI runs a plain ``def`` dependency in the threadpool,
one thread hop per dependency per request. The chat route is a plain Starlette
endpoint that reads the lifespan state itself and resolves the tenant with ``tenant_of``
(see ``proxy.api.chat``).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Mapping
from typing import Annotated, Any, TypeVar
from urllib.parse import unquote, unquote_plus

from fastapi import Depends, HTTPException, Request

from proxy import requestlog
from proxy.api.body_coding import codings, decoded, shown
from proxy.api.body_pieces import PIECE_BYTES, parsed_in_pieces
from proxy.auth import PROXY_KEY, check_agent, key_agents, match_key
from proxy.bus import EventBus
from proxy.config import Config
from proxy.config_watch import ConfigHolder
from proxy.credentials import CLIENT_KEY_HEADERS, client_keys
from proxy.errors import ClientRequestError, PayloadTooLarge, ProxyError, Unauthorized
from proxy.jsonio import TooDeep, loads_exact, values_count
from proxy.requestlog import note_session
from proxy.services.compaction import DurableSummarizer
from proxy.services.resent import ResentBodies
from proxy.services.session_locks import SessionLocks
from proxy.session_id import bearer_token, tenant_from_bearer, validate_session_id
from proxy.store import sessions
from proxy.store.readiness import SharedCheck
from proxy.upstream import Upstream
from proxy.work_threads import BODIES, off_loop

__all__ = [
    "PoolDep",
    "ReadinessDep",
    "ConfigDep",
    "TenantDep",
    "BusDep",
    "UpstreamDep",
    "read_body",
    "MAX_BODY_BYTES",
    "MAX_BODY_VALUES",
    "read_json_body",
    "bounded_values",
    "json_object",
    "session_path_id",
    "encoded_slash",
    "reach_session",
    "SessionIdDep",
    "KeyAgentsDep",
    "Unauthorized",
    "SummarizerDep",
    "LocksDep",
    "tenant_of",
]

T = TypeVar("T")


def _state(request: Request, name: str) -> Any:
    return getattr(request.state, name)


async def get_pool(request: Request) -> Any:
    """The pool whose lends wait ``CASCADE_POOL_TIMEOUT_SECONDS`` at most (``BoundedPool``)."""
    return _state(request, "waiting_pool")


async def get_config(request: Request) -> Config:
    holder: ConfigHolder = _state(request, "config")
    return holder.current


async def get_tenant(request: Request) -> str:
    """The key's tenant when proxy keys are configured, else a hash of the client's bearer."""
    return tenant_of(request, _state(request, "config").current)


def tenant_of(request: Request, cfg: Config) -> str:
    """The tenant for this request under ``cfg`` (see ``get_tenant``): the key the gate
    (``proxy.auth.ProxyAuth``) let it in with, or, when a reload added keys after it passed
    the gate, its bearer matched against them now."""
    let_in = request.scope.get(PROXY_KEY)
    if let_in is not None:
        return str(let_in.tenant)
    auth = request.headers.get("authorization")
    if not cfg.auth.keys:
        keys = client_keys(request.headers)
        return tenant_from_bearer(auth, request.query_params.multi_items(), keys)
    key = match_key((bearer_token(auth) or "").encode("latin-1", "replace"), cfg, os.environ)
    if key is None:
        raise Unauthorized("missing or unknown API key: send 'Authorization: Bearer <proxy key>'")
    request.scope[PROXY_KEY] = key
    return key.tenant


BIGINT_MAX = 2**63 - 1
"""The largest offset or id PostgreSQL takes (bigint): past it a 400, not a 500."""


_KEY_HEADERS = frozenset(("authorization", *CLIENT_KEY_HEADERS))


def upstream_headers(request: Request, cfg: Config) -> Mapping[str, str]:
    """The client's headers as the provider may see them. With proxy keys configured the
    client's bearer token is the proxy's own secret, so it never leaves: the provider gets
    its ``apiKeyEnv`` key, or no credentials when that is unset (a keyless local server). A
    client's ``api-key`` (``AzureOpenAI``'s) or ``x-api-key`` stays back alike: it may hold
    the proxy key."""
    if not cfg.auth.keys:
        return request.headers
    return {k: v for k, v in request.headers.items() if k not in _KEY_HEADERS}


def upstream_query(request: Request, cfg: Config) -> list[tuple[str, str]]:
    """The client's query parameters as the provider may see them (an SDK's ``extra_query``,
    a gateway's ``api-version``). With proxy keys, one that holds a proxy key stays back as
    the Authorization header does: a client that sends its key in the query too (some
    providers take one there, ``?key=``, or ``?authorization=Bearer <key>``) would otherwise
    hand it to the provider, and so would a template that put it where a name goes. A key
    is looked for in the name, the value and the whole parameter, each read with ``+`` as a
    space (as the query's parameters are) and as itself: a base64 key holds ``+`` and ``=``,
    and a client may write it into the query unencoded."""
    items = request.query_params.multi_items()
    if not cfg.auth.keys:
        return items
    raw = request.scope["query_string"].decode("latin-1")
    segments = [s for s in raw.split("&") if s]  # as ``parse_qsl`` splits it for ``items``
    return [
        item
        for item, segment in zip(items, segments, strict=True)
        if not any(_holds_key(t, cfg) for t in {*item, *_readings(segment)})
    ]


def _readings(segment: str) -> set[str]:
    """A raw ``name=value`` of a query read with ``+`` as itself: its name, value and whole."""
    name, _, value = segment.partition("=")
    return {unquote(name), unquote(value), unquote(segment), unquote_plus(segment)}


def _holds_key(text: str, cfg: Config) -> bool:
    """Whether ``text`` is a proxy key, bare or as a bearer value (``Bearer <key>``)."""
    token = bearer_token(text)
    return any(
        match_key(t.encode("utf-8", "replace"), cfg, os.environ) is not None
        for t in {text.strip(), token or ""}
    )


async def get_readiness(request: Request) -> SharedCheck[str | None]:
    return _state(request, "readiness")  # type: ignore[no-any-return]


PoolDep = Annotated[Any, Depends(get_pool)]
ReadinessDep = Annotated[SharedCheck[str | None], Depends(get_readiness)]
ConfigDep = Annotated[Config, Depends(get_config)]
TenantDep = Annotated[str, Depends(get_tenant)]


async def get_bus(request: Request) -> EventBus:
    return _state(request, "bus")  # type: ignore[no-any-return]


async def get_upstream(request: Request) -> Upstream:
    return _state(request, "upstream")  # type: ignore[no-any-return]


async def get_summarizer(request: Request) -> DurableSummarizer:
    return _state(request, "summarizer")  # type: ignore[no-any-return]


async def get_locks(request: Request) -> SessionLocks:
    """This replica's queue per session (the chat service's), which the session API's
    reset, delete, branch and compact join."""
    return _state(request, "chat").locks  # type: ignore[no-any-return]


BusDep = Annotated[EventBus, Depends(get_bus)]
UpstreamDep = Annotated[Upstream, Depends(get_upstream)]
SummarizerDep = Annotated[DurableSummarizer, Depends(get_summarizer)]
LocksDep = Annotated[SessionLocks, Depends(get_locks)]


MAX_BODY_BYTES = "CASCADE_MAX_BODY_BYTES"
"""The setting that bounds the chat and embeddings bodies; the other routes' limits are fixed."""

MAX_BODY_VALUES = "CASCADE_MAX_BODY_VALUES"
"""The setting that bounds how many JSON values a chat or embeddings body holds
(``jsonio.values_count``)."""


async def read_body(request: Request, limit: int, *, setting: str | None = None) -> bytes:
    """The request body, or 413 past ``limit`` bytes (declared or streamed), cut off there:
    a longer body is never read whole. The 413 names ``setting`` when one sets the limit.
    A body with a ``Content-Encoding`` is decoded, bounded by ``limit`` too, or refused
    (``body_coding``) on a thread of its own (``work_threads.BODIES``); the request's access
    line names the coding."""
    where = f" ({setting})" if setting else ""
    coding = ", ".join(request.headers.getlist("content-encoding"))  # lines sent: one list
    if coding and (record := requestlog.current()):
        record.content_encoding = shown(coding)
    applied = codings(coding)  # the 415, before any byte is read
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(
            f"request body is {declared} bytes; the limit is {limit} bytes{where}"
        )
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes{where}")
        chunks.append(chunk)
    if not applied:
        return b"".join(chunks)
    return await off_loop(BODIES, decoded, b"".join(chunks), applied, limit, where)


API_BODY_LIMIT = 64 << 10
"""The session and memory APIs' request bodies (a branch's id, a fact, a suggestion's
answer) are read up to this many bytes: far past any of them, and never a chat's size."""


async def read_json_body(
    request: Request,
    limit: int,
    *,
    resent: ResentBodies | None = None,
    key: Any = None,
    setting: str | None = None,
    optional: bool = False,
    values: int | None = None,
) -> dict[str, Any]:
    """Read at most ``limit`` bytes and parse a JSON object, with errors a person can act on.

    With ``resent``, a body that extends the one last read under ``key`` is parsed
    incrementally (``services.resent``); the result is the same either way. With
    ``optional``, no body at all is ``{}``. With ``values``, a body holding more JSON
    values is a 413 before it is parsed: parsed, a body of tiny items holds tens of times
    its size (``jsonio.MAX_BODY_VALUES``). A body past ``body_pieces.PIECE_BYTES`` that
    extends no cached one is parsed a piece of its ``messages`` at a time, the loop free
    between pieces (``body_pieces``).
    """
    raw = await read_body(request, limit, setting=setting)
    if optional and not raw:
        return {}
    counted = None
    if values is not None:
        counted = bounded_values(raw, values, resent=resent, key=key)
    if len(raw) > PIECE_BYTES and not (resent is not None and resent.extends(key, raw)):
        # parsed whole, it would hold every other request and stream meanwhile
        parsed = await parsed_in_pieces(raw)
        if parsed is not None:
            if resent is not None:
                resent.keep(key, raw, parsed[0], parsed[1], counted)
            return parsed[0]  # type: ignore[no-any-return]
    return json_object(raw, resent=resent, key=key, counted=counted)


def bounded_values(
    raw: bytes, values: int, *, resent: ResentBodies | None = None, key: Any = None
) -> int:
    """How many JSON values ``raw`` holds (``jsonio.values_count``: a bound), counted before
    it is parsed; a 413 naming ``MAX_BODY_VALUES`` past ``values``. With ``resent``, a body
    extending the one last read under ``key`` counts only what it adds."""
    counted = None
    # one no longer than the limit is not read at all: its length is its count
    if resent is not None and len(raw) > values:
        counted = resent.counted(key, raw)
    if counted is None or counted > values:
        counted = values_count(raw, values)
    if counted > values:
        raise PayloadTooLarge(
            f"request body holds more than {values} JSON values (arrays, objects and the"
            f" items in them); the limit is {MAX_BODY_VALUES}: send fewer"
        )
    return counted


def json_object(
    raw: bytes, *, resent: ResentBodies | None = None, key: Any = None, counted: int | None = None
) -> dict[str, Any]:
    """``raw`` parsed, when it is a JSON object; else the 400 saying what to send.
    ``counted`` (its values, ``jsonio.values_count``) is kept with a resent body."""
    try:
        body = loads_exact(raw) if resent is None else resent.parse(key, raw, counted)
    except TooDeep as exc:  # valid JSON the proxy could not send on
        raise ClientRequestError(f"{exc}: send it nested fewer levels", param=exc.field) from None
    except ValueError as exc:  # orjson.JSONDecodeError is a ValueError
        raise ClientRequestError(
            f"request body is not valid JSON ({exc}); send a JSON object"
        ) from exc
    if not isinstance(body, dict):
        raise ClientRequestError("request body must be a JSON object")
    return body


_ID_SEGMENT_AFTER = (b"/v1/sessions/", b"/s/")  # the routes' paths up to a session id


def encoded_slash(request: Request) -> bool:
    """Whether the session id's segment of the path as sent holds an encoded ``/``: the
    server decodes ``%2F`` before routing, so ``/v1/sessions/s%2Freset`` matched the reset
    route of session ``s``, and ``/s/s%2Fv1/chat/completions`` a chat on it. An id that
    holds ``/`` is no session's."""
    raw: bytes = request.scope.get("raw_path") or b""
    root = str(request.scope.get("root_path", "")).encode("latin-1", "replace")
    if root and raw.startswith(root + b"/"):
        raw = raw[len(root) :]
    for prefix in _ID_SEGMENT_AFTER:
        if raw.startswith(prefix):
            return b"%2f" in raw[len(prefix) :].split(b"/", 1)[0].lower()
    return False


def session_path_id(request: Request) -> str:
    """The session id the path names: valid (else 400); one sent with an encoded ``/`` is
    the 404 of a path no route takes (``encoded_slash``)."""
    if encoded_slash(request):
        raise HTTPException(404)
    return validate_session_id(request.path_params["session_id"], source="URL path")


async def reach_session(request: Request, pool: Any, tenant: str, session_id: str) -> None:
    """A proxy key limited to some agents reaches only the sessions they ran: on another
    agent's session every route that names it (the session API, its events, a chat) is a
    403 ``agent_not_allowed``. A missing session passes, to be answered as for any key (a
    404, or a chat makes it, for the agent it routes to). Only a limited key costs a read:
    the session's agent, which is the agent of its last request, read as the request
    starts."""
    if key_agents(request.scope) is None:
        return
    agent = await sessions.fetchval_agent(pool, tenant=tenant, session_id=session_id)
    if agent is not None:
        check_agent(request.scope, agent, session_id=session_id)


async def read_and_recheck_reach(
    request: Request, pool: Any, tenant: str, session_id: str, read: Awaitable[T]
) -> T:
    """What ``read`` (a read of the session) gives, once ``reach_session`` passes again
    after it, whether it returned or raised. Another key's request may move the session to
    another agent (or make it) between the arrival check and the read: the answer is then
    the same 403, with neither what was read nor the read's own error (a 404 of an output
    the moved session lacks would say what it holds). A move writes the agent with its first
    messages, so a read that saw them is followed by this one seeing the agent. Only a
    limited key costs the check; a session deleted meanwhile passes (what was read is what
    the key could read before the delete)."""
    try:
        out = await read
    except ProxyError:
        await reach_session(request, pool, tenant, session_id)
        raise
    await reach_session(request, pool, tenant, session_id)
    return out


async def get_session_id(
    request: Request, session_id: str, pool: PoolDep, tenant: TenantDep
) -> str:
    """The path's session id (``session_path_id``), one the key reaches (``reach_session``);
    named on the access line and in ``X-Session-Id``, as a chat's session is."""
    sid = session_path_id(request)
    note_session(sid)
    await reach_session(request, pool, tenant, sid)
    return sid


async def get_key_agents(request: Request) -> tuple[str, ...] | None:
    return key_agents(request.scope)


SessionIdDep = Annotated[str, Depends(get_session_id)]
KeyAgentsDep = Annotated[tuple[str, ...] | None, Depends(get_key_agents)]
