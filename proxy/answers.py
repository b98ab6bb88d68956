"""A provider's answer as the proxy's callers get it from ``Upstream``: whole (``Answer``) or
read as it arrives (``StreamAnswer``), and the headers of it that are relayed to the client
(``response_headers``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from proxy.config import ProviderConfig
from proxy.jsonio import loads
from proxy.provider_errors import mapped_errors
from proxy.requestlog import UpstreamTimer

__all__ = ["Answer", "StreamAnswer", "RELAY_RESPONSE_HEADERS", "response_headers"]

# ``retry-after-ms`` and ``x-should-retry`` are what OpenAI's SDKs read first to decide when,
# and whether, to retry an error: without them a client retries on the coarser ``retry-after``
# alone, or retries an error the provider said not to.
RELAY_RESPONSE_HEADERS = (
    "content-type",
    "retry-after",
    "retry-after-ms",
    "x-should-retry",
    "x-request-id",
    "openai-processing-ms",
)
_RELAY_PREFIXES = ("x-ratelimit-", "openai-")

_DECODER = json.JSONDecoder()


@dataclass(frozen=True, slots=True)
class Answer:
    """A provider's whole (non-streamed) answer: status, headers and the decoded body."""

    status_code: int
    headers: httpx.Headers
    content: bytes

    def json(self) -> Any:
        return loads(self.content)

    def usage(self) -> Any:
        """The answer's ``usage`` value (None when it has none), read from its last
        ``"usage"`` key on without parsing what comes before: an embeddings answer relayed
        as it came is mostly ``data``, megabytes of numbers, and its usage comes last."""
        at = self.content.rfind(b'"usage"')
        tail = self.content[at + 7 :].decode("utf-8", "replace").lstrip() if at >= 0 else ""
        if not tail.startswith(":"):
            return None
        try:
            return _DECODER.raw_decode(tail[1:].lstrip())[0]
        except ValueError:
            return None

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


class StreamAnswer:
    """A provider's answer whose body is read as it arrives; ``aclose`` it when done."""

    def __init__(
        self, resp: httpx.Response, provider: ProviderConfig, timer: UpstreamTimer | None = None
    ) -> None:
        self._resp = resp
        self._provider = provider
        self._timer = timer
        self.status_code = resp.status_code
        self.headers = resp.headers

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """Each piece as soon as it is received (decoded when compressed); a broken
        connection raises only after every byte that arrived before the break was yielded
        (test_chat_stream_failures.py's mid-stream reset test guards this)."""
        async for chunk in self._resp.aiter_bytes():
            yield chunk

    async def aread(self) -> bytes:
        with mapped_errors(self._provider, answered=self.status_code):  # broken off: a 502
            return await self._resp.aread()

    async def aclose(self) -> None:
        await self._resp.aclose()  # a second close does nothing
        if self._timer is not None:  # the request's upstream time ends with the stream
            self._timer.stop(self.status_code)


def response_headers(resp: Answer | StreamAnswer) -> dict[str, str]:
    """Upstream headers worth relaying: content type, Retry-After, request ids, rate limits.

    Never ``content-encoding`` or ``content-length``: the body relayed is the decoded one.
    Values are the provider's bytes read one character per byte (Starlette encodes them back
    the same way), so a value such as ``x-request-id: €`` in UTF-8 goes out as sent.
    """
    out: dict[str, str] = {}
    for raw_key, raw_value in resp.headers.raw:
        key = raw_key.decode("latin-1").lower()
        if key in RELAY_RESPONSE_HEADERS or key.startswith(_RELAY_PREFIXES):
            value = raw_value.decode("latin-1")
            out[key] = f"{out[key]}, {value}" if key in out else value
    return out
