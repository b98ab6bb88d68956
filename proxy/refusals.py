"""Start-up refusals raised in the lifespan: one line that says what to change.

What ``create_app`` can check before anything starts (the config file, the listen address,
an egress proxy) it raises there, and ``cascade-proxy`` prints it as one line (proxy/cli.py).
What needs the database is known only in the lifespan, which runs under uvicorn; uvicorn logs
the traceback of a failed start as its reason. For the errors that mean a setting is wrong or
the database is out of reach (:data:`REFUSALS`) the reason is their message instead, logged
once as one line (one JSON object with ``CASCADE_LOG_FORMAT=json``), followed by uvicorn's
``Application startup failed. Exiting.``
"""

from __future__ import annotations

import logging
import sys

from starlette.routing import Router
from starlette.types import Message, Receive, Scope, Send

from proxy.config import ConfigError
from proxy.store.db import DatabaseUnavailable, MigrationError

__all__ = ["REFUSALS", "refuse_in_one_line"]

log = logging.getLogger("cascade")

REFUSALS = (ConfigError, DatabaseUnavailable, MigrationError)
"""What a failed start reports by its message alone (``cascade-proxy`` catches the same)."""


def refuse_in_one_line(router: Router) -> None:
    """Make ``router``'s lifespan report a start-up refusal as its message alone.

    Starlette sends ``lifespan.startup.failed`` with the formatted traceback while it handles
    the exception, so the exception is still the one being handled when the message passes
    here; a refusal's is logged as one line and the message left empty, which uvicorn does
    not log."""
    lifespan = router.lifespan

    async def refusing(scope: Scope, receive: Receive, send: Send) -> None:
        async def send_failure_briefly(message: Message) -> None:
            exc = sys.exception()
            if message["type"] == "lifespan.startup.failed" and isinstance(exc, REFUSALS):
                log.error("cannot start: %s", exc)
                message = {**message, "message": ""}
            await send(message)

        await lifespan(scope, receive, send_failure_briefly)

    router.lifespan = refusing  # type: ignore[method-assign]
