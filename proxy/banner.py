"""The start-up block: what a just-started proxy listens on and what it will do.

Logged once, at INFO, from the lifespan (so ``cascade-proxy serve`` and ``uvicorn
proxy.app:create_app --factory`` both print it) when the database is up. It names
environment variables, never their values: a provider's key is "set" or "unset", the
database URL has its password masked (``redact_dsn``), and a provider URL loses any user
and password in it.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from proxy import __version__
from proxy.auth import OPEN_PATHS, provider_pays
from proxy.cascade.redaction import compile_patterns, redact
from proxy.config import Config
from proxy.config_context import ContextConfig
from proxy.listen import is_loopback
from proxy.settings import Settings
from proxy.store.db import redact_dsn

__all__ = ["startup_banner", "client_origin", "startup_log"]

startup_log = logging.getLogger("cascade.start")
"""Where the block goes: its own logger, so it can be filtered or raised apart from the
request lines."""


def client_origin(host: str, port: int) -> str:
    """``http://HOST:PORT`` as a client on this machine reaches it: a wildcard address
    becomes loopback of its family (``::`` is listened on IPv6 only, as asyncio and
    ``server.bind`` do, so ``127.0.0.1`` would be refused there), an IPv6 address gets
    brackets."""
    shown = host.strip() or "127.0.0.1"
    if shown == "0.0.0.0":
        shown = "127.0.0.1"
    elif shown in ("::", "[::]"):
        shown = "::1"
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


def _bracketed(host: str) -> str:
    """An IPv6 address in brackets, as in a URL: ``::1:8080`` reads as one address."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _public_url(url: str) -> str:
    """``url`` without a user or password in it."""
    try:
        parts = urlsplit(url)
        if parts.username is None and parts.password is None:
            return url
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    except ValueError:
        return "(a baseUrl that does not parse)"


def _percent(fraction: float) -> str:
    """A fraction as the percentage the file means: 0.125 is 12.5%, not a rounded 12%."""
    return f"{fraction * 100:.3g}%"


def _stages(ctx: ContextConfig) -> str:
    on: list[str] = []
    if ctx.tool_output.enabled:
        on.append(f"toolOutput (results over {ctx.tool_output.max_chars} chars are cut)")
    if ctx.redaction.enabled:
        on.append("redaction")
    if ctx.eviction.enabled:
        on.append(f"eviction (from {_percent(ctx.eviction.at_fraction)} of the window)")
    if ctx.summarize.enabled:
        mode = "in the background" if ctx.summarize.background else "inline"
        on.append(f"summarize ({mode}, from {_percent(ctx.summarize.soft_fraction)})")
    if ctx.recitation.enabled:
        on.append("recitation")
    if ctx.retrieval.enabled:
        on.append(
            f"retrieval (up to {ctx.retrieval.max_results} hits scoring "
            f"{ctx.retrieval.min_score:g} or more)"
        )
    if ctx.memory_promotion.mode != "off":
        what = "suggested" if ctx.memory_promotion.mode == "suggest" else "stored"
        on.append(f"memory ({ctx.memory_promotion.mode}: facts of each compaction {what})")
    if ctx.handoff.enabled:
        on.append(f"handoff (nudge at {_percent(ctx.handoff.at_fraction)})")
    return ", ".join(on) or "none"


def _said(head: str, joint: str, rest: str) -> str:
    """``head: rest``, or ``head joint rest`` where the log's secret scrub would read the
    first as a secret's key and its value: an entry named for one (``provider github-token:
    http://…`` was logged ``provider github-token: [REDACTED]``)."""
    line = f"{head}: {rest}"
    return line if not redact(line, compile_patterns(()))[1] else f"{head} {joint} {rest}"


def _providers(cfg: Config, env: Mapping[str, str]) -> list[str]:
    forwarded = (
        "called without credentials (proxy keys never leave)"
        if cfg.auth.keys
        else "the client's bearer is forwarded"
    )
    lines = []
    for name, p in sorted(cfg.providers.items()):
        if p.api_key_env and (env.get(p.api_key_env) or "").strip():
            key = f"key ${p.api_key_env} set"
        elif p.api_key_env:
            key = f"key ${p.api_key_env} unset: {forwarded}"
        else:
            key = f"no apiKeyEnv; {forwarded}"  # "apiKeyEnv: …" the scrub masks
        lines.append(_said(f"  provider {name}", "at", f"{_public_url(p.base_url)}, {key}"))
    return lines


def _auth(cfg: Config, env: Mapping[str, str], host: str) -> str:
    if cfg.auth.keys:
        ready = sum(1 for k in cfg.auth.keys if (env.get(k.key_env) or "").strip())
        tenants = ", ".join(sorted({k.tenant for k in cfg.auth.keys}))
        return (
            f"  proxy keys: {len(cfg.auth.keys)} ({ready} with their variable set), "
            f"tenants {tenants}; every route but {', '.join(sorted(OPEN_PATHS))} and /ui "
            "needs one"
        )
    paying = provider_pays(cfg, env)
    where = "" if is_loopback(host) else " ON A NON-LOOPBACK ADDRESS"
    bearer = (
        "a request without a bearer token is refused"
        if paying
        else "a request without one shares the tenant 'anonymous'"
    )
    return (
        f"  proxy keys: none{where} (pass-through: each client's bearer token is its "
        f"tenant; {bearer})"
    )


def startup_banner(
    settings: Settings,
    cfg: Config,
    env: Mapping[str, str],
    *,
    database: str,
    embedded_at: Path | None,
    paths: Collection[str],
    tracing: str = "off",
) -> str:
    """The block to log; ``paths`` are the app's route paths (to say whether ``/ui`` and
    ``/metrics`` are served by this build), ``tracing`` where spans go (``Tracing.where``),
    ``off`` when no span is made."""
    origin = client_origin(settings.host, settings.port)
    db = (
        f"embedded PostgreSQL at {embedded_at}" if embedded_at is not None else redact_dsn(database)
    )
    if embedded_at is None and settings.db_pooler == "transaction":
        db += " through a transaction pooler (no statement cache)"
    if embedded_at is None and settings.database_url and settings.database_listen_url:
        db += f"; events LISTEN at {redact_dsn(settings.database_listen_url)}"
    config = str(settings.config or "none: all defaults")
    if settings.config:  # SIGHUP rereads it, watched or not (config_watch.Hangup)
        watched = "when it changes, or " if settings.watch_config else ""
        config += f" (reloaded {watched}on SIGHUP)"
    lines = [
        f"Cascade {__version__} listening on {_bracketed(settings.host)}:{settings.port}",
        f"  base URL for clients: {origin}/v1",
        f"  config: {config}",
        *_providers(cfg, env),
        _auth(cfg, env, settings.host),
        f"  database: {db}",
    ]
    for agent in sorted(cfg.agents):
        lines.append(_said(f"  stages for agent {agent}", "are", _stages(cfg.context_for(agent))))
    for name, path in (("console", "/ui"), ("metrics", "/metrics")):
        served = any(p == path or p.startswith(path + "/") for p in paths)
        lines.append(
            f"  {name}: {origin}{path}"
            if served
            else f"  {name}: not served by this build ({path})"
        )
    lines.append(f"  tracing: {tracing}")
    return "\n".join(lines)
