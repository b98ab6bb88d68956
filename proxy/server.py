"""``cascade-proxy serve``'s uvicorn server, whose second Ctrl-C quits quietly.

The first Ctrl-C (or SIGTERM) is uvicorn's graceful shutdown: no new connections, the
requests in flight finish (a chat stream within the stop's grace, ``proxy.stopping``; what
still runs past it and ``STORE_SECONDS`` more, uvicorn's ``timeout_graceful_shutdown``
cancels), then the lifespan closes. A second Ctrl-C is uvicorn's force
exit: it stops waiting and ends its event loop with those requests still running, and each
task cancelled there, every request's and the lifespan's, logs its cancellation as an error
with a traceback (through ``uvicorn.error``), a screenful that reads like a crash. It is
not one: the user asked to abandon that work. So after a second Ctrl-C the server's error
lines are left out, one line says what was cut, and the exit status is 130 (128 + SIGINT,
what a shell gives an interrupted command; after a SIGTERM's stop, the process ends by the
SIGTERM, raised once the event loop has closed; as a container's PID 1, which a signal
with no handler does not end, it exits with that signal's status, 128 + it). The shutdown
is uvicorn's own, unchanged: the lifespan's cleanup still runs as its task is cancelled (the
embedded PostgreSQL is stopped).
uvicorn's stop waits for every connection to close, and one whose client reads nothing (a
frozen console's event stream, closed with bytes unsent; a paused client's chat stream,
whose send waits on it) would close only once it reads: the stop cuts it after
:data:`UNREAD_SECONDS`, so it ends and runs the lifespan's cleanup before an orchestrator's
kill.
A first signal while the lifespan still starts cancels the start (uvicorn would only note it
until the start is done, however long that takes), and the exit status is that signal's. The
start says so in one line (``proxy.refusals``), the last: uvicorn's ``Application startup
failed. Exiting.``, an error of a start that did not fail but was stopped, is left out.

uvicorn binds its address only after the lifespan has started, so on a port another process
holds the start-up block ("listening on ...") came first and the bind error after it. The
address is bound and listened on here before uvicorn runs, and handed to it: a port taken is
one error line and a failed start before anything else starts, and the block, logged by the
lifespan, comes once the address is the server's. Listened on at once, not when the
lifespan is done: another server bound to it too (two starts at once: binding alone does not
exclude one another) would fail only as it listens, inside uvicorn's start. A connection
made during the start waits in the backlog for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import signal
import socket
import struct
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.config import STARTUP_FAILURE

from proxy.refusals import STARTING
from proxy.tasks import stop_task

try:
    import fcntl
    import termios

    _OUTQ: int | None = termios.TIOCOUTQ  # a socket's SIOCOUTQ on Linux
except ImportError:  # no such ioctl here: the transport's own count alone
    _OUTQ = None

__all__ = ["serve", "INTERRUPTED"]

log = logging.getLogger("cascade")

INTERRUPTED = 128 + signal.SIGINT
"""The exit status after a second Ctrl-C."""


UNREAD_SECONDS = 10.0
"""How long a stop lets a connection whose client reads nothing (a frozen console's event
stream closed with bytes unsent, a paused client's chat stream whose send waits on it) wait
before it cuts it: a client that takes any of the server's unsent bytes within it, however
slowly it reads, is waited for."""


STARTUP_FAILED = "Application startup failed. Exiting."
"""What uvicorn's lifespan logs, through ``uvicorn.error``, as any start ends without serving."""


def _no_errors(record: logging.LogRecord) -> bool:
    return record.levelno < logging.ERROR


def _no_failed_start(record: logging.LogRecord) -> bool:
    return record.msg != STARTUP_FAILED


class _Server(uvicorn.Server):
    forced = False
    interrupted: int | None = None
    stopped_by: int | None = None
    """The stop's signal, when not a Ctrl-C, after a second Ctrl-C: the exit is by it."""
    terminated_by: int | None = None
    """The first signal taken that is not a Ctrl-C: the exit is by it, or, where raising it
    does not end the process (a container's PID 1: no signal has a default action for it),
    with its status (128 + it)."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """Run in a context of its own: a signal's handler runs in whatever the main thread
        was running, a request's task too, whose ids its lines would carry as if that request
        had stopped the process."""
        contextvars.Context().run(self._handle_exit, sig, frame)

    def _handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig != signal.SIGINT and self.terminated_by is None:
            self.terminated_by = sig
        if not self.started and STARTING.interrupt(sig):
            self.interrupted = sig  # the start ends now, not once it is done
            logging.getLogger("uvicorn.error").addFilter(_no_failed_start)
        if self.started and not self.force_exit:
            self._say_stopping(sig)
        super().handle_exit(sig, frame)
        if self.force_exit:
            self._raise_later()
        if self.force_exit and not self.forced:
            self.forced = True
            logging.getLogger("uvicorn.error").addFilter(_no_errors)
            log.warning(
                "interrupted again: quitting now, cutting %d open connection(s)",
                len(self.server_state.connections),
            )

    def _raise_later(self) -> None:
        """Take the signals other than SIGINT out of those uvicorn raises again as its
        loop ends (``_captured_signals``), for ``serve`` to raise once the loop has closed:
        uvicorn raises them inside the loop, a SIGTERM by its default action, which ended
        the process before the lifespan's task was cancelled, its cleanup (the embedded
        PostgreSQL's stop) skipped. SIGINTs stay: the second one ends the loop, which
        cancels that task."""
        captured = self._captured_signals
        for sig in captured:
            if sig != signal.SIGINT and self.stopped_by is None:
                self.stopped_by = sig
        captured[:] = [sig for sig in captured if sig == signal.SIGINT]

    def _say_stopping(self, sig: int) -> None:
        """One line for the stop's signal: what the stop waits for, or, for a signal
        after the first that is not a Ctrl-C (uvicorn takes it silently), that it goes on."""
        name = signal.Signals(sig).name
        open_now = len(self.server_state.connections)
        if not self.should_exit:
            log.info(
                "stopping on %s: no new connections; waiting for the %d open connection(s) "
                "to finish their requests (event streams end now; a Ctrl-C quits at once)",
                name,
                open_now,
            )
        elif sig != signal.SIGINT:
            log.info(
                "%s again: still waiting for %d open connection(s); a Ctrl-C (SIGINT) "
                "quits at once",
                name,
                open_now,
            )

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        reaper = asyncio.create_task(self._cut_unread())
        try:
            await super().shutdown(sockets)
        finally:
            await stop_task(reaper)

    async def _cut_unread(self) -> None:
        """While the stop waits for the connections to close: cut each one whose client has
        read nothing for :data:`UNREAD_SECONDS`, the server waiting on it all that time (its
        writes paused: a stream's send waits on it; or its transport closing with bytes
        unsent, which waits for them to be read, and the stop with it) and not one byte of
        the server's unsent bytes taken (:func:`_unsent`). A client reading, however slowly,
        takes some within it: the state alone holds as long as a large answer written at
        once takes to read. A connection it cannot judge (an error asking its transport) is
        left to the stop's wait, said once: the others are still cut."""
        waiting: dict[object, tuple[float, int]] = {}  # since when, and the bytes unsent then
        failed: set[object] = set()
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            cut = 0
            for connection in list(self.server_state.connections):
                if connection in failed:
                    continue
                try:
                    cut += _judge(connection, now, waiting)
                except Exception as exc:
                    failed.add(connection)
                    log.warning("stopping: cannot judge a connection's client: %r", exc)
            if cut:
                log.warning(
                    "stopping: cut %d connection(s) whose client read nothing for %g s",
                    cut,
                    UNREAD_SECONDS,
                )
            await asyncio.sleep(0.1)


def _judge(connection: Any, now: float, waiting: dict[object, tuple[float, int]]) -> bool:
    """Note ``connection``'s unsent bytes in ``waiting`` (since when, and how many) and cut
    it once the server has waited on its client, reading nothing, for :data:`UNREAD_SECONDS`;
    whether it cut it now."""
    if not _unread(connection):
        waiting.pop(connection, None)
        return False
    unsent = _unsent(connection.transport)
    since, before = waiting.get(connection, (now, unsent))
    if since == float("inf"):
        return False  # cut already, gone at the loop's next turn
    # Changed: the client read some (a paused send writes again only once the client took
    # the buffer down to its low-water mark), so it waits from now on.
    if unsent != before:
        since = now
    waiting[connection] = (since, unsent)
    if now - since < UNREAD_SECONDS:
        return False
    connection.transport.abort()
    waiting[connection] = (float("inf"), unsent)
    return True


def _unread(connection: Any) -> bool:
    """Whether the server waits on ``connection``'s client to read: its writes paused (the
    buffer past its high-water mark), or its transport closing with bytes still unsent."""
    transport = getattr(connection, "transport", None)
    if transport is None:
        return False
    flow = getattr(connection, "flow", None)
    return bool(transport.is_closing() or (flow is not None and flow.write_paused))


def _unsent(transport: Any) -> int:
    """The bytes ``transport`` holds for its client, and those its socket holds still
    unacknowledged (Linux's ``SIOCOUTQ``, where the socket answers it): the socket's
    buffer, grown large for a large answer, takes the transport's next bytes only once much
    of it is free, so a slow reader can take bytes for seconds with the transport's count
    unchanged."""
    unsent = int(transport.get_write_buffer_size())
    sock = transport.get_extra_info("socket")
    if _OUTQ is not None and sock is not None:
        with contextlib.suppress(OSError, ValueError):  # not a TCP socket, or closed
            answer = fcntl.ioctl(sock.fileno(), _OUTQ, b"\0\0\0\0")
            unsent += struct.unpack("i", answer)[0]
    return unsent


def bind(host: str, port: int, backlog: int) -> list[socket.socket]:
    """Listening sockets on ``host``:``port``, one per address ``host`` resolves to, as
    asyncio's ``create_server`` (uvicorn's) opens them: ``SO_REUSEADDR``, IPv6 ones
    IPv6-only. ``OSError`` if any fails."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(backlog)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def serve(app: Any, **config: Any) -> int:
    """Run ``app`` under uvicorn (``config``: ``uvicorn.Config``'s arguments) until it stops;
    the exit status: 0, uvicorn's for a failed start (3), or :data:`INTERRUPTED`; or the
    process ends by the signal that stopped it (a SIGTERM, also when a Ctrl-C cut its stop
    short), once the lifespan's cleanup has run; as PID 1, which that signal does not end,
    its status (128 + it) instead."""
    server = _Server(uvicorn.Config(app, **config))
    host, port = server.config.host, server.config.port
    try:
        sockets = bind(host, port, server.config.backlog)
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", host, port, exc.strerror or exc)
        return STARTUP_FAILURE
    try:
        server.run(sockets=sockets)
    except KeyboardInterrupt:  # uvicorn raises the captured Ctrl-C again once it stopped
        pass
    except SystemExit:  # uvicorn's failed start, which skips raising the captured signal
        if server.interrupted is None:
            raise
    finally:
        for sock in sockets:  # uvicorn closes them on a shutdown, not on a failed start
            sock.close()
        logging.getLogger("uvicorn.error").removeFilter(_no_errors)  # those added, if any
        logging.getLogger("uvicorn.error").removeFilter(_no_failed_start)
    # A start cut short exits by its signal, as a stop once serving does; a Ctrl-C that quit
    # a SIGTERM's stop, by the SIGTERM.
    for sig in (server.interrupted, server.stopped_by):
        if sig not in (None, signal.SIGINT):
            signal.raise_signal(sig)
            return 128 + sig  # still here: PID 1, whose signals have no default action
    if server.started and not server.forced and server.terminated_by is not None:
        return 128 + server.terminated_by  # uvicorn raised it again, and PID 1 went on
    if server.forced or server.interrupted == signal.SIGINT:
        return INTERRUPTED
    return 0 if server.started else STARTUP_FAILURE
