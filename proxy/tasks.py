"""Stopping a background task the proxy started (the bus's listener and keeper, the lease
renewal, the embedding worker, the startup's fact keying): cancelled, then awaited, so
that whatever it holds is let go before the caller goes on. Its cancellation is the
expected end and is not raised again."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

__all__ = ["stop_task"]


async def stop_task(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it has ended."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
