"""A streamed round's answer, from the request sent to the response the relay reads.

``Forwarder.stream`` sends each round's request as a future (``send``) and relays its body;
until the provider's headers arrive it sends keep-alive comments (``keepalive_until``). A
round whose request failed, or whose provider answered with an error status, becomes an error
frame (``round_response``), with the provider's ``Retry-After`` in it when it sent one (a 401,
a 403 or a body of no JSON in the words ``provider_refusal`` rewrote it with, which name the
provider and its status); the provider's error answer is also kept as a response
(``read_refusal``), so a stream that has sent nothing yet can answer with it. A client that
leaves before a round's answer is read does not leave the request behind (``drop``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import Response

from proxy import answers, sse
from proxy.config import ProviderConfig
from proxy.errors import ProxyError, UpstreamTimeout, UpstreamUnavailable
from proxy.jsonio import loads
from proxy.logs import causes
from proxy.observe import note_late_error
from proxy.provider_refusal import relayed
from proxy.stopping import STOPPED, STOPPED_CODE, StopClock
from proxy.upstream import StreamAnswer, response_headers

__all__ = ["drop", "keepalive_until", "read_refusal", "round_response", "stopped_frame"]

log = logging.getLogger("cascade.forward")


async def keepalive_until(
    send: asyncio.Future[StreamAnswer],
    keepalive: float,
    *,
    at_once: bool,
    stop: StopClock | None = None,
) -> AsyncIterator[bytes]:
    """An SSE comment every ``keepalive`` seconds until the provider's headers arrive
    (``send`` done), so clients and middleboxes keep an idle connection open; with
    ``at_once``, the first goes out now. Ends too once ``stop``'s grace has (its caller
    ends the stream)."""
    if at_once and not send.done():
        yield sse.KEEPALIVE
    waits: set[asyncio.Future[Any]] = {send} if stop is None else {send, stop.ended()}
    while not send.done() and not (stop is not None and stop.expired):
        await asyncio.wait(waits, timeout=keepalive)
        if not send.done() and not (stop is not None and stop.expired):
            yield sse.KEEPALIVE


async def read_refusal(resp: StreamAnswer, provider: ProviderConfig) -> Response:
    """A provider's error answer (a status of 400 or more) read whole and closed, as the
    response that relays it as it came (a 401 naming ``provider``: ``provider_refusal``)."""
    try:
        raw = await resp.aread(answers.MAX_ANSWER_BYTES)
    finally:
        await resp.aclose()
    body, headers = relayed(provider, resp, raw, response_headers(resp))
    return Response(body, resp.status_code, headers)


async def round_response(
    send: asyncio.Future[StreamAnswer],
    provider: ProviderConfig,
    stop: StopClock | None = None,
) -> tuple[StreamAnswer, bytes | None, Response | None]:
    """The round's answer, or the error frame for it (with a provider's error status,
    also its response, for a stream that has sent nothing yet); the stop's frame when
    ``stop``'s grace ended before the provider answered. A frame goes out after the
    stream's ``200``: its status (a 5xx) fails the request's span as a whole answer's would."""
    if stop is not None and stop.expired and not send.done():
        return None, stopped_frame(stop.grace), None  # type: ignore[return-value]
    try:
        resp = await send
    except Exception as exc:
        status = getattr(exc, "status_code", 502)
        note_late_error(status)
        event = _failed(exc, status, getattr(exc, "code", None) or str(status))
        return None, event, None  # type: ignore[return-value]
    if resp.status_code < 400:
        return resp, None, None
    try:
        refusal = await read_refusal(resp, provider)
    except (UpstreamUnavailable, UpstreamTimeout) as exc:  # the body broke off/stalled
        note_late_error(exc.status_code)
        return resp, _failed(exc, exc.status_code, exc.code), None
    note_late_error(resp.status_code)  # a 4xx is the client's: no failure of the span
    retry = resp.headers.get("retry-after")
    retry = retry[:64] if retry else None  # the provider's value, seconds or a date, as sent
    said = f" (Retry-After: {retry})" if retry else ""
    if bytes(refusal.body) != await resp.aread():  # rewritten: its message names the provider
        text = f"{loads(refusal.body)['error']['message']}{said}"
    else:
        body = bytes(refusal.body).decode("utf-8", "replace")[:2000]
        text = f"the provider answered {resp.status_code}{said}: {body}"
    return resp, sse.error_event(text, code=str(resp.status_code), retry_after=retry), refusal


def stopped_frame(grace: float) -> bytes:
    """The error frame of a stream the stop's grace ended (``stopping.py``), logged once
    (the request's line names its session)."""
    log.warning(
        "stopping: a chat stream was still open after the stop's grace (%g s); it ends with "
        "an error event, its turn stored",
        grace,
    )
    return sse.error_event(STOPPED, type="server_error", code=STOPPED_CODE)


def _failed(exc: Exception, status: int, code: str) -> bytes:
    """The error frame (of ``code``) for a round with no answer to relay, logged with the
    error's causes (and its traceback when it is none of the proxy's own errors)."""
    log.warning(
        "%d in a stream, sent as an error event: %s%s",
        status,
        exc,
        causes(exc),
        exc_info=not isinstance(exc, ProxyError),
    )
    return sse.error_event(str(exc), code=code)


async def drop(send: asyncio.Future[StreamAnswer]) -> None:
    """Cancel a round's request still in flight, or close its answer if it came: the client
    may leave before that answer is read, and its connection must not linger (a second close
    of an answer already read does nothing)."""
    if not send.done():
        send.cancel()
    elif not send.cancelled() and send.exception() is None:
        await send.result().aclose()
