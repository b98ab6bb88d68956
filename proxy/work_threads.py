"""The threads the proxy's long CPU work runs on, below both the services and the store:
:data:`PAGES` for a tool output's page (a grep reads every line of up to ``rawCapBytes``;
read_tool_output also redacts it), :data:`HASHES` for the chain hash of a message with a
long text (``store.client_form.hashes_to``) and :data:`BODIES` for a compressed request body
decoded up to its limit. Not the event loop, which would answer no other
request meanwhile, and not its default executor, which also runs a turn's query embedding
under the turn's retrieval timeout and DNS lookups, where a burst of greps or long hashes
queued ahead of them would run the timeout out.

Two threads each: the work takes the interpreter's lock as it runs, so more would make none
faster. A pool each, not one for both: a pool runs its queue in order, and a hash on the
request path (a chat turn's read_tool_output of a pinned result, a session listing's rows)
queued behind a burst of greps would wait for the whole burst; on threads of its own it
shares the interpreter with the greps running and is done in a few times its own time. A
call still queued when its request is cancelled (the client went away) is never made. At
process exit ``concurrent.futures`` joins the threads, each running what it was given."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["BODIES", "HASHES", "PAGES", "off_loop"]

T = TypeVar("T")

PAGES = ThreadPoolExecutor(max_workers=2, thread_name_prefix="cascade-page")
"""A tool output's pages: greps and redactions (``cascade-page_0`` in a thread dump)."""

HASHES = ThreadPoolExecutor(max_workers=2, thread_name_prefix="cascade-hash")
"""Long messages' chain hashes (``cascade-hash_0`` in a thread dump)."""

BODIES = ThreadPoolExecutor(max_workers=2, thread_name_prefix="cascade-body")
"""Compressed request bodies' decoding (``api.body_coding``: zlib lets go of the
interpreter's lock as it inflates), apart from the pages and hashes a turn waits for."""


async def off_loop(threads: Executor, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on one of ``threads`` (:data:`PAGES`, :data:`HASHES`), in the
    caller's context (its request id and trace span for the log lines it writes), as
    ``asyncio.to_thread`` runs it."""
    context = contextvars.copy_context()
    call = functools.partial(context.run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(threads, call)
