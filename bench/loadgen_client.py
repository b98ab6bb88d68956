"""The load generator's HTTP/1.1 client: a few dozen lines over ``asyncio`` streams.

Cheaper than any client library, so on a 2-core box the generator steals as little CPU as it
can from the servers it measures, and it timestamps every chunk as it leaves the socket.
:func:`request` sends one request on a keep-alive :class:`Conn` and returns its
:class:`Sample` (timings) and the assistant's reply; :mod:`bench.capacity` and
:mod:`bench.stream_chunks` send their streamed requests with it too.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Closed", "Sample", "Conn", "request", "split_sse"]

_FRAME_END = re.compile(rb"\r?\n\r?\n")


def split_sse(buffer: bytes) -> tuple[list[bytes], bytes]:
    """Complete SSE frames in ``buffer`` (either line ending) and the unfinished rest."""
    frames: list[bytes] = []
    start = 0
    for match in _FRAME_END.finditer(buffer):
        frames.append(buffer[start : match.start()])
        start = match.end()
    return frames, buffer[start:]


class Closed(Exception):
    """The server closed the connection; reconnect and carry on."""


@dataclass(slots=True)
class Sample:
    """One request's timings (``perf_counter`` seconds) and status; stream timings NaN when none."""

    start: float
    end: float
    status: int
    ttfc: float = math.nan
    span: float = math.nan
    gaps: list[float] = field(default_factory=list)
    frames: int = 0


@dataclass(slots=True)
class Conn:
    """A keep-alive connection, opened on first use and again after the server closes it."""

    host: str
    port: int
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None

    async def open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.reader is None or self.writer is None or self.writer.is_closing():
            self.reader, self.writer = await asyncio.open_connection(
                self.host, self.port, limit=1 << 20
            )
        return self.reader, self.writer

    def drop(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        raise Closed from exc
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
    return status, headers


async def _body_chunks(
    reader: asyncio.StreamReader, headers: dict[str, str]
) -> AsyncIterator[bytes]:
    if "content-length" in headers:
        yield await reader.readexactly(int(headers["content-length"]))
        return
    if "chunked" not in headers.get("transfer-encoding", ""):
        yield await reader.read()  # close-delimited body
        return
    while True:
        size = int((await reader.readline()).split(b";", 1)[0], 16)
        if size == 0:
            while (await reader.readline()) not in (b"\r\n", b""):
                pass
            return
        chunk = await reader.readexactly(size + 2)
        yield chunk[:-2]


def _reply_from_frames(frames: list[bytes]) -> dict[str, Any]:
    text: list[str] = []
    for frame in frames:
        if not frame.startswith(b"data: {"):
            continue
        for choice in json.loads(frame[6:]).get("choices") or []:
            text.append((choice.get("delta") or {}).get("content") or "")
    return {"role": "assistant", "content": "".join(text)}


async def request(conn: Conn, head: bytes, body: bytes, stream: bool) -> tuple[Sample, Any]:
    reader, writer = await conn.open()
    start = time.perf_counter()
    writer.write(head + body)
    await writer.drain()
    status, headers = await _read_head(reader)
    sample = Sample(start, start, status)
    parts: list[bytes] = []
    frames: list[bytes] = []
    rest = b""
    last = math.nan
    async for chunk in _body_chunks(reader, headers):
        now = time.perf_counter()
        if not stream:
            parts.append(chunk)
            continue
        got, rest = split_sse(rest + chunk)
        for frame in got:
            if not frame.startswith(b"data:"):
                continue
            if math.isnan(sample.ttfc):
                sample.ttfc = now - start
            else:
                sample.gaps.append(now - last)
            last = now
            frames.append(frame)
    sample.end = time.perf_counter()
    sample.frames = len(frames)
    sample.span = last - start - sample.ttfc
    if headers.get("connection", "").lower() == "close":
        conn.drop()
    if status != 200:
        return sample, None
    if stream:
        return sample, _reply_from_frames(frames)
    return sample, json.loads(b"".join(parts))["choices"][0]["message"]
