"""Stopping a background task the proxy started (the bus's listener and keeper, the lease
renewal, the embedding worker, the startup's fact keying): cancelled, then awaited, so
that whatever it holds is let go before the caller goes on. Its cancellation is the
expected end and is not raised again; a cancellation of the caller itself while it waits
(a shutdown under a deadline) is the caller's, and is. A caller already being cancelled as
it calls (a clean-up in a ``finally``) still waits for the task and goes on."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["stop_task"]


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
