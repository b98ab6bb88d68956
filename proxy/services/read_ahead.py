"""A stream's first piece read before its response starts, so that what the body meets first
can still be the response: ``Forwarder.stream`` reads one piece of a stream that offers
``read_tool_output`` ahead, and a later round's provider error met before any byte went out
(``Refused``) answers with the provider's status instead of a 200 and an in-band error."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

from starlette.responses import Response

from proxy.config import ProviderConfig
from proxy.provider_errors import log_relayed

if TYPE_CHECKING:
    import httpx

__all__ = ["Refused", "after_first", "refuse"]


class Refused(Exception):  # noqa: N818 - not an error of the proxy's: the provider's answer
    """A later round's provider error while the stream has sent nothing: ``Forwarder.stream``
    answers with ``response`` instead of a 200."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status_code)
        self.response = response


async def after_first(
    first: bytes, rest: AsyncGenerator[bytes, None]
) -> AsyncGenerator[bytes, None]:
    """``first`` (read ahead by ``Forwarder.stream``), then the rest of the body; closing this
    closes the body, whose ``finally`` ends the turn."""
    try:
        yield first
        async for piece in rest:
            yield piece
    finally:
        await rest.aclose()


def refuse(
    provider: ProviderConfig,
    refusal: Response,
    *,
    opened: bool,
    request: httpx.Request | None = None,
) -> None:
    """A later round's provider error: in-band once the stream has sent a byte, else raised
    as ``Refused``, to be the response as a non-streamed request's error is (``request``:
    the call's, whose query key ``log_relayed`` names)."""
    if opened:
        how = "relayed as an error event"
        log_relayed(provider, refusal.status_code, how, request=request)
        return
    log_relayed(provider, refusal.status_code, request=request)
    raise Refused(refusal)
