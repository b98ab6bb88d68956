"""The two threads the proxy's long CPU work runs on, below both the services and the
store: a tool output's page (a grep reads every line of up to ``rawCapBytes``;
read_tool_output also redacts it) and the chain hash of a message with a long text
(``store.client_form.hashes_to``). Not the event loop, which would answer no other request
meanwhile, and not its default executor, which also runs a turn's query embedding under the
turn's retrieval timeout and DNS lookups, where a burst of greps or long hashes queued ahead
of them would run the timeout out. Both kinds take the interpreter's lock for their whole
run, so more threads than two, or a pool each, would make none faster; a call still queued
when its request is cancelled (the client went away) is never made. At process exit
``concurrent.futures`` joins the threads once, those begun running to their end."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["THREAD_PREFIX", "off_loop"]

T = TypeVar("T")

THREAD_PREFIX = "cascade-page"
"""The threads' names begin with it (``cascade-page_0``): what a profile or a thread dump
shows them as."""

_THREADS = ThreadPoolExecutor(max_workers=2, thread_name_prefix=THREAD_PREFIX)


async def off_loop(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on a work thread, in the caller's context (its request id
    and trace span for the log lines it writes), as ``asyncio.to_thread`` runs it."""
    context = contextvars.copy_context()
    call = functools.partial(context.run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_THREADS, call)
