"""Start-up refusals raised in the lifespan: one line that says what to change.

What ``create_app`` can check before anything starts (the config file, the listen address,
an egress proxy) it raises there, and ``cascade-proxy`` prints it as one line (proxy/cli_run.py).
What needs the database is known only in the lifespan, which runs under uvicorn; uvicorn logs
the traceback of a failed start as its reason. For the errors that mean a setting is wrong or
the database is out of reach (:data:`REFUSALS`) the reason is their message instead, logged
once as one line (one JSON object with ``CASCADE_LOG_FORMAT=json``), followed by uvicorn's
``Application startup failed. Exiting.``

:class:`StartupRefusals` does it as ASGI middleware, installed with ``add_middleware`` like
the others, so ``cascade-proxy serve`` and ``uvicorn proxy.app:create_app --factory`` run it
alike and starlette's router is used as it comes. It also keeps the start's task in
:data:`STARTING`, so a signal during the start ends it (``proxy.server``), logged as one line.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.config import ConfigError
from proxy.store.db import DatabaseUnavailable
from proxy.store.migrations import MigrationError

__all__ = ["REFUSALS", "StartupRefusals", "STARTING", "Starting"]

log = logging.getLogger("cascade")

REFUSALS = (ConfigError, DatabaseUnavailable, MigrationError)
"""What a failed start reports by its message alone (``cascade-proxy`` catches the same)."""


class Starting:
    """The lifespan's task while the start runs, so that a signal during it ends it
    (``cascade-proxy serve``'s server calls :meth:`interrupt`): uvicorn only notes a signal
    until the start is done, which waits for whatever the start waits for (a database that
    never answers: asyncpg's 60 s)."""

    def __init__(self) -> None:
        self.task: asyncio.Task[object] | None = None
        self.signal: int | None = None
        self.refused: Exception | None = None  # the last start's refusal, for its exit status

    def interrupt(self, sig: int) -> bool:
        """Cancel the start in progress, if one is; whether one was."""
        task = self.task
        if task is None or task.done() or self.signal is not None:
            return False
        self.signal = sig
        task.get_loop().call_soon_threadsafe(task.cancel)
        return True


STARTING = Starting()


class StartupRefusals:
    """Reports a start-up refusal as its message alone, instead of the traceback that
    starlette puts in ``lifespan.startup.failed``.

    The app sends that message and then raises; the message is held until the exception
    arrives. For a refusal, its message is logged as one line and the server told of the
    failure with an empty reason, which uvicorn does not log; any other failure goes on
    with its traceback. Other scopes pass through untouched.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        failed: Message | None = None
        STARTING.task, STARTING.signal, STARTING.refused = asyncio.current_task(), None, None

        async def hold_failure(message: Message) -> None:
            nonlocal failed
            if message["type"] == "lifespan.startup.failed":
                failed = message  # sent below, once the exception is known
            else:
                await send(message)

        try:
            await self.app(scope, receive, _started(hold_failure))
        except REFUSALS as exc:
            STARTING.refused = exc
            if failed is not None:
                log.error("cannot start: %s", exc)
                failed = {**failed, "message": ""}
            raise
        except asyncio.CancelledError:
            if failed is not None and STARTING.signal is not None:
                name = signal.Signals(STARTING.signal).name
                log.warning("start interrupted (%s): stopped before serving", name)
                failed = {**failed, "message": ""}
            raise
        finally:
            if failed is not None:
                await send(failed)


def _started(send: Send) -> Send:
    """``send``, which forgets the start's task once the start has ended either way: a
    signal after it is uvicorn's shutdown, not the start's."""

    async def sending(message: Message) -> None:
        if message["type"] in ("lifespan.startup.complete", "lifespan.startup.failed"):
            STARTING.task = None
        await send(message)

    return sending
