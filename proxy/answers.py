"""A provider's answer as the proxy's callers get it from ``Upstream``: whole (``Answer``) or
read as it arrives (``StreamAnswer``), and the headers of it that are relayed to the client
(``response_headers``)."""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from proxy.answer_budget import AnswerBudget, Lease
from proxy.config import ProviderConfig
from proxy.credentials import scrub_bytes, scrub_text, sent_secrets
from proxy.errors import UpstreamBadResponse
from proxy.jsonio import dumps, loads, loads_json
from proxy.provider_errors import mapped_errors, provider_name
from proxy.requestlog import UpstreamTimer

__all__ = [
    "Answer",
    "ASK_FOR_LESS",
    "MAX_ANSWER_BYTES",
    "MAX_EMBEDDINGS_BYTES",
    "StreamAnswer",
    "RELAY_RESPONSE_HEADERS",
    "over_cap",
    "read_capped",
    "response_headers",
    "scrub_error",
    "scrubbed",
    "size_text",
]

MAX_ANSWER_BYTES = 32 << 20
"""The most a provider's whole chat answer, and each single event of a streamed one, may
hold (a model list too, ``/v1/models``): the request body's own default cap, which no answer
without logprobs comes near (128k tokens of output are about half a MiB). A provider that
sends more (a runaway gateway, a line that never ends) would otherwise have the proxy buffer
all of it, several times over once parsed; past it the call is an ``upstream_bad_response``.
Read at each call, so a test can lower it."""

MAX_EMBEDDINGS_BYTES = 256 << 20
"""The most an embeddings answer (``/v1/embeddings``, relayed whole) may hold: OpenAI's
largest batch, 2,048 inputs of 3,072 dimensions, is about 100 MiB as JSON numbers and past
32 MiB even as base64, so ``MAX_ANSWER_BYTES`` would refuse answers a provider gives; past
this one the answer is a runaway. Read at each call, as that one is."""

ASK_FOR_LESS = "ask for less: max_tokens, logprobs"
"""What a chat's answer over its cap says to do (``over_cap``)."""

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
# the account a call was billed to: with the proxy's own key, the operator's, which no tenant
# reads; no SDK reads either
_KEPT_BACK = frozenset(("openai-organization", "openai-project"))

_DECODER = json.JSONDecoder()


@dataclass(frozen=True, slots=True, weakref_slot=True)
class Answer:
    """A provider's whole (non-streamed) answer: status, headers and the decoded body (an
    error's with the credential the call sent scrubbed, ``scrubbed``). ``request`` is the
    call's, whose ``Authorization`` ``scrub`` reads (only then: a success needs none)."""

    status_code: int
    headers: httpx.Headers
    content: bytes
    request: httpx.Request | None = field(default=None, repr=False, compare=False)

    def scrub(self, text: str) -> str:
        """``text`` (a provider's words the proxy quotes) without the credential sent."""
        return scrub_text(text, sent_secrets(self.request))

    def json(self) -> Any:
        """The body parsed; what orjson refuses and ``json`` reads (a lone surrogate escape,
        ``NaN``), as a client's SDK reads it, is read by ``json``."""
        try:
            return loads(self.content)
        except ValueError:
            return loads_json(self.content, constants=True)

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
        except (ValueError, RecursionError):  # cut off, not JSON, or nested past the limit
            return None

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


def scrubbed(status: int, body: bytes, request: httpx.Request | None) -> bytes:
    """An answer's body as the proxy surfaces it: an error's (a status of 400 or more) without
    the credential ``request`` sent (``proxy.credentials``), a success's as it came."""
    return body if status < 400 else scrub_error(body, request)


def scrub_error(body: bytes, request: httpx.Request | None) -> bytes:
    """An error's body without the credential ``request`` sent, as bytes or as a JSON escape
    spells it (``_escapes_scrubbed``): whatever quotes an error (a relayed body, a log line,
    an event) quotes it so. A body that reads as UTF-16 or UTF-32 (``_wide``) is scrubbed so
    too, after its bytes are: a UTF-8 one with a zero byte in its head reads as one."""
    secrets = sent_secrets(request)
    out = scrub_bytes(body, secrets)
    out = _escapes_scrubbed(out, secrets) if secrets and b"\\u" in out else out
    if secrets and (wide := _wide(body)) is not None:
        return _wide_scrubbed(out, wide, secrets)
    return out


_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),  # before UTF-16's, which its first two bytes spell
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def _wide(body: bytes) -> tuple[bytes, str] | None:
    """A UTF-16 or UTF-32 body's byte-order mark (or none) and encoding, by its mark, else
    by the zero bytes of a JSON text's first characters (RFC 4627's reading, which a
    client's JSON parser makes); None for any other body. Its bytes spell no key as the
    header did, one byte per character."""
    for bom, encoding in _BOMS:
        if body.startswith(bom):
            return bom, encoding
    found = json.detect_encoding(body[:4]) if len(body) >= 4 else "utf-8"
    return (b"", found) if found.startswith(("utf-16", "utf-32")) else None


def _wide_scrubbed(body: bytes, wide: tuple[bytes, str], secrets: tuple[str, ...]) -> bytes:
    """A UTF-16 or UTF-32 body scrubbed as its text (its JSON escapes too), written back in
    its own encoding; as it came when it spells none of ``secrets``, or does not decode."""
    bom, encoding = wide
    try:
        text = body[len(bom) :].decode(encoding)
    except UnicodeDecodeError:
        return body
    plain = text.encode("utf-8", "surrogatepass")
    out = scrub_bytes(plain, secrets)
    out = _escapes_scrubbed(out, secrets) if b"\\u" in out else out
    if out == plain:
        return body
    return bom + out.decode("utf-8", "surrogatepass").encode(encoding, "surrogatepass")


def _escapes_scrubbed(body: bytes, secrets: tuple[str, ...]) -> bytes:
    """``body`` written again, scrubbed, when a JSON escape in it spells one of ``secrets``
    that its bytes do not: a JSON writer may escape any character (.NET's writes ``+`` as
    ``\\u002B``), and a client's parser reads the key out whole. Else as it came, byte for
    byte. The escapes are read in the bytes, not in what ``json`` keeps: a member a later
    duplicate hides from it is one a first-wins parser reads, and writing a body again
    spells its numbers anew (``1e6`` as ``1000000.0``), where no escape spelled a key."""
    unescaped = _ESCAPE.sub(_character, body)
    if scrub_bytes(unescaped, secrets) == unescaped:
        return body
    try:
        data = loads_json(body)
    except (ValueError, RecursionError):
        return body
    return scrub_bytes(dumps(data), secrets)


# A surrogate pair's two escapes, read as the one character they spell, else one escape.
_ESCAPE = re.compile(rb"(?i)\\u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})|\\u([0-9a-f]{4})")


def _character(m: re.Match[bytes]) -> bytes:
    """The UTF-8 bytes of the character an escape, or a surrogate pair's two, spell (a lone
    surrogate half's own)."""
    if m[3] is not None:
        return chr(int(m[3], 16)).encode("utf-8", "surrogatepass")
    high, low = int(m[1], 16), int(m[2], 16)
    return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)).encode()


def over_cap(
    provider: ProviderConfig, status: int, what: str, cap: int, hint: str = ASK_FOR_LESS
) -> UpstreamBadResponse:
    """The 502 for an answer (``what``: its whole body, one event of its stream) over ``cap``
    bytes; its message, logged once, names the provider and the cap, and says what to do
    (``hint``)."""
    return UpstreamBadResponse(
        f"{provider_name(provider)} answered {status} with {what} over the proxy's cap of "
        f"{size_text(cap)}; the proxy closed it unread ({hint})"
    )


def size_text(cap: int) -> str:
    """``cap`` as a message names it: in MiB when it is whole ones, else in bytes."""
    return f"{cap >> 20} MiB" if cap >= 1 << 20 and not cap % (1 << 20) else f"{cap} bytes"


async def read_capped(
    resp: httpx.Response,
    provider: ProviderConfig,
    cap: int | None,
    hint: str = ASK_FOR_LESS,
    lease: Lease | None = None,
) -> bytes:
    """``resp``'s body, read as it arrives; past ``cap`` bytes (None: no cap) the
    ``over_cap`` 502 (saying ``hint``), the rest left unread for the caller's close to drop
    with its connection. A break is the 502 of a body that broke off (``mapped_errors``).
    With ``lease``, each piece takes its bytes from the lease's budget first (a 503 when
    none frees up: ``answer_budget``), and a budget smaller than ``cap`` is the cap; the
    caller's ``with lease`` gives them back when the read, or what follows it, fails."""
    limit = lease.budget.limit if lease is not None else 0
    if limit > 0 and (cap is None or limit < cap):
        cap, hint = limit, "the proxy's budget for whole answers, CASCADE_MAX_HELD_ANSWER_BYTES"
    with mapped_errors(provider, answered=resp.status_code):
        if cap is None and limit <= 0:
            return await resp.aread()
        parts: list[bytes] = []
        size = 0
        async for part in resp.aiter_bytes():
            size += len(part)
            if cap is not None and size > cap:
                raise over_cap(provider, resp.status_code, "a body", cap, hint)
            if lease is not None:
                await lease.grow(len(part))
            parts.append(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


class StreamAnswer:
    """A provider's answer whose body is read as it arrives; ``aclose`` it when done."""

    def __init__(
        self,
        resp: httpx.Response,
        provider: ProviderConfig,
        timer: UpstreamTimer | None = None,
        budget: AnswerBudget | None = None,
    ) -> None:
        """``budget``: what a body read whole (``aread``) takes its bytes from."""
        self._budget = budget if budget is not None else AnswerBudget()
        self._resp = resp
        self._provider = provider
        self._timer = timer
        self.status_code = resp.status_code
        self.headers = resp.headers
        self._body: bytes | None = None
        self._failure: str | None = None  # why the body broke off, for the call's span

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """Each piece as soon as it is received (decoded when compressed); a broken
        connection raises only after every byte that arrived before the break was yielded
        (test_chat_stream_failures.py's mid-stream reset test guards this)."""
        try:
            async for chunk in self._resp.aiter_bytes():
                yield chunk
        except Exception as exc:
            self._failure = type(exc).__name__
            raise

    async def aread(self, cap: int | None = None) -> bytes:
        """The whole body (a provider's error answer), at most ``cap`` bytes (``read_capped``),
        an error's without the credential the call sent (``scrubbed``)."""
        if self._body is None:  # read once: a second reader (the relay of one looked at) gets it
            with Lease(self._budget) as lease:
                body = await read_capped(self._resp, self._provider, cap, lease=lease)
                self._body = scrubbed(self.status_code, body, self._resp.request)
                lease.tie(self)
        return self._body

    @property
    def request(self) -> httpx.Request | None:
        """The call's request, whose ``Authorization`` ``scrub`` reads."""
        return self._resp.request

    def scrub(self, text: str) -> str:
        """``text`` (a provider's error the proxy sends in-band or logs) without the
        credential the call sent."""
        return scrub_text(text, sent_secrets(self.request))

    def failed(self, kind: str) -> None:
        """The answer failed in its body though its status is a success (an error event, a
        stream cut short or malformed): ``kind`` names how for the call's metrics and span,
        unless a break (``ReadError``) already did."""
        self._failure = self._failure or kind

    async def aclose(self) -> None:
        await self._resp.aclose()  # a second close does nothing
        if self._timer is not None:  # the request's upstream time ends with the stream
            self._timer.stop(self.status_code, failure=self._failure)


def response_headers(resp: Answer | StreamAnswer) -> dict[str, str]:
    """Upstream headers worth relaying: content type, Retry-After, request ids, rate limits;
    not the account the call was billed to (``openai-organization``, ``openai-project``).

    Never ``content-encoding`` or ``content-length``: the body relayed is the decoded one.
    Values are the provider's bytes read one character per byte (Starlette encodes them back
    the same way), so a value such as ``x-request-id: €`` in UTF-8 goes out as sent, less
    the credential the call sent (a gateway that echoes the ``Authorization`` it got in an
    id would hand the operator's key to every tenant), whatever the status. The content
    type is relayed as sent: no gateway echoes a credential in it, the client reads the body
    by it, and a placeholder key that is one of its words ("stream") would garble it.
    """
    out: dict[str, str] = {}
    sent: tuple[str, ...] | None = None
    for raw_key, raw_value in resp.headers.raw:
        key = raw_key.decode("latin-1").lower()
        if key in RELAY_RESPONSE_HEADERS or (
            key.startswith(_RELAY_PREFIXES) and key not in _KEPT_BACK
        ):
            if sent is None:
                sent = sent_secrets(resp.request)
            value = raw_value.decode("latin-1")
            if key != "content-type":
                value = scrub_text(value, sent)
            out[key] = f"{out[key]}, {value}" if key in out else value
    return out
