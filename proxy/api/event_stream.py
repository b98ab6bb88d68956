"""The session event stream's response: one closed for a client that reads nothing ends
with one warning of the proxy's, not uvicorn's error line about an unfinished response; so
does one a stop ends while its client reads nothing (the stop's warning)."""

from __future__ import annotations

import contextvars
import logging

from sse_starlette.sse import EventSourceResponse, SendTimeoutError
from starlette.types import Message, Receive, Scope, Send

__all__ = ["UNFINISHED", "EventStream", "quiet_stalled"]

log = logging.getLogger("cascade")

_STALLED: contextvars.ContextVar[bool] = contextvars.ContextVar("stalled", default=False)
"""Set in the server's task for a request whose stream was closed for a stalled client."""


class EventStream(EventSourceResponse):
    """A stream closed for a client that reads nothing (its ``send_timeout``) ends
    with one warning: the response, left unfinished, has the server close the connection,
    and uvicorn's error line about that is dropped (``quiet_stalled``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        sent = _Sent(send)
        try:
            await super().__call__(scope, receive, sent)
            # A stop that cancels a send its client does not take leaves the response
            # unfinished too: the stop cuts that connection, and says so (proxy/server.py).
            if sent.unfinished:
                _STALLED.set(True)
        except SendTimeoutError:
            _STALLED.set(True)
            log.warning(
                "an event stream's client read nothing for %g s; closing it (its reconnect "
                "replays)",
                self.send_timeout,
            )


class _Sent:
    """``send``, noting what went through it (ASGI's messages, not the response's private
    state): whether the response began and never ended, which is when uvicorn logs
    :data:`UNFINISHED`."""

    __slots__ = ("_send", "started", "ended")

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = self.ended = False

    async def __call__(self, message: Message) -> None:
        await self._send(message)
        if message["type"] == "http.response.start":
            self.started = True
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            self.ended = True

    @property
    def unfinished(self) -> bool:
        return self.started and not self.ended


UNFINISHED = "ASGI callable returned without completing response."


def quiet_stalled(record: logging.LogRecord) -> bool:
    """A filter for ``uvicorn.error``: drops its line about an unfinished response when the
    response is a stream closed for a stalled client (logged by ``EventStream``)."""
    return not (record.msg == UNFINISHED and _STALLED.get())


logging.getLogger("uvicorn.error").addFilter(quiet_stalled)
