"""Relay one upstream SSE stream to the client, event by event, never buffering a whole answer.

Each upstream event is forwarded byte for byte the moment its blank line arrives (the events
one read of the provider's body completes go out together, in one write), except:
- the usage-only frame the proxy asked for (``stream_options.include_usage``) when the client
  did not ask for it;
- when the proxy offered ``read_tool_output``: the tool-call deltas of that internal tool are
  removed (client tool calls are renumbered from 0; a call's fragments are held until its
  name comes, ``relay_calls.py``), and a round that called only internal
  tools ends silently (its finish reasons, usage and ``[DONE]`` are held back) so the next
  internal round continues the same client stream;
- frames that would break that one stream (``ClientStream``, ``client_stream.py``): a later
  round's frames take the first round's ``id``, ``created``, ``model`` and
  ``system_fingerprint``, and a choice's second ``role`` is removed, because clients that
  accumulate deltas (the openai SDK's stream helper) concatenate every string they get, the
  role included; with ``read_tool_output`` offered, a first frame that says nothing but the
  role waits for the first frame that says more, so a round that calls only that tool sends
  no byte;
- an event that is not UTF-8: each invalid sequence goes out as U+FFFD, as it is read;
- an event with no data (``event: ping`` alone), which the SDKs would raise on: dropped.
What follows ``[DONE]`` goes out as it came but is not read: a client stops at ``[DONE]``, so
the answer (and the reply stored) is what came before it. A whole last event whose blank line
never came (the provider closed after its line) is read, and goes out, as if it had.
A stream that ends with neither ``[DONE]`` nor a finish reason on every choice did not finish,
nor did one whose ``[DONE]`` comes before any chat chunk:
the round reports it in ``RoundOutcome.error`` (``round_outcome.py``), as it does a stream that
breaks off, a body that holds no chat chunk (but a whole JSON completion, a provider's that
ignored ``stream``, held whole however its lines run (``sse.BodySplitter``), goes out as its
stream, read as one; an error object as an error frame),
and a chunk whose choices or tool calls are malformed (``chunk_faults.malformed``) or a data
event that is no JSON object, which ends the round before it:
the relay, the stored reply and the client would each read it differently. So does an event
over ``MAX_ANSWER_BYTES``, ended or not, and the provider's connection is closed unread.
While the upstream is silent, an SSE comment keep-alive goes out every ``keepalive`` seconds.
Once a stop's grace is over (``proxy/stopping.py``) the round ends where it is, its provider
silent or still sending (``stop_ended``), and the caller sends the stop's error frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import anyio

from proxy import answers, chunk_faults, chunks, sse
from proxy.services.client_stream import ClientStream, empty_choice, unfinished
from proxy.services.relay_calls import has_tool_calls, rewrite
from proxy.services.round_outcome import RoundOutcome, broke_off, capped, ends, stop_ended
from proxy.stopping import StopClock
from proxy.upstream import StreamAnswer

__all__ = ["ClientStream", "RoundOutcome", "relay_round", "pump"]

_EOF = object()
_STOP = object()  # the stop's grace ended (``StopClock``): the round ends where it is
_KEEPALIVE = object()  # the provider was silent for the wait: a comment goes out


NO_CHAT = "the provider's answer is no chat stream"
_SDK_FIELD = re.compile(rb"(?:^|[\r\n])(?:event|id|retry):")  # a field an SDK makes an event of
QUEUED_CHUNKS = 8  # pieces of a provider's stream (each what came since the last) read ahead


async def pump(resp: StreamAnswer, queue: asyncio.Queue[Any]) -> None:
    """Read the upstream body into a queue (a reader the relay can wait on with a timeout)."""
    try:
        async for chunk in resp.aiter_bytes():
            await queue.put(chunk)
        await queue.put(_EOF)
    except Exception as exc:  # mid-stream reset: report it in-band
        await queue.put(exc)


async def relay_round(
    resp: StreamAnswer,
    out: RoundOutcome,
    *,
    strip_usage: bool,
    intercept: bool,
    keepalive: float,
    client: ClientStream | None = None,
    max_event: int | None = None,
    first_wait: float | None = None,
    stop: StopClock | None = None,
) -> AsyncIterator[bytes]:
    """Yield client bytes for one upstream round; fill ``out`` with what the round said.

    ``client`` carries the stream across the rounds of one request (a new one if omitted).
    An event over ``max_event`` bytes (None: ``answers.MAX_ANSWER_BYTES`` as it is now), ended
    or not, ends the round before it (``capped``). ``first_wait``: how long the first silence
    may last before its comment, when bytes are due sooner than an interval from now.
    ``stop``: once its grace ends, the round ends where it is (``stop_ended``), a provider
    that is silent or still sending alike.
    """
    client = client if client is not None else ClientStream()
    max_event = answers.MAX_ANSWER_BYTES if max_event is None else max_event
    # Bounded, so a client that reads slowly slows the provider (nothing reads from its socket
    # while the queue is full) instead of the proxy holding the whole answer.
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=QUEUED_CHUNKS)
    reader = asyncio.create_task(pump(resp, queue))
    splitter = sse.BodySplitter()
    held: list[bytes] = []  # finish/usage/DONE frames of a round that may turn out internal
    tail = b""
    stop = stop if stop is not None else StopClock()  # one that never begins
    unwatch = stop.watch(lambda: _wake(queue))
    try:
        while True:
            wait, first_wait = (keepalive if first_wait is None else first_wait), None
            item = await _next(queue, wait, stop)
            if item is _KEEPALIVE:
                yield client.emit(sse.KEEPALIVE)
                continue
            if item is _STOP:
                stop_ended(out)
                break
            if item is _EOF:
                now, tail = _ending(
                    splitter.flush(),
                    out,
                    strip_usage=strip_usage,
                    intercept=intercept,
                    held=held,
                    client=client,
                )
                for piece in now:
                    yield client.emit(piece)
                break
            if isinstance(item, Exception):
                broke_off(item, out)
                break
            events = splitter.feed(item)
            over = capped(events, splitter, max_event)
            pieces = [
                piece
                for event in events
                for piece in _handle(
                    event,
                    out,
                    strip_usage=strip_usage,
                    intercept=intercept,
                    held=held,
                    client=client,
                )
            ]
            if pieces:  # what one read completed goes out in one write, as the floor's does
                yield client.emit(pieces[0] if len(pieces) == 1 else b"".join(pieces))
            if ends(out, over):  # a malformed or oversized event: the round ends before it
                break
        if intercept:  # a round that failed is no internal one: its error goes out whole
            internal = out.only_internal and not out.provider_error
            for piece in unfinished(held) if internal else held:
                yield client.emit(piece)
        if tail.strip():
            yield client.emit(tail)
    finally:
        unwatch()
        # Shielded (and bounded): when the client hangs up, Starlette cancels this generator's
        # scope, and an unshielded await would re-cancel the reader mid-cleanup; the caller
        # then closes the upstream connection so the provider stops generating.
        reader.cancel()
        with (
            anyio.move_on_after(5, shield=True),
            contextlib.suppress(asyncio.CancelledError, Exception),
        ):
            await reader


async def _next(queue: asyncio.Queue[Any], wait: float, stop: StopClock) -> Any:
    """The provider's next piece, :data:`_KEEPALIVE` after ``wait`` seconds of silence, or
    :data:`_STOP` once ``stop``'s grace is over (read first: a provider still sending is
    not waited for)."""
    if stop.expired:
        return _STOP
    if not queue.empty():
        return queue.get_nowait()
    try:  # under a timer, no task of its own (as wait_for's)
        async with asyncio.timeout(wait):
            return await queue.get()
    except TimeoutError:
        return _KEEPALIVE


def _wake(queue: asyncio.Queue[Any]) -> None:
    """Wake a relay that waits on its provider (:func:`_next`): a full queue has one not
    waiting, which reads the stop's flag at its next turn."""
    with contextlib.suppress(asyncio.QueueFull):
        queue.put_nowait(_STOP)


def _ending(
    tail: bytes,
    out: RoundOutcome,
    *,
    strip_usage: bool,
    intercept: bool,
    held: list[bytes],
    client: ClientStream,
) -> tuple[list[bytes], bytes]:
    """At the end of the body: the pieces to send now, and the unterminated rest to send last.

    A last event without its blank line (``[DONE]``, a whole chunk) counts as one with it,
    and goes out with it. An answer that did not finish gets ``out.error``, and any other
    unterminated rest is dropped: it would run into the error frame.
    """
    now: list[bytes] = []
    kw = {"strip_usage": strip_usage, "intercept": intercept}
    whole = _json_object(tail)
    if whole is not None and not (out.acc.indices or out.saw_done or out.provider_error):
        if failure := chunk_faults.error_answer(whole):
            # an error object instead of a stream: the SDKs read it only as an error frame
            out.provider_error = out.scrub(failure[1])
            frame = out.scrub(sse.encode_event({"error": failure[0]}).decode())
            return [frame.encode(), sse.DONE], b""
        if whole.get("choices") is not None:
            # a whole completion (a provider that ignored ``stream``), which the SDKs read as
            # an empty stream: read and relayed as its stream, each chunk as if it came so
            if (why := chunk_faults.malformed(whole, "message")) is not None:
                out.error = f"the provider sent a malformed answer ({why})"
                return [], b""
            try:
                frames = chunks.completion_to_chunks(whole, include_usage=True)
            except (ValueError, RecursionError):  # a lone surrogate half; nested past the stack
                out.error = f"{NO_CHAT} (its whole JSON answer cannot be written as one)"
                return [], b""
            out.unstreamed = True
            for piece in frames:
                now += _handle(piece, out, held=held, client=client, **kw)
            return now, b""
    if tail.strip() and not out.saw_done and _last_event(tail):
        event = tail.rstrip(b"\r\n") + b"\n\n"  # an SSE client drops an event left open
        now = _handle(event, out, held=held, client=client, **kw)
        tail = b""
    out.saw_data = out.saw_data or bool(tail.strip())
    if out.saw_data and not (
        out.acc.indices or out.saw_done or out.provider_error or whole is not None
    ):  # a login page, a wrong baseUrl's answer: the SDKs read it as an empty stream
        out.error = f"{NO_CHAT} (it holds no chat chunk); check the provider's baseUrl"
        return now, b""
    if not out.complete:
        out.error = "the provider's stream ended before its answer was complete"
        tail = b""
    return now, tail


def _last_event(tail: bytes) -> bool:
    """Whether the body's unterminated rest is a whole event all the same (``[DONE]``, or a
    chunk whose JSON is whole): a provider that closes right after its last line, which is
    read as if its blank line had come; a cut-off one is not."""
    return sse.is_done(tail) or sse.parse_general(tail) is not None


def _utf8(event: bytes) -> bytes:
    """``event`` with each sequence that is not UTF-8 replaced by U+FFFD, as its parse reads
    it (and the stored reply keeps it): the SDKs decode a stream as UTF-8 and raise on one."""
    if event.isascii():  # what almost every event is: no decoding
        return event
    try:
        event.decode()
    except UnicodeDecodeError:
        return event.decode(errors="replace").encode()
    return event


def _json_object(tail: bytes) -> dict[str, Any] | None:
    """The body's unterminated rest as a JSON object, or ``None``: a provider that ignored
    ``stream`` sent a whole completion (relayed as its stream) or an error object there."""
    tail = sse.opening_of(tail)  # past blank space and a byte-order mark, as JSON reads it
    if not tail.startswith(b"{"):
        return None
    try:
        obj = json.loads(tail)
    except (ValueError, RecursionError):  # nested past Python's recursion limit: none either
        return None
    return obj if isinstance(obj, dict) else None


def _handle(
    event: bytes,
    out: RoundOutcome,
    *,
    strip_usage: bool,
    intercept: bool,
    held: list[bytes],
    client: ClientStream,
) -> list[bytes]:
    if out.error:  # a malformed chunk ended the round: what follows it is not read
        return []
    event = _utf8(event)
    if out.saw_done:  # relayed as it came, never read: clients stop reading at [DONE]
        return _send(event, hold=intercept, held=held)
    if sse.is_done(event):
        return _done(event, out, hold=intercept, held=held, client=client)
    chunk = sse.parse_chunk(event)
    if chunk is None:
        return _no_chunk(event, out, held)
    out.saw_data = True
    if (why := chunk_faults.malformed(chunk)) is not None:
        out.error = f"the provider sent a malformed chunk ({why})"
        return []
    if (failure := chunk_faults.chunk_error(chunk)) is not None:
        out.provider_error = out.scrub(failure[1])
    out.acc.add(chunk)
    if sse.is_usage_only(chunk):
        if strip_usage:
            return []
        aligned = client.align(chunk)
        data = event if aligned is chunk else sse.reframe(event, aligned)  # type: ignore[arg-type]
        return _send(data, hold=intercept, held=held)
    rewritten: dict[str, Any] | None = chunk
    if intercept and (has_tool_calls(chunk) or out.calls.pending and chunk.get("choices")):
        rewritten = rewrite(chunk, out.calls)  # nothing else is: no copy for text
    if rewritten is not None:
        rewritten = client.align(rewritten)
    if rewritten is None:
        return []
    data = _frame(event, chunk, rewritten, out)
    return _out(data, rewritten, intercept=intercept, held=held, client=client)


def _frame(
    event: bytes, chunk: dict[str, Any], rewritten: dict[str, Any], out: RoundOutcome
) -> bytes:
    """A chunk's frame as it goes out: the provider's bytes when nothing in it changed, else
    re-encoded; once the round met a provider's error, re-encoded without the key the call
    sent (the provider's bytes may spell it in JSON escapes, which a client parses)."""
    if out.provider_error:
        return out.scrub(sse.reframe(event, rewritten).decode()).encode()
    return event if rewritten is chunk or rewritten == chunk else sse.reframe(event, rewritten)


def _out(
    data: bytes, chunk: dict[str, Any], *, intercept: bool, held: list[bytes], client: ClientStream
) -> list[bytes]:
    """A chat chunk's frame: held with the round's ending when it finishes a choice and the
    round may be internal, or says nothing more after a held frame (Azure's content-filter
    chunk after the finish keeps its place); held as bare (``ClientStream.hold_bare``); or
    sent now, text after a held frame too: a stream is never held to its end."""
    choices = chunk.get("choices") or []
    finishes = any(c.get("finish_reason") for c in choices)
    if intercept and not (finishes or held) and client.hold_bare(chunk, data):
        return []
    trails = bool(held) and all(empty_choice(c) for c in choices)
    return _send(data, hold=intercept and (finishes or trails), held=held)


def _no_chunk(event: bytes, out: RoundOutcome, held: list[bytes]) -> list[bytes]:
    """A comment, an unknown field, or the "\\n" of a "\\r\\n" cut between reads, sent after
    what is held, in order. The openai SDK parses every event's data as JSON, named or not,
    and raises a ``JSONDecodeError``, no API error, on one that does not parse: data that is
    no JSON object ends the round before it, and an event with no data (``event: ping``, an
    empty ``data:``, an ``id:``), which it reads as data ``""``, carries nothing and is
    dropped, so the answer goes on."""
    data = sse.event_data(event)
    if data:
        out.error = f"{NO_CHAT} (a data event is not a JSON object)"
        return []
    if data is not None or _SDK_FIELD.search(event):
        return []
    return _send(event, hold=bool(held), held=held)


def _done(
    event: bytes, out: RoundOutcome, *, hold: bool, held: list[bytes], client: ClientStream
) -> list[bytes]:
    """``[DONE]``; the held fragments of calls that never got a name go out before it (held
    too), in a chunk of the stream's identity, as the client's calls. One before any chat
    chunk ends the round with an error: the SDKs would read an empty, successful answer."""
    if not (out.acc.indices or out.provider_error):
        out.saw_data = True
        out.error = f"{NO_CHAT} (it holds no chat chunk before [DONE])"
        return []
    out.saw_done = out.saw_data = True
    if out.calls.pending:
        which = sorted({c for c, _ in out.calls.pending})
        choices = [{"index": c, "delta": {"tool_calls": out.calls.flush(c)}} for c in which]
        chunk = {"object": "chat.completion.chunk", **client.head, "choices": choices}
        held.append(sse.encode_event(chunk))
    return _send(event, hold=hold, held=held)


def _send(data: bytes, *, hold: bool, held: list[bytes]) -> list[bytes]:
    """``data`` to go out now, or, with ``hold``, kept in ``held`` for the round's end."""
    if hold:
        held.append(data)
        return []
    return [data]
