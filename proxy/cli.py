"""``cascade-proxy``: serve, migrate, and a small session client. No logic lives here.

``sessions …`` talks to a running proxy over HTTP (``--url``, default
``http://$CASCADE_HOST:$CASCADE_PORT``) with the same bearer token the agent uses
(``--api-key``, default ``$OPENAI_API_KEY``), because sessions are scoped by that token's
tenant.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

import httpx
import uvicorn
from pydantic import ValidationError

from proxy.app import create_app
from proxy.config import ConfigError
from proxy.pgembed import start_embedded
from proxy.settings import Settings
from proxy.store.db import DatabaseUnavailable, MigrationError, run_migrations

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cascade-proxy", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the proxy")
    serve.add_argument("--host")
    serve.add_argument("--port", type=_port)
    serve.add_argument("--config", type=Path)
    serve.add_argument("--database-url")
    sub.add_parser("migrate", help="apply database migrations and exit").add_argument(
        "--database-url")
    sess = sub.add_parser("sessions", help="inspect and manage sessions of a running proxy")
    sess.add_argument("--url")
    sess.add_argument("--api-key")
    ssub = sess.add_subparsers(dest="action", required=True)
    ssub.add_parser("ls")
    for name in ("show", "compact", "rm", "reset"):
        ssub.add_parser(name).add_argument("id")
    return p


def _settings(args: argparse.Namespace) -> Settings:
    overrides = {
        k: v for k, v in {
            "host": getattr(args, "host", None), "port": getattr(args, "port", None),
            "config": getattr(args, "config", None),
            "database_url": getattr(args, "database_url", None),
        }.items() if v is not None
    }
    return Settings().model_copy(update=overrides).with_default_config()


def _port(text: str) -> int:
    port = int(text)
    if not 1 <= port <= 65535:  # uvicorn would take 99999 and listen somewhere else
        raise argparse.ArgumentTypeError(f"{text} is not a TCP port (1-65535)")
    return port


def _serve(settings: Settings) -> int:
    app = create_app(settings)  # configures logging (proxy.logs), uvicorn's loggers included
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level,
                log_config=None, access_log=False)
    return 0


def _migrate(settings: Settings) -> int:
    dsn, server = (settings.database_url, None)
    if not dsn:
        dsn, server = start_embedded(settings.data_dir)
    applied = asyncio.run(run_migrations(dsn))
    print(f"applied {len(applied)} migration(s): {', '.join(applied) or 'none pending'}")
    if server is not None:
        server.cleanup()
    return 0


def _sessions(args: argparse.Namespace, settings: Settings) -> int:
    url = (args.url or f"http://{settings.host}:{settings.port}").rstrip("/")
    key = args.api_key or os.environ.get("OPENAI_API_KEY")
    headers = {"authorization": f"Bearer {key}"} if key else {}
    routes = {
        "ls": ("GET", "/v1/sessions"), "show": ("GET", "/v1/sessions/{id}"),
        "compact": ("POST", "/v1/sessions/{id}/compact"),
        "reset": ("POST", "/v1/sessions/{id}/reset"), "rm": ("DELETE", "/v1/sessions/{id}"),
    }
    method, path = routes[args.action]
    # Escaped whole, dots too: ".." is a valid session id, and a client would resolve it
    # as a path step ("show .." asked GET /v1).
    path = path.format(id=quote(getattr(args, "id", ""), safe="").replace(".", "%2E"))
    try:
        resp = httpx.request(method, url + path, headers=headers, timeout=600)
    except httpx.TransportError as exc:
        print(f"cannot reach the proxy at {url}: {exc}", file=sys.stderr)
        return 2
    try:
        print(json.dumps(resp.json(), indent=2))
    except ValueError:  # not a Cascade proxy at --url, or a proxy in front of it failed
        print(f"{url} answered {resp.status_code} with no JSON: {resp.text[:500]}",
              file=sys.stderr)
        return 2
    return 0 if resp.is_success else 1


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = _settings(args)
        if args.command == "serve":
            return _serve(settings)
        if args.command == "migrate":
            return _migrate(settings)
        return _sessions(args, settings)
    except (ConfigError, ValidationError, DatabaseUnavailable, MigrationError) as exc:
        # a mistake in the config file or the environment: say which, without a traceback
        print(f"cascade-proxy {args.command}: {exc}", file=sys.stderr)
        return 2
