"""Relay one upstream SSE stream to the client, event by event, never buffering a whole answer.

Each upstream event is forwarded byte for byte the moment its blank line arrives, except:
- the usage-only frame the proxy asked for (``stream_options.include_usage``) when the client
  did not ask for it;
- when the proxy offered ``read_tool_output``: the tool-call deltas of that internal tool are
  removed (client tool calls are renumbered from 0), and a round that called only internal
  tools ends silently (no finish frame, no ``[DONE]``) so the next internal round continues the
  same client stream.
While the upstream is silent, an SSE comment keep-alive goes out every ``keepalive`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio

from proxy import sse
from proxy.cascade.types import READ_TOOL_OUTPUT
from proxy.upstream import StreamAnswer

__all__ = ["RoundOutcome", "relay_round", "pump"]

_EOF = object()


@dataclass(slots=True)
class RoundOutcome:
    acc: sse.StreamAccumulator = field(default_factory=sse.StreamAccumulator)
    # (choice index, upstream tool index) -> internal? Each choice numbers its calls from 0.
    internal: dict[tuple[int, int], bool] = field(default_factory=dict)
    saw_done: bool = False
    error: str | None = None  # the stream broke off: the relay reports it
    provider_error: bool = False  # the provider sent an error frame: relayed as it came

    @property
    def only_internal(self) -> bool:
        return bool(self.internal) and all(self.internal.values())


QUEUED_CHUNKS = 8  # pieces of a provider's stream (each what came since the last) read ahead


async def pump(resp: StreamAnswer, queue: asyncio.Queue[Any]) -> None:
    """Read the upstream body into a queue (a reader the relay can wait on with a timeout)."""
    try:
        async for chunk in resp.aiter_bytes():
            await queue.put(chunk)
        await queue.put(_EOF)
    except Exception as exc:  # mid-stream reset: report it in-band
        await queue.put(exc)


def _rewrite(chunk: dict[str, Any], out: RoundOutcome) -> dict[str, Any] | None:
    """Drop internal tool-call deltas and renumber client ones; None when nothing is left."""
    changed = False
    for pos, choice in enumerate(chunk.get("choices") or []):
        delta = choice.get("delta") or {}
        calls = delta.get("tool_calls")
        if not calls:
            continue
        which = choice.get("index", pos)
        kept = []
        for call in calls:
            idx = call.get("index", 0)
            name = (call.get("function") or {}).get("name")
            if (which, idx) not in out.internal and name:
                out.internal[which, idx] = name == READ_TOOL_OUTPUT
            if out.internal.get((which, idx)):
                changed = True
                continue
            client_idx = sum(1 for (c, i), v in out.internal.items()
                             if c == which and i < idx and not v)
            if client_idx != idx:
                call = {**call, "index": client_idx}
                changed = True
            kept.append(call)
        delta["tool_calls"] = kept
        if not kept:
            del delta["tool_calls"]
    if not changed:
        return chunk
    empty = all(
        not (c.get("delta") or {}) and c.get("finish_reason") is None
        for c in chunk.get("choices") or []
    )
    return None if empty and chunk.get("choices") else chunk


async def relay_round(
    resp: StreamAnswer, out: RoundOutcome, *, strip_usage: bool, intercept: bool,
    keepalive: float,
) -> AsyncIterator[bytes]:
    """Yield client bytes for one upstream round; fill ``out`` with what the round said."""
    # Bounded, so a client that reads slowly slows the provider (nothing reads from its socket
    # while the queue is full) instead of the proxy holding the whole answer.
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=QUEUED_CHUNKS)
    reader = asyncio.create_task(pump(resp, queue))
    splitter = sse.EventSplitter()
    held: list[bytes] = []  # finish/usage/DONE frames of a round that may turn out internal
    try:
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), timeout=keepalive)
            except TimeoutError:
                yield sse.KEEPALIVE
                continue
            if item is _EOF:
                tail = splitter.flush()
                if tail.strip():
                    yield tail
                break
            if isinstance(item, Exception):
                out.error = f"the provider's stream broke off ({type(item).__name__})"
                break
            for event in splitter.feed(item):
                for piece in _handle(event, out, strip_usage=strip_usage, intercept=intercept,
                                     held=held):
                    yield piece
        if intercept and not out.only_internal:
            for piece in held:
                yield piece
    finally:
        # Shielded (and bounded): when the client hangs up, Starlette cancels this generator's
        # scope, and an unshielded await would re-cancel the reader mid-cleanup; the caller
        # then closes the upstream connection so the provider stops generating.
        reader.cancel()
        with anyio.move_on_after(5, shield=True), contextlib.suppress(
            asyncio.CancelledError, Exception
        ):
            await reader


def _handle(
    event: bytes, out: RoundOutcome, *, strip_usage: bool, intercept: bool, held: list[bytes]
) -> list[bytes]:
    if sse.is_done(event):
        out.saw_done = True
        if intercept:
            held.append(event)
            return []
        return [event]
    chunk = sse.parse_chunk(event)
    if chunk is None:
        return [event]
    if "error" in chunk and not chunk.get("choices"):
        out.provider_error = True
    out.acc.add(chunk)
    if sse.is_usage_only(chunk):
        if strip_usage:
            return []
        if intercept:
            held.append(event)
            return []
        return [event]
    if not intercept:
        return [event]
    before = json.dumps(chunk, separators=(",", ":"))
    rewritten = _rewrite(json.loads(before), out)
    if rewritten is None:
        return []
    finishing = any(c.get("finish_reason") for c in rewritten.get("choices") or [])
    data = event if rewritten == chunk else sse.encode_event(rewritten)
    if finishing:
        held.append(data)
        return []
    return [data]
