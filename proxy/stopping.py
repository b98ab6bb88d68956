"""The process's stop as the work in flight sees it: a bound on how long it may go on.

uvicorn's stop (SIGTERM, a Ctrl-C) waits for every request in flight, and a chat stream
whose provider answers slowly would hold it without bound, until the orchestrator's SIGKILL
cut it unstored. :class:`StopClock` gives that work a grace (``CASCADE_STOP_GRACE_SECONDS``)
from the stop's start: past it each chat stream still open ends itself with an error frame
and ``[DONE]``, and its turn is stored as a stream that broke off is
(``services/forward.py``); a memory promotion still running is waited for until then
(``services/compaction.py``).

The stop's start is each app's own: the ``should_exit`` of the uvicorn server that serves
it (:func:`serving`: the one whose ``serve`` runs the app's event loop and whose lifespan
state holds the app's clock), under ``serve`` and a plain ``uvicorn proxy.app:create_app
--factory`` alike; :func:`watch_stop` polls it and begins the clock, which ends the app's
session event streams too (``api/events.py``). sse-starlette's own stop,
``AppStatus.should_exit``, is one flag for the process, which any server's stop set and
nothing reset, so a process running two servers (the tests, an embedding) ended the other's
streams at one's stop: it is turned off here (``AppStatus.disable_automatic_graceful_drain``,
its documented switch), and no sse-starlette stream ends at a stop but by its generator.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Collection
from typing import Any

import uvicorn
from sse_starlette.sse import AppStatus

__all__ = [
    "STOP_GRACE_SECONDS",
    "STORE_SECONDS",
    "POLL_SECONDS",
    "STOPPED",
    "STOPPED_CODE",
    "StopClock",
    "serving",
    "watch_stop",
    "within_grace",
]

log = logging.getLogger("cascade")

STOP_GRACE_SECONDS = 25.0
"""The default grace: within Kubernetes' default ``terminationGracePeriodSeconds`` (30 s)
with room to store the turns it ended and close the lifespan before the SIGKILL."""

STORE_SECONDS = 5.0
"""What ``serve`` adds to the grace for uvicorn's own bound (``timeout_graceful_shutdown``),
which cancels whatever still runs: the streams the grace ended store their turns within it."""

POLL_SECONDS = 0.1
"""How often :func:`watch_stop` reads the stop's flag (uvicorn reads its own as often)."""


STOPPED = (
    "the proxy stopped before the answer was complete (its stop's grace ran out); retry the request"
)
"""The error frame's message for a chat stream the stop's grace ended."""
STOPPED_CODE = "server_stopping"


AppStatus.disable_automatic_graceful_drain()  # type: ignore[no-untyped-call]  # each app its own


class StopClock:
    """Not begun, begun (:meth:`begin`), then past its grace (``expired``), from when each
    stream watching it (:meth:`watch`) is woken to end itself. Runs on the event loop."""

    def __init__(self, grace: float = STOP_GRACE_SECONDS) -> None:
        self.grace = grace
        self.expired = False
        self.deadline: float | None = None  # the loop's time the grace ends, once begun
        self._wakes: set[Callable[[], None]] = set()
        self._begins: set[Callable[[], None]] = set()
        self._ended: asyncio.Future[None] | None = None

    def begin(self) -> None:
        """Start the grace (once: a second signal does not lengthen or shorten it)."""
        if self.deadline is not None:
            return
        loop = asyncio.get_running_loop()
        self.deadline = loop.time() + self.grace
        loop.call_at(self.deadline, self._expire)
        for wake in list(self._begins):
            wake()

    def on_begin(self, wake: Callable[[], None]) -> Callable[[], None]:
        """Call ``wake`` (once) when the stop begins, at once when it has; what the
        returned call undoes."""
        if self.deadline is not None:
            wake()
            return lambda: None
        self._begins.add(wake)
        return functools.partial(self._begins.discard, wake)

    def left(self) -> float | None:
        """Seconds of the grace left (0 once past it); ``None`` before the stop."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - asyncio.get_running_loop().time())

    def ended(self) -> asyncio.Future[None]:
        """A future done once the grace is over, for a wait that must end with it."""
        if self._ended is None:
            self._ended = asyncio.get_running_loop().create_future()
            if self.expired:
                self._ended.set_result(None)
        return self._ended

    def watch(self, wake: Callable[[], None]) -> Callable[[], None]:
        """Call ``wake`` (once) when the grace ends; what the returned call undoes."""
        self._wakes.add(wake)
        return functools.partial(self._wakes.discard, wake)

    def _expire(self) -> None:
        self.expired = True
        if self._ended is not None and not self._ended.done():
            self._ended.set_result(None)
        for wake in list(self._wakes):
            wake()


async def within_grace(
    clock: StopClock, tasks: Collection[asyncio.Task[Any]], what: str, lost: str
) -> int:
    """Wait for ``tasks`` (a live collection: one added meanwhile is waited for too) until
    ``clock``'s grace is over (a whole grace from now when the stop has not begun: a
    lifespan closed with no signal); how many still run then, said in one warning naming
    ``what`` they are and what is ``lost`` when the caller cuts them."""
    loop = asyncio.get_running_loop()
    left = clock.left()
    until = loop.time() + (clock.grace if left is None else left)
    while (pending := {task for task in tasks if not task.done()}) and loop.time() < until:
        await asyncio.wait(
            pending, timeout=until - loop.time(), return_when=asyncio.FIRST_COMPLETED
        )
    if pending:
        log.warning(
            "stopping: %d %s still running after the stop's grace (%g s) are cut; %s",
            len(pending),
            what,
            clock.grace,
            lost,
        )
    return len(pending)


def serving(clock: StopClock) -> uvicorn.Server | None:
    """The uvicorn server serving the app whose clock is ``clock``: one whose ``serve`` the
    running loop's tasks await (at their root under ``Server.run``, deeper when embedded)
    and whose lifespan state holds ``clock`` (two servers may share a loop). None before the
    lifespan's start is done, and under another server."""
    return _serving(clock, _servers())


def _serving(clock: StopClock, servers: list[uvicorn.Server]) -> uvicorn.Server | None:
    return next((s for s in servers if _state(s).get("stop") is clock), None)


def _servers() -> list[uvicorn.Server]:
    """The uvicorn servers whose ``serve`` the running loop's tasks await."""
    found: list[uvicorn.Server] = []
    for task in asyncio.all_tasks():
        coro: Any = task.get_coro()
        while coro is not None:
            frame = getattr(coro, "cr_frame", None)
            server = frame.f_locals.get("self") if frame is not None else None
            if isinstance(server, uvicorn.Server) and server not in found:
                found.append(server)
            coro = getattr(coro, "cr_await", None)
    return found


def _state(server: uvicorn.Server) -> dict[str, Any]:
    return getattr(getattr(server, "lifespan", None), "state", None) or {}


async def watch_stop(clock: StopClock) -> None:
    """Begin ``clock`` once the stop of the server serving its app (:func:`serving`) has
    begun; the lifespan runs it as a task and cancels it as it closes. Another server's stop
    in the process is not this app's. The search walks the loop's tasks, so it ends as soon
    as it cannot succeed, rather than walk them every poll for the life of the process: no
    uvicorn server on the loop (another ASGI server, a test client), or each one serving
    already (``started``, its lifespan's start done) with another app's clock."""
    while (server := _serving(clock, servers := _servers())) is None:
        if all(s.started for s in servers):
            return  # no stop of this app's server to watch: its own stop ends what runs
        await asyncio.sleep(POLL_SECONDS)
    while not server.should_exit:
        await asyncio.sleep(POLL_SECONDS)
    clock.begin()
