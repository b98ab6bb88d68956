"""The threads a tool output's page is made on (a grep reads every line of up to
``rawCapBytes``; read_tool_output also redacts it): not the event loop, which would answer
no other request meanwhile, and not its default executor, which also runs a turn's query
embedding under the turn's retrieval timeout, where a burst of greps queued ahead of it
would run the timeout out. Pages take the interpreter's lock for their whole run, so more
threads than two would make none faster; a page still queued when its request is cancelled
(the client went away) is never made."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["make_page"]

T = TypeVar("T")

_THREADS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="cascade-page")


async def make_page(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on a page thread, in the caller's context (its request id
    and trace span for the log lines it writes), as ``asyncio.to_thread`` runs it."""
    context = contextvars.copy_context()
    call = functools.partial(context.run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_THREADS, call)
