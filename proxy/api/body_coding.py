"""A request body sent with ``Content-Encoding``: decoded, bounded as it decodes, or refused.

A client (a gateway, an SDK set to compress large chat bodies) may send its body ``gzip`` or
``deflate`` encoded. Such a body is decoded before it is read as JSON, and its decoded size
is bounded by the same limit as the body as sent: decoding stops one byte past it, so a
small body that decodes to gigabytes (a zip bomb) is the 413 naming the coding, never held.
A coding the proxy does not decode (``br``, ``zstd``, ``compress``: no decoder bounds its
output here) is the 415 naming it and the codings taken; a body that does not decode as
its coding says is the 400. The coding is noted on the request's record, so its access line
names it (README Decisions, "Compressed request bodies").
"""

from __future__ import annotations

import re
import zlib

from proxy.errors import ClientRequestError, PayloadTooLarge, UnsupportedMediaType

__all__ = ["DECODED", "codings", "decoded", "shown"]

DECODED = ("gzip", "deflate")
"""The content codings a request body may come in (``x-gzip`` is ``gzip``'s old name)."""

_ALIASES = {"x-gzip": "gzip"}
_TOKEN = re.compile(r"[A-Za-z0-9._+-]{1,40}(?:, ?[A-Za-z0-9._+-]{1,40}){0,3}")


def shown(header: str) -> str:
    """``header`` (a ``Content-Encoding``) as a message or the access line may quote it:
    as it came when it reads as a few codings' names, else ``unreadable`` (a header the
    client wrote: no free text of its reaches a log)."""
    return header if _TOKEN.fullmatch(header) else "unreadable"


def codings(header: str | None) -> list[str]:
    """The codings ``header`` (a ``Content-Encoding``) names, in the order they were applied,
    ``identity`` left out; the 415 for one not in ``DECODED``."""
    named = [c.strip().lower() for c in (header or "").split(",") if c.strip()]
    out = [_ALIASES.get(c, c) for c in named if c != "identity"]
    for coding in out:
        if coding not in DECODED:
            raise UnsupportedMediaType(
                f"request body is Content-Encoding {shown(coding)!r}, which the proxy does not"
                f" decode; send it uncompressed, or as {' or '.join(DECODED)}",
                code="unsupported_content_encoding",
            )
    return out


def decoded(raw: bytes, applied: list[str], limit: int, where: str = "") -> bytes:
    """``raw`` with each of ``applied`` undone, last applied first; the 413 once a decoded
    form passes ``limit`` bytes (``where``: the setting that sets it, as the 413 names it)."""
    for coding in reversed(applied):
        raw = _undo(raw, coding, limit, where)
    return raw


def _undo(raw: bytes, coding: str, limit: int, where: str) -> bytes:
    """One coding undone, bounded: each member of a ``gzip`` body (members may follow one
    another), and ``deflate`` as zlib's stream, or the raw stream some clients send."""
    wbits = 16 + zlib.MAX_WBITS if coding == "gzip" else zlib.MAX_WBITS
    out: list[bytes] = []
    size, left = 0, raw
    try:
        while left:
            try:
                inflater = zlib.decompressobj(wbits)
                part = inflater.decompress(left, limit + 1 - size)
            except zlib.error:
                if coding != "deflate" or wbits < 0 or out:
                    raise
                wbits = -zlib.MAX_WBITS  # a raw deflate stream, without zlib's header
                continue
            size += len(part)
            out.append(part)
            if size > limit or inflater.unconsumed_tail:
                raise PayloadTooLarge(
                    f"request body decodes ({coding}) past the limit of {limit} bytes{where}"
                )
            if not inflater.eof:
                raise zlib.error("the stream ends before its end")
            left = inflater.unused_data if coding == "gzip" else b""
    except zlib.error as exc:
        raise ClientRequestError(
            f"request body is not valid {coding} ({exc}), as its Content-Encoding says"
        ) from None
    return b"".join(out)
