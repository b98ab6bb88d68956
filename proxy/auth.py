"""Proxy keys: the gate in front of every route (the listen-address rule is ``listen.py``).

``ProxyAuth`` is a pure ASGI middleware, so it covers every route the app has or gains
(chat, models, embeddings, sessions, SSE events, ``/metrics``, ``/openapi.json``,
``/docs``) without each handler having to remember a dependency. It reads the config in force
(``ConfigHolder.current``) on every request, so a reload that adds, removes or rotates a key
applies to the next request; a chat or session operation that waits for its session asks
again as it takes it, and after each wait for its session's compaction (``key_in_force``).

- With ``auth.keys``: every request needs ``Authorization: Bearer <proxy key>``, except
  the probes ``/healthz`` and ``/readyz`` (status only, for a load balancer that cannot send
  a header) and GET/HEAD under ``/ui`` (the console's static shell,
  which holds no data; every call it makes needs a key). A missing or unknown key is an
  OpenAI-shaped 401. The matched key is left in the scope (``PROXY_KEY``) for ``tenant_of``
  and ``check_agent``.
- ``auth.metricsKeyEnv``: a key that opens ``/metrics`` and nothing else, for a scraper;
  once its variable is set, ``/metrics`` takes that key only, in either mode: the metrics
  count every tenant's traffic (and name the models clients send), which a tenant's key
  must not read. Without it, any proxy key opens ``/metrics``.
- Pass-through mode (no keys): a request with no bearer token is refused (401) when a
  provider's own key (its ``apiKeyEnv`` set) would pay for it, on every route but the
  allow-list and the operational ones (``/metrics``, the API document), which
  any bearer would open anyway.
- A key limited to some agents (``agents``) gets a 403 for any other agent, and for a
  session another agent ran (``proxy.api.deps.reach_session``).
- Without keys, loopback is the only protection, and a web page the user has open can reach
  loopback too: a request that arrived on a loopback IP but names another host (``Host``:
  what a page whose domain was rebound to 127.0.0.1 sends, with any bearer it likes) is
  refused, and so is one with no bearer from a page of another origin (``Origin`` neither
  the proxy's own nor in ``CASCADE_CORS_ORIGINS``: a form or ``no-cors`` fetch, which
  cannot carry a bearer). Unauthenticated listening, when allowed, allows these too.
- Listening beyond loopback without keys is refused at start (``listen.listen_policy``) for the
  address the proxy is told (``CASCADE_HOST``). A server started on another address than it
  says (``uvicorn ... --host 0.0.0.0`` without ``CASCADE_HOST``) is caught per request: with
  no keys, a request that arrived on a non-loopback local address (the ASGI ``server`` IP) is
  refused with a 401, unless unauthenticated listening was allowed.

Keys are compared in constant time (``hmac.compare_digest`` over SHA-256 digests, so neither
the matching prefix nor the length shows in the timing) and never logged or echoed.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from starlette._utils import get_route_path
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from proxy.config import AuthKeyConfig, Config
from proxy.config_watch import ConfigHolder
from proxy.errors import PermissionDenied, Unauthorized, error_body
from proxy.session_id import bearer_token

__all__ = [
    "PROXY_KEY",
    "ProxyAuth",
    "match_key",
    "check_agent",
    "key_agents",
    "key_in_force",
    "may_use_agent",
    "provider_pays",
    "OPEN_PATHS",
    "OPERATIONAL_PATHS",
]

log = logging.getLogger("cascade")

PROXY_KEY = "cascade.proxy_key"
"""The scope entry holding the ``AuthKeyConfig`` a request was let in with."""

_JUDGED_UNDER = "cascade.proxy_key_config"
"""The scope entry holding the config the gate matched ``PROXY_KEY`` under: asked again under
that same config, the key stands without matching every key once more (``key_in_force``)."""

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
"""Answered without a key, in every mode: the probes, which say a status and nothing else, for
a load balancer or uptime checker that cannot send a header."""

UI_PREFIX = "/ui"
"""GET/HEAD at or under it load without a key: the console's static shell."""

OPERATIONAL_PATHS = frozenset(
    {
        "/metrics",
        "/openapi.json",
        "/docs",
        "/docs/oauth2-redirect",
        "/redoc",
    }
)
"""Need a proxy key when there are keys, but no bearer in pass-through mode."""

_MISSING = "missing or unknown API key: send 'Authorization: Bearer <proxy key>'"
_IN_KEY_HEADER = {
    b"api-key": "; an api-key header holds no proxy key (AzureOpenAI sends one: give it the "
    "proxy key as azure_ad_token, or use the OpenAI client)",
    b"x-api-key": "; an x-api-key header holds no proxy key: send the proxy key as "
    "'Authorization: Bearer <proxy key>'",
}
_REVOKED = (
    "this proxy key was removed from the config (or given to another tenant) while the "
    "request waited for its session or its compaction; nothing was sent or compacted for it"
)


def _digest(secret: bytes) -> bytes:
    return hashlib.sha256(secret).digest()


def _same(token_digest: bytes, secret: str | None) -> bool:
    """Constant time: how much of a guess matched, or how long it was, must not show."""
    expected = (secret or "").strip().encode()
    return bool(expected) and hmac.compare_digest(token_digest, _digest(expected))


def match_key(token: bytes, cfg: Config, env: Mapping[str, str]) -> AuthKeyConfig | None:
    """The proxy key ``token`` is, or None; every key is compared, matched or not."""
    if not token:
        return None
    digest, found = _digest(token), None
    for key in cfg.auth.keys:
        if _same(digest, env.get(key.key_env)) and found is None:
            found = key
    return found


def key_agents(scope: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The agents the request's proxy key is limited to; None for every agent (a key with
    no ``agents``, or pass-through mode)."""
    key: AuthKeyConfig | None = scope.get(PROXY_KEY)
    return None if key is None else key.agents


def key_in_force(
    scope: Mapping[str, Any], cfg: Config, env: Mapping[str, str] | None = None
) -> tuple[str, ...] | None:
    """The agents the request's key may use under ``cfg``, the config in force now, for a
    request let in under an earlier one that waited since (for its session, behind another
    request that may stream for minutes): ``Unauthorized`` when ``cfg`` would not let it in
    as the same tenant, its key removed, its variable changed, or given to another tenant
    (a pass-through request once ``cfg`` has keys). A revoked key must not reach the
    provider, nor write to the tenant it no longer names, after the reload that revoked it."""
    before: AuthKeyConfig | None = scope.get(PROXY_KEY)
    if before is not None and scope.get(_JUDGED_UNDER) is cfg:  # no reload since the gate
        return before.agents
    if not cfg.auth.keys:
        if before is None:
            return None
        raise Unauthorized(_REVOKED)
    token = _token(_authorization(scope))
    key = match_key(token, cfg, env if env is not None else os.environ)
    if key is None or before is None or key.tenant != before.tenant:
        raise Unauthorized(_REVOKED)
    return key.agents


def may_use_agent(scope: Mapping[str, Any], agent: str) -> bool:
    """Whether the request's proxy key (none: pass-through) may use ``agent``."""
    agents = key_agents(scope)
    return agents is None or agent in agents


def check_agent(scope: Mapping[str, Any], agent: str, *, session_id: str | None = None) -> None:
    """403 when the request's proxy key is limited to agents other than ``agent``; with
    ``session_id``, ``agent`` is that session's, and the message says so."""
    agents = key_agents(scope)
    if agents is None or agent in agents:
        return
    raise PermissionDenied.agent(agents, agent, session_id=session_id)


def provider_pays(cfg: Config, env: Mapping[str, str]) -> bool:
    """Whether some agent's provider would be called with the proxy's own key (its
    ``apiKeyEnv`` set). A user and password in a ``baseUrl`` do not count: they are sent only
    when the client sends no bearer, so refusing those requests would make them useless."""
    for name in cfg.agent_providers():
        provider = cfg.providers[name]
        if provider.api_key_env and (env.get(provider.api_key_env) or "").strip():
            return True
    return False


def _authorization(scope: Mapping[str, Any]) -> bytes | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            return bytes(value)
    return None


def _token(header: bytes | None) -> bytes:
    token = bearer_token(header.decode("latin-1")) if header is not None else None
    return (token or "").encode("latin-1")


class ProxyAuth:
    """The gate (see the module's docstring). ``require_keys``: the server listens on a
    non-loopback address and was not told to allow that unauthenticated, so a config reloaded
    without keys closes every gated route instead of opening them. ``allow_unauthenticated``:
    without keys, requests are served on whatever local address they arrive; otherwise only
    on a loopback one (or a socket with no IP address, such as a Unix socket)."""

    def __init__(
        self,
        app: ASGIApp,
        holder: ConfigHolder,
        *,
        require_keys: bool = False,
        allow_unauthenticated: bool = False,
        env: Mapping[str, str] | None = None,
        cors_origins: Sequence[str] = (),
    ) -> None:
        self.app = app
        self.holder = holder
        self.require_keys = require_keys
        self.allow_unauthenticated = allow_unauthenticated
        self.cors_origins = frozenset(o.lower() for o in cors_origins)
        self.env = env if env is not None else os.environ
        self._exposed: dict[str, bool] = {}  # local address -> a non-loopback IP

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope, self.holder.current)
        if refusal is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        else:
            log.info("401 %s %s: %s", scope["method"], scope["path"], refusal)
            await JSONResponse(
                error_body(refusal, type="invalid_request_error", code="invalid_api_key"),
                401,
                {"WWW-Authenticate": "Bearer"},
            )(scope, receive, send)

    def _refusal(self, scope: Scope, cfg: Config) -> str | None:
        """Why the request may not pass, or None (with ``PROXY_KEY`` set when a key let it).
        The path judged is the one the router routes: under a ``root_path`` (uvicorn's
        ``--root-path``) the server puts the prefix in front of ``path``, and the router
        takes it off (Starlette's own helper, which FastAPI's router uses too)."""
        path = get_route_path(scope)
        if path in OPEN_PATHS or (
            scope.get("method") in ("GET", "HEAD")
            and (path == UI_PREFIX or path.startswith(UI_PREFIX + "/"))
        ):
            return None
        token = _token(_authorization(scope))
        metrics_secret = self.env.get(cfg.auth.metrics_key_env or "")
        if path == "/metrics" and metrics_secret and metrics_secret.strip():
            if token and _same(_digest(token), metrics_secret):
                return None
            return (
                "missing or unknown metrics key: /metrics takes only the scraper's key "
                "(auth.metricsKeyEnv); send 'Authorization: Bearer <metrics key>'"
            )
        if cfg.auth.keys:
            key = match_key(token, cfg, self.env)
            if key is None:  # an AzureOpenAI client sends its key where no proxy key goes
                return _MISSING + "".join(h for n, h in _IN_KEY_HEADER.items() if _header(scope, n))
            scope[PROXY_KEY], scope[_JUDGED_UNDER] = key, cfg
            return None
        # keyless, any key the client sent is its own: one in Azure's ``api-key`` header too
        sent = ((_header(scope, n) or "").strip() for n in _IN_KEY_HEADER)
        token = token or next((k.encode("latin-1") for k in sent if k), b"")
        if self.require_keys:
            return (
                "this proxy listens on a non-loopback address and its config has no "
                "proxy keys (auth.keys): every request is refused"
            )
        if not self.allow_unauthenticated:
            if self._arrived_exposed(scope):
                return (
                    "this proxy has no proxy keys (auth.keys) and the request arrived on a "
                    "non-loopback address: refused"
                )
            if refusal := self._cross_site(scope, token):
                return refusal
        if not token and path not in OPERATIONAL_PATHS and provider_pays(cfg, self.env):
            return (
                "missing API key: send 'Authorization: Bearer <key>'; without one the "
                "proxy's own provider key would pay for anyone who can reach it"
            )
        return None

    def _cross_site(self, scope: Scope, token: bytes) -> str | None:
        """Why a keyless request looks sent by a web page rather than a local client."""
        host = _header(scope, b"host")
        server = scope.get("server")
        if host and server and _loopback_ip(server[0]) and not _local_name(host):
            return (
                "this proxy has no proxy keys (auth.keys) and the request names another host "
                "than this loopback address (Host), as a web page whose domain points here "
                "does: refused. Call it as 127.0.0.1 or localhost, or configure auth.keys"
            )
        origin = _header(scope, b"origin")
        if token or origin is None:
            return None
        allowed = "*" in self.cors_origins or origin.lower() in self.cors_origins
        if allowed or origin.lower().partition("://")[2] == (host or "").lower():
            return None
        return (
            "a request with no bearer token from a web page of another origin (Origin): "
            "refused; send 'Authorization: Bearer <key>', or list the origin in "
            "CASCADE_CORS_ORIGINS"
        )

    def _arrived_exposed(self, scope: Scope) -> bool:
        """Whether the request's local address is an IP that is not loopback. A server gives
        its IP; a name (an in-process test transport's) or no address is not judged."""
        server = scope.get("server")
        if not server:
            return False
        host = server[0]
        exposed = self._exposed.get(host)
        if exposed is None:
            exposed = _non_loopback_ip(host)
            if len(self._exposed) < 64:  # a server has few local addresses; bound it anyway
                self._exposed[host] = exposed
            if exposed:
                log.warning(
                    "a request arrived on %s, a non-loopback address, and the config has no "
                    "proxy keys: such requests are refused (401). Configure auth.keys, or set "
                    "CASCADE_HOST to the address the server binds and "
                    "CASCADE_ALLOW_UNAUTHENTICATED=1 to serve them unauthenticated",
                    host,
                )
        return exposed


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def _loopback_ip(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _local_name(host: str) -> bool:
    """A ``Host`` value naming this machine: ``localhost`` (or a name under it) or a loopback
    IP, with or without a port."""
    name = host.strip().lower()
    if name.startswith("["):
        name = name[1 : name.find("]")] if "]" in name else name
    elif name.count(":") == 1:
        name = name.partition(":")[0]
    name = name.rstrip(".")
    return name == "localhost" or name.endswith(".localhost") or _loopback_ip(name)


def _non_loopback_ip(host: str) -> bool:
    """An IP that is not loopback; an IPv4 address mapped into IPv6 (a dual-stack socket's
    ``::ffff:127.0.0.1``) is judged as the IPv4 one."""
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return not ip.ipv4_mapped.is_loopback
    return not ip.is_loopback
