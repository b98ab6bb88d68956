"""Whether a request's client is still there, learnt from the ASGI ``receive`` channel.

Once a request's body is read, the server's ``receive`` has one message left for it,
``http.disconnect``, when the client closes its connection (or the response is complete):
Starlette's ``StreamingResponse`` listens for it that way (``listen_for_disconnect``), and
``Request.is_disconnected`` peeks at it. A chat request that waits before its response
starts, for its session (this replica's queue, ``SessionLocks``; or the lease another
replica holds, polled), would otherwise go on after its client left: the provider called
for nobody and billed (a client that retries on a timeout piles such calls up on a busy
session). The session API's reset, delete, branch and compact wait the same two ways and
are watched the same way (``OPERATION_WAITING``): run after their client left, a retried
branch found its target made by the abandoned one (a 400), a reset or delete ran that nobody
still asked for, and a compaction called the fast model for nobody.

A streamed request is watched while it waits for the provider's headers, up to a keep-alive
interval before its response begins (``Forwarder.stream``): a client gone then would
otherwise keep the provider answering nobody, and its session held, for that interval; the
listener is one task, against a wait for a provider's first byte.
A non-streamed provider call is not watched: the listener costs every such request tens of
microseconds of the server's ``receive`` path (docs/perf.md, "Smaller items"), on the path
whose overhead bars are closest. A client that hangs up during one leaves the session busy
until the answer ends, and the reply is stored; a stream's response listens itself.

``ClientWatch`` listens with one task, started at the request's first such wait and kept
until the response is about to go out (the route's ``with`` ends it), so a request costs at
most one awaitable, and none when it never waits (a non-streamed request on a free session).
``guard`` wraps one wait: when the client leaves during it, the task running it is cancelled
and the wait raises ``ClientDisconnected``, the shape of ``asyncio.timeout`` (the
cancellation is the guard's own, told apart from any other by ``Task.uncancel``). A client
that left between two waits is found at the next one's start, or by ``check``.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType

from starlette.types import Receive

from proxy.errors import ClientDisconnected
from proxy.requestlog import session_wait
from proxy.services.lease_wakeups import Wake

__all__ = [
    "ClientWatch",
    "pause",
    "watching",
    "WAITING",
    "OPERATION_WAITING",
    "HEADERS_WAITING",
    "COMPACTION_WAITING",
]

WAITING = "while its request waited for the session; the provider was not called"
OPERATION_WAITING = "while its session operation waited for the session; nothing was changed"
HEADERS_WAITING = "before its stream began; the provider's call was cancelled"
COMPACTION_WAITING = (
    "while its request waited for the compaction of its session in flight; "
    "the provider was not called"
)


def watching(client: ClientWatch | None, why: str) -> contextlib.AbstractContextManager[None]:
    """``client.guard(why)``, or nothing to watch with when there is no client watch."""
    return client.guard(why) if client is not None else contextlib.nullcontext()


async def _listen(receive: Receive) -> bool:
    """True once the client has gone; False if the channel fails (it then tells nothing)."""
    try:
        while (await receive())["type"] != "http.disconnect":
            pass  # an unread body's rest, as Starlette's own listener skips it
    except Exception:
        return False
    return True


def _disconnected(why: str) -> ClientDisconnected:
    return ClientDisconnected(f"the client went away {why}")


class ClientWatch:
    """One request's watch on its client (module docstring); a context manager that stops
    listening on exit, before the response takes ``receive`` over."""

    __slots__ = ("_receive", "_listener")

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self._listener: asyncio.Task[bool] | None = None

    def __enter__(self) -> ClientWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop listening (a pending ``receive`` is cancelled; nothing is lost by it)."""
        if self._listener is not None and not self._listener.done():
            self._listener.cancel()

    @property
    def gone(self) -> bool:
        """Whether the client has been seen to leave (only a started watch sees it)."""
        t = self._listener
        return t is not None and t.done() and not t.cancelled() and t.result()

    def check(self, why: str) -> None:
        """Raise ``ClientDisconnected`` if the client has been seen to leave."""
        if self.gone:
            raise _disconnected(why)

    def guard(self, why: str) -> _Guard:
        """A ``with`` block around one wait that ``ClientDisconnected`` (naming ``why``)
        ends when the client leaves; it starts the watch's listener if need be."""
        if self._listener is None:
            self._listener = asyncio.get_running_loop().create_task(_listen(self._receive))
        return _Guard(self, self._listener, why)


class _Guard:
    __slots__ = ("_watch", "_listener", "_why", "_task", "_cancelling", "_active", "_fired")

    def __init__(self, watch: ClientWatch, listener: asyncio.Task[bool], why: str) -> None:
        self._watch = watch
        self._listener = listener
        self._why = why
        self._active = self._fired = False

    def __enter__(self) -> None:
        self._watch.check(self._why)
        task = asyncio.current_task()
        assert task is not None, "a guard runs in a task"
        self._task = task
        self._cancelling = task.cancelling()
        self._active = True
        self._listener.add_done_callback(self._on_gone)

    def _on_gone(self, listener: asyncio.Task[bool]) -> None:
        # Scheduled by the loop, so it may run after the block ended: ``_active`` says.
        if self._active and not listener.cancelled() and listener.result():
            self._fired = True
            self._task.cancel()

    def __exit__(
        self,
        typ: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._active = False
        self._listener.remove_done_callback(self._on_gone)
        if not self._fired:
            return
        # The cancellation was the guard's own unless another one is still pending.
        if self._task.uncancel() <= self._cancelling and typ is asyncio.CancelledError:
            raise _disconnected(self._why) from None


async def pause(
    client: ClientWatch | None, seconds: float, why: str = WAITING, wake: Wake | None = None
) -> None:
    """``asyncio.sleep(seconds)`` between two polls of a held lease, cut short by
    ``ClientDisconnected`` (naming ``why``) when the client leaves, and ended early when
    ``wake`` (the waiter's registration, ``lease_wakeups``) hears that the session was freed;
    noted as time the request waited for its session (``requestlog.session_wait``)."""
    with session_wait(), watching(client, why):
        if wake is None:
            await asyncio.sleep(seconds)
        else:
            await wake.wait(seconds)
