"""create_app(settings) and the lifespan that owns every resource.

uvicorn runs ``proxy.app:create_app --factory`` (``cascade-proxy serve`` runs the same app);
tests call ``create_app`` with their own settings instead of patching globals. The provider
they talk to is a real HTTP server on loopback (tests/fakes/upstream.py); shape tests may pass
an ``httpx.MockTransport`` as ``http_transport`` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
from collections.abc import AsyncIterator
from typing import Any, TypedDict

import asyncpg
import httpx
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import iter_route_contexts
from starlette.responses import Response

from proxy import __version__
from proxy.answer_budget import AnswerBudget, default_limit
from proxy.api import azure, chat, events, health, memory, openapi, sessions
from proxy.banner import startup_banner, startup_log
from proxy.bus import EventBus, listen_url
from proxy.bus_listen import through_pooler
from proxy.config import Config
from proxy.config_watch import ConfigHolder, Hangup, watch_config
from proxy.embeddings import Embedders, bind_embedders
from proxy.listen import (
    listen_policy,
    open_listen_warning,
    open_metrics_warning,
    reload_told,
)
from proxy.logs import configure_logging, format_from_env
from proxy.metrics import Metrics
from proxy.observe import Observer
from proxy.pgembed import default_data_dir, require_embedded, start_embedded, tune_embedded
from proxy.services.chat import ChatService
from proxy.services.compaction import DurableSummarizer
from proxy.services.leases import Leases
from proxy.services.retrieval import EmbeddingWorker
from proxy.settings import Settings, SettingsError, load_settings
from proxy.settings_names import unknown_variables
from proxy.stopping import StopClock, watch_stop
from proxy.store.db import BoundedPool, pooler_kwargs
from proxy.store.memory import key_stored_facts
from proxy.store.migrations import run_migrations
from proxy.store.readiness import SharedCheck, database_readiness
from proxy.tasks import stop_task
from proxy.tokenizers import build_counters
from proxy.tracing import build_tracing
from proxy.transport import (
    ProviderTransport,
    build_client,
    check_proxies,
    check_trust,
    refuse_ca_files,
)
from proxy.ui import routes as ui_routes
from proxy.upstream import Upstream
from proxy.warmup import open_pool, warm_pool, warm_process
from proxy.wiring import install_error_handlers, install_middleware

__all__ = ["check_start", "create_app"]

log = logging.getLogger("cascade")


class State(TypedDict):
    pool: asyncpg.Pool
    waiting_pool: BoundedPool
    """The pool as request handlers use it: each lend waits ``pool_timeout_seconds`` at most."""
    readiness: SharedCheck[str | None]
    config: ConfigHolder
    bus: EventBus
    upstream: Upstream
    chat: ChatService
    settings: Settings
    summarizer: DurableSummarizer
    stop: StopClock
    """The stop's grace, begun at this app's server's stop (``stopping.watch_stop``)."""


def _tune_gc() -> None:
    """Move everything built at start-up out of the collector's way, and collect the young
    generation every 20,000 allocations instead of 700: a request allocates thousands of
    short-lived objects, so the default runs a collection several times per request
    (docs/perf.md)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 100)


async def _key_facts(pool: asyncpg.Pool) -> None:
    """Key the memory facts stored without a key (migration 0030), in the background: a
    write keys its scope's own first, so this only saves them that read; a failure is
    logged and the next start goes on where it stopped."""
    try:
        await key_stored_facts(pool)
    except Exception:
        log.warning("keying the stored memory facts stopped; the next start goes on", exc_info=True)


async def _stop_watcher(watcher: asyncio.Task[None], stop: asyncio.Event) -> None:
    """End the config watcher; its failure is logged, so the rest of the shutdown runs."""
    stop.set()
    watcher.cancel()
    try:
        await watcher
    except asyncio.CancelledError:
        pass
    except Exception:
        log.exception("the config watcher had failed")


def _announce(metrics: Metrics, bus: EventBus, event: str, data: dict[str, Any]) -> None:
    """A reload's event: counted (``cascade_config_reloads_total``), then on every open
    stream."""
    metrics.note_config(event)
    bus.broadcast_local(event, data)


def _say_started(banner: str, warnings: list[str]) -> None:
    """The start's lines, logged once the address is bound (``serve`` binds before the
    lifespan): the banner, one record per line since the text format escapes a line break
    inside a record, then ``warnings`` (``check_start``'s), so a start that cannot bind its
    port warns of nothing."""
    for line in banner.splitlines():
        startup_log.info("%s", line)
    for warning in warnings:
        log.warning("%s", warning)


def check_start(settings: Settings, cfg: Config) -> tuple[bool, list[str]]:
    """What ``serve`` judges of ``settings`` and ``cfg`` before it starts, as ``config check``
    judges them: whether the gate requires proxy keys, and the warnings of listening beyond
    loopback without them (``open_listen_warning``) or with ``/metrics`` open to more than a
    scraper (``open_metrics_warning``). Raises what it refuses: an egress proxy
    the transport cannot use, an ``SSL_CERT_FILE`` that does not load, listening beyond
    loopback without proxy keys unless ``allow_unauthenticated``."""
    check_proxies(settings.http_transport)
    check_trust()
    allow = settings.allow_unauthenticated
    require_keys = listen_policy(settings.host, cfg, allow_unauthenticated=allow)
    said = [
        open_listen_warning(settings.host, cfg, allow_unauthenticated=allow),
        open_metrics_warning(settings.host, cfg, os.environ),
    ]
    return require_keys, [warning for warning in said if warning]


def create_app(
    settings: Settings | None = None,
    *,
    http_transport: httpx.AsyncBaseTransport | None = None,
    tracer_provider: Any = None,
) -> FastAPI:
    """The app; ``http_transport`` replaces the provider transport (tests' MockTransport),
    ``tracer_provider`` (an OpenTelemetry one) turns tracing on with it (proxy/tracing.py)."""
    if settings is None:
        try:
            settings = load_settings()
        except SettingsError:  # before logging is set up: make the refusal a line like others
            configure_logging("info", format_from_env())
            raise
    configure_logging(settings.log_level, settings.log_format)
    # Validate the config before anything starts, so a bad file fails loudly at boot.
    holder = ConfigHolder.from_file(settings.config, os.environ)
    if unknown := unknown_variables(os.environ, holder.current.variables()):
        log.warning("%s", unknown)  # a misspelt setting is otherwise silently its default
    require_keys, open_listen = check_start(settings, holder.current)
    if not settings.database_url:
        require_embedded()  # here, not in the lifespan: one line on stderr, not a traceback
    tracing = build_tracing(settings.tracing, provider=tracer_provider)
    observer = Observer(Metrics.from_env(), tracing)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[State]:
        # Each resource's close is pushed as soon as it is open, so a start that fails half
        # way (a migration, the bus's listener, the warm-up) closes what it had opened, and a
        # stop closes everything in the reverse order of opening.
        async with contextlib.AsyncExitStack() as stack:
            hangup = Hangup(holder)  # SIGHUP rereads the config, and never ends the process
            stack.callback(hangup.install())
            stack.callback(observer.close)
            dsn = settings.database_url
            embedded_at = None
            if not dsn:
                dsn, embedded = start_embedded(settings.data_dir)
                stack.callback(embedded.cleanup)
                embedded_at = (settings.data_dir or default_data_dir()) / "pgdata"
                await tune_embedded(dsn)
            pooler = pooler_kwargs(settings.db_pooler)
            source = settings.database_source()
            await run_migrations(dsn, setting=source, serving=True, **pooler)
            pool = await open_pool(
                dsn,
                max_size=settings.pool_max_size,
                setting=settings.database_source(),
                command_timeout=settings.db_statement_timeout_seconds,
                **pooler,
            )
            stack.push_async_callback(pool.close)
            stack.push_async_callback(stop_task, asyncio.create_task(_key_facts(pool)))
            banner = startup_banner(
                settings,
                holder.current,
                os.environ,
                database=dsn,
                embedded_at=embedded_at,
                paths=[r.path or "" for r in iter_route_contexts(app.routes)],
                tracing=tracing.where if tracing is not None else "off",
            )
            _say_started(banner, open_listen)
            provider = None
            if http_transport is None:
                provider = ProviderTransport(
                    max_connections=settings.provider_max_connections,
                    kind=settings.http_transport,
                )
            if provider is not None:  # a reload's new caFile must load, as it would be used
                holder.vet = functools.partial(refuse_ca_files, provider)
                stack.callback(setattr, holder, "vet", None)
            # the pools a reload leaves are closed; a /metrics it opens is said
            keep_only = provider.keep_only if provider is not None else None
            holder.on_reloaded = reload_told(settings.host, holder.current, keep_only)
            stack.callback(setattr, holder, "on_reloaded", None)
            client = build_client(transport=http_transport or provider)
            stack.push_async_callback(client.aclose)
            listen, source = listen_url(settings, dsn)
            bus = EventBus(pool, listen, source, pooled=through_pooler(settings, listen))
            stack.push_async_callback(bus.stop)
            await bus.start()  # a listener that cannot connect is a refusal naming its URL
            held = settings.max_held_answer_bytes  # unset: from the container's memory
            upstream = Upstream(
                client,
                proxy_for=provider.proxy_for if provider else None,
                budget=AnswerBudget(default_limit() if held is None else held),
            )
            count, cost = build_counters(settings.tokenizer or None)
            # First-use costs paid before the replica is ready, not in its first requests.
            warm_process(holder.current, count, provider)
            await warm_pool(pool, pool.get_min_size(), timeout=settings.pool_timeout_seconds)
            leases = Leases(
                pool, ttl=settings.lease_ttl_seconds, acquire_timeout=settings.pool_timeout_seconds
            )
            leases.start()
            stack.push_async_callback(leases.aclose)
            stop_clock = StopClock(settings.stop_grace_seconds)  # the stop's grace
            stack.push_async_callback(stop_task, asyncio.create_task(watch_stop(stop_clock)))
            summarizer = DurableSummarizer(
                pool=pool,
                upstream=upstream,
                bus=bus,
                count=count,
                acquire_timeout=settings.pool_timeout_seconds,
                leases=leases,
                stop=stop_clock,
            )
            stack.push_async_callback(summarizer.aclose)
            await summarizer.close_interrupted()  # compactions a kill (or a stop) cut short
            chat_service = ChatService(
                pool=pool,
                upstream=upstream,
                bus=bus,
                cost=cost,
                settings=settings,
                summarizer=summarizer,
                leases=leases,
                stop=stop_clock,
            )
            embedders = Embedders(
                lambda: holder.current,
                upstream,
                on_usage=functools.partial(observer.note_usage, "embeddings"),
            )
            bind_embedders(embedders)  # the retrieval fulfiller's (proxy/embeddings.py)
            stack.callback(bind_embedders, None)
            embedding = EmbeddingWorker(
                pool,
                lambda: holder.current,
                embedders,
                idle_seconds=settings.embedding_poll_seconds,
                on_failure=observer.metrics.embedding_failures.inc,
            )
            embedding.start()  # idle while no agent has retrieval on
            stack.push_async_callback(embedding.aclose)
            stop = asyncio.Event()
            announce = functools.partial(_announce, observer.metrics, bus)
            if settings.watch_config and settings.config is not None:
                watcher = asyncio.create_task(watch_config(holder, announce, stop))
                stack.push_async_callback(_stop_watcher, watcher, stop)
            stack.callback(hangup.serve(announce, stop))
            _tune_gc()
            yield State(
                pool=pool,
                waiting_pool=BoundedPool(pool, settings.pool_timeout_seconds),
                readiness=database_readiness(pool),
                config=holder,
                bus=bus,
                upstream=upstream,
                chat=chat_service,
                settings=settings,
                summarizer=summarizer,
                stop=stop_clock,
            )

    app = FastAPI(title="Cascade", version=__version__, lifespan=lifespan)
    # No 307 to the slash-less path: it is built from the client's Host header, and clients
    # follow it with their Authorization. A trailing slash is an OpenAI-shaped 404.
    app.router.redirect_slashes = False
    app.router.routes.extend(chat.routes)
    app.router.routes.extend(azure.routes)  # Azure's deployment chat path (AzureOpenAI)
    app.router.routes.extend(ui_routes)  # the console (proxy/ui)
    app.add_api_route(
        "/metrics",
        observer.metrics.endpoint,
        methods=["GET"],
        response_class=Response,
        summary="Prometheus metrics",
        description="The text exposition format (README: Metrics).",
        responses={
            200: {
                "content": {"text/plain": {"schema": {"type": "string"}}},
                "description": "Every metric, in Prometheus' text format.",
            }
        },
    )
    for module in (chat, azure, sessions, events, health, memory):
        app.include_router(module.router)
    install_error_handlers(app)
    install_middleware(app, settings, holder, require_keys, observer)
    app.openapi = functools.partial(_openapi, app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document, plus the chat routes and Azure's (plain Starlette routes it does
    not see), its 422s the 400s the proxy answers (``proxy.api.openapi``)."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
        schema["paths"].update(chat.OPENAPI_PATHS)
        schema["paths"].update(azure.OPENAPI_PATHS)
        app.openapi_schema = openapi.amend(schema)
    return app.openapi_schema
