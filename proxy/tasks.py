"""Stopping a background task the proxy started (the bus's listener and keeper, the lease
renewal, the embedding worker, the startup's fact keying): cancelled, then awaited, so
that whatever it holds is let go before the caller goes on. Its cancellation is the
expected end and is not raised again; a cancellation of the caller itself while it waits
(a shutdown under a deadline) is the caller's, and is. A caller already being cancelled as
it calls (a clean-up in a ``finally``) still waits for the task and goes on.

A task nobody awaits (a request's background compaction, a promotion) says its failure
itself (:func:`said_if_failed`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

__all__ = ["said_if_failed", "stop_task"]

log = logging.getLogger("cascade")


async def stop_task(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it has ended; raises ``CancelledError`` only when the
    caller's own task was cancelled meanwhile (``Task.cancelling`` grew), however the task
    ended: one that suppresses the cancellation the caller's passes on to it returns, and
    the caller's would be lost with it."""
    current = asyncio.current_task()
    before = current.cancelling() if current is not None else 0

    def caller_cancelled() -> bool:
        return current is not None and current.cancelling() > before

    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        if caller_cancelled():
            raise
        return
    if caller_cancelled():
        raise asyncio.CancelledError


def said_if_failed(what: str) -> Callable[[asyncio.Task[Any]], None]:
    """A done callback: a task that raised is one ERROR line naming ``what``, with its
    traceback, as it ends, in the context it was started from (a request's: its ids). Else
    asyncio says "Task exception was never retrieved" only once the task is collected, in
    whatever runs then, another request's task too, whose ids the line would carry."""

    def done(task: asyncio.Task[Any]) -> None:
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("%s failed: %s: %s", what, type(exc).__name__, exc, exc_info=exc)

    return done
