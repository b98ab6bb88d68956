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

import zlib

from proxy.errors import ClientRequestError, PayloadTooLarge, UnsupportedMediaType

__all__ = ["DECODED", "MAX_CODINGS", "MAX_MEMBERS", "codings", "decoded", "shown"]

DECODED = ("gzip", "deflate")
"""The content codings a request body may come in (``x-gzip`` is ``gzip``'s old name)."""

_ALIASES = {"x-gzip": "gzip"}
_NAMED = frozenset(
    ("gzip", "x-gzip", "deflate", "identity", "br", "zstd", "compress", "x-compress")
    + ("aes128gcm", "exi", "pack200-gzip", "dcb", "dcz")
)  # IANA's content codings: only these are quoted
MAX_CODINGS = 4
"""How many codings a body may name: each is a pass over up to the body's limit."""
MAX_MEMBERS = 64
"""How many ``gzip`` members a body may hold: each costs a decoder of its own."""
_STEP = 64 << 10  # the input fed a decoder at a time: what follows a member is never copied


def _named(header: str) -> list[str]:
    return [c.strip().lower() for c in header.split(",") if c.strip()]


def shown(header: str) -> str:
    """``header`` (a ``Content-Encoding``) as a message or the access line may quote it:
    its codings' names when each is a content coding's (IANA's registry), else
    ``unreadable``: a header the client wrote holds no free text of its in a log."""
    named = _named(header)
    fits = named and len(named) <= MAX_CODINGS and all(c in _NAMED for c in named)
    return ", ".join(named) if fits else "unreadable"


def codings(header: str | None) -> list[str]:
    """The codings ``header`` (a ``Content-Encoding``) names, in the order they were applied,
    ``identity`` left out; the 415 for one not in ``DECODED``, or for more than
    ``MAX_CODINGS``."""
    named = _named(header or "")
    out = [_ALIASES.get(c, c) for c in named if c != "identity"]
    if len(out) > MAX_CODINGS:
        raise UnsupportedMediaType(
            f"request body names {len(out)} content codings; the proxy undoes at most"
            f" {MAX_CODINGS}",
            code="unsupported_content_encoding",
        )
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
        try:
            raw = _undo(raw, coding, limit, where)
        except zlib.error as exc:
            raise ClientRequestError(
                f"request body is not valid {coding} ({exc}), as its Content-Encoding says"
            ) from None
    return raw


def _undo(raw: bytes, coding: str, limit: int, where: str) -> bytes:
    """One coding undone, bounded: each member of a ``gzip`` body (members may follow one
    another, up to ``MAX_MEMBERS``), and ``deflate`` as zlib's stream, or the raw stream
    some clients send; data after a ``deflate`` stream's end is no deflate.

    A raw stream's first two bytes may pass zlib's header check (one in 31 of those that
    begin with a stored block does): read as zlib's, it fails (a length, a block or the
    checksum does not check), and it is read again from its start as the raw stream, within
    the same limit; when that fails too, the zlib error is the one named. A body decoding
    past the limit is the 413 at once, never decoded twice."""
    if coding == "gzip":
        return _inflate(raw, coding, 16 + zlib.MAX_WBITS, limit, where)
    if not _zlib_header(raw):
        return _inflate(raw, coding, -zlib.MAX_WBITS, limit, where)
    try:
        return _inflate(raw, coding, zlib.MAX_WBITS, limit, where)
    except zlib.error as first:
        try:
            return _inflate(raw, coding, -zlib.MAX_WBITS, limit, where)
        except zlib.error:
            raise first from None


def _zlib_header(raw: bytes) -> bool:
    """Whether ``raw`` begins with zlib's two bytes (RFC 1950: the method 8, the check)."""
    return len(raw) >= 2 and raw[0] & 0x0F == 8 and (raw[0] << 8 | raw[1]) % 31 == 0


def _inflate(raw: bytes, coding: str, wbits: int, limit: int, where: str) -> bytes:
    """``raw`` inflated (``wbits``: zlib's, gzip's or the raw stream), fed ``_STEP`` bytes at
    a time: what a member's end leaves over is at most that, never the rest of the body."""
    view, at = memoryview(raw), 0
    out: list[bytes] = []
    size, members, fed = 0, 1, False
    inflater = zlib.decompressobj(wbits)
    pending: bytes | memoryview = b""
    while pending or at < len(raw):
        if not pending:
            pending, at = view[at : at + _STEP], at + _STEP
        part = inflater.decompress(pending, limit + 1 - size)
        fed = True
        size += len(part)
        out.append(part)
        if size > limit:  # the output stopped one byte past it: the rest is never decoded
            raise PayloadTooLarge(
                f"request body decodes ({coding}) past the limit of {limit} bytes{where}"
            )
        pending = inflater.unused_data if inflater.eof else b""
        if inflater.eof and (pending or at < len(raw)):  # another member follows
            if coding != "gzip":
                raise zlib.error("data follows the stream's end")
            members += 1
            if members > MAX_MEMBERS:
                raise zlib.error(f"more than {MAX_MEMBERS} gzip members")
            inflater, fed = zlib.decompressobj(wbits), False
    if fed and not inflater.eof:
        raise zlib.error("the stream ends before its end")
    return b"".join(out)
