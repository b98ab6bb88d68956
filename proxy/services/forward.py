"""Forward a prepared step to the provider and relay its answer to the client.

Non-streaming answers are relayed byte for byte (but one a provider streamed all the same,
sent as the completion its chunks build); streams event by event (``relay.py``), each
round's request (``Step.upstream_body``) sent and awaited as ``round_answer.py`` says.
``read_tool_output`` calls are answered between rounds, from the store, and the provider is
called again, up to ``max_internal_rounds`` times; the client never sees those calls
(``internal_rounds.py``). A provider's error answer is relayed with its status, a later
round's too while a stream has sent nothing (``read_ahead.py``); after that, it goes out as
an error event. One that refuses the prompt as too long for the window raises the session's
calibration (``window_learned.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import anyio
from starlette.background import BackgroundTask
from starlette.responses import Response, StreamingResponse

from proxy import answers, chunks, sse
from proxy.bus import EventBus
from proxy.cascade.delta_fields import rounds_merged
from proxy.cascade.types import Message
from proxy.errors import UpstreamBadResponse, UpstreamTimeout
from proxy.jsonio import dumps
from proxy.observe import note_answer, note_late_error
from proxy.provider_errors import completion, log_relayed, log_stream_error, provider_name
from proxy.provider_refusal import relayed
from proxy.services import deltas
from proxy.services.client_watch import HEADERS_WAITING, watching
from proxy.services.internal_rounds import (
    client_reply,
    closing_frames,
    fold_completion,
    internal_round,
)
from proxy.services.prep_wait import header_wait
from proxy.services.read_ahead import Refused, after_first, refuse
from proxy.services.relay import ClientStream, relay_round
from proxy.services.request import ChatContext, Route, Step
from proxy.services.round_answer import (
    drop,
    keepalive_until,
    read_refusal,
    round_response,
    stopped_frame,
)
from proxy.services.round_outcome import RoundOutcome, stream_failure
from proxy.services.toolloop import split_calls
from proxy.services.turn import Turn
from proxy.services.usage_option import UsageOption
from proxy.services.window_learned import learned
from proxy.settings import Settings
from proxy.stopping import StopClock
from proxy.store.db import Executor
from proxy.upstream import StreamAnswer, Upstream, response_headers

__all__ = ["ChatContext", "Route", "Step", "Forwarder"]

log = logging.getLogger("cascade.forward")


async def _end(
    turn: Turn,
    reply: Mapping[str, Any] | None,
    prompt_tokens: Any,
    *,
    refused: bool,
    calibration: float | None,
) -> None:
    """End a stream's turn: ``finish`` with what the client saw, or, when a later round's
    error became the response's status (``Refused``), ``abort`` as ``nonstream`` ends a
    refused call, storing no usage (docs/events.md); either way with the ``calibration``
    a refusal for length taught (``window_learned.py``)."""
    if refused:
        await turn.abort(calibration)
    else:
        await turn.finish(reply, prompt_tokens, calibration=calibration)


class Forwarder:
    """Calls upstream for a turn's step and relays the answer; the turn ends with it
    (``Turn.finish`` with the reply, ``Turn.abort`` when there is none to store). With a
    ``bus`` (and the ``pool`` its NOTIFYs run on), a stream's text also goes out as delta
    events while its session is watched (``deltas.py``). A stream still open once the
    ``stop``'s grace ends ends itself (``stopping.py``)."""

    def __init__(
        self,
        *,
        upstream: Upstream,
        settings: Settings,
        bus: EventBus | None = None,
        pool: Executor | None = None,
        stop: StopClock | None = None,
    ) -> None:
        self.upstream = upstream
        self.settings = settings
        self.stop = stop if stop is not None else StopClock()
        self.usage_option = UsageOption()
        self.bus = bus
        self.pool = pool

    def _open(self, step: Step, messages: list[Message]) -> asyncio.Future[StreamAnswer]:
        """Start the streamed call (the caller waits for its headers with keep-alives)."""

        def send(usage: bool) -> Awaitable[StreamAnswer]:
            return self.upstream.open_stream(
                step.route.provider,
                "/chat/completions",
                client_headers=step.ctx.headers,
                content=step.upstream_body(messages, usage=usage),
                model=step.route.model,
                params=step.ctx.query or None,
            )

        return asyncio.ensure_future(self.usage_option.open(step.route.provider, step.body, send))

    # -- non-streaming -------------------------------------------------------------------

    async def nonstream(self, turn: Turn) -> Response:
        """Call upstream, answering read_tool_output internally; relay the last answer.

        The response is the provider's bytes untouched unless internal rounds happened: then
        the client gets the last round's completion with the earlier rounds' text in front and
        no read_tool_output call in it.
        """
        step = turn.prepared
        offer = step.assembled.offer_read_tool
        earlier: list[str] = []
        rewritten = False
        prompt_tokens = None
        try:
            step.ctx.check_client()
            messages = list(step.assembled.messages)
            for round_no in range(self.settings.max_internal_rounds + 1):
                resp = await self.upstream.call(
                    step.route.provider,
                    "POST",
                    "/chat/completions",
                    client_headers=step.ctx.headers,
                    content=step.upstream_body(messages),
                    model=step.route.model,
                    params=step.ctx.query or None,
                    max_bytes=answers.MAX_ANSWER_BYTES,
                )
                if resp.status_code >= 400:
                    log_relayed(step.route.provider, resp.status_code, request=resp.request)
                    await turn.abort(learned(step, resp.status_code, resp.content, messages))
                    body, headers = relayed(
                        step.route.provider, resp, resp.content, response_headers(resp)
                    )
                    return Response(body, resp.status_code, headers)
                data, streamed = completion(resp, step.route.provider)
                rewritten = rewritten or streamed
                note_answer(step.route.model, data.get("usage"))
                if round_no == 0:  # the prompt the step assembled (later rounds add to it)
                    prompt_tokens = (data.get("usage") or {}).get("prompt_tokens")
                reply = chunks.storable((data.get("choices") or [{}])[0].get("message") or {})
                internal, client_calls = split_calls(reply) if offer else ([], [])
                if internal and not client_calls and round_no < self.settings.max_internal_rounds:
                    earlier.append(str(reply.get("content") or ""))
                    messages = await internal_round(turn, messages, reply)
                    continue
                if internal or earlier:
                    reply = fold_completion(data, reply, earlier, internal, client_calls)
                    rewritten = True
                break
            content, headers = resp.content, response_headers(resp)
            if rewritten:
                content, headers = dumps(data), {**headers, "content-type": "application/json"}
            task = BackgroundTask(turn.finish, reply, prompt_tokens)
            # Built in here: until the response exists, nothing else would end the turn.
            return Response(content, resp.status_code, headers, background=task)
        except BaseException:
            await turn.abort()
            raise

    # -- streaming -----------------------------------------------------------------------

    async def stream(self, turn: Turn) -> Response:
        """Start the streamed call and answer with its stream (``_stream_body``), or with the
        provider's error answer when its headers, awaited for what is left of the keep-alive
        interval begun at the request's acceptance (``header_wait``), say so; a stream whose
        ``200`` went out meanwhile goes on from there. With ``read_tool_output`` offered, the
        body's first piece is read first."""
        step = turn.prepared
        send: asyncio.Future[StreamAnswer] | None = None
        refused: Response | None = None
        said = b""
        try:
            opened, wait = await header_wait(step.ctx.keepalive, self.settings.keepalive_seconds)
            due = asyncio.get_running_loop().time() + wait
            step.ctx.check_client()
            send = self._open(step, list(step.assembled.messages))
            with watching(step.ctx.client, HEADERS_WAITING):  # before a response listens
                done, _ = await asyncio.wait({send}, timeout=wait)
            if done and not opened:  # after the 200, a refusal is the stream's error frame
                resp = send.result()
                if resp.status_code >= 400:
                    refused = await read_refusal(resp, step.route.provider)
                    said = await resp.aread()  # as it came (read once): ``learned`` reads it
                    log_relayed(step.route.provider, resp.status_code, request=resp.request)
                headers = response_headers(resp)
            else:
                headers = {"content-type": "text/event-stream"}
            if refused is None:
                # bytes are due at ``due`` when the 200 went out or waits for the read-ahead
                late = opened or step.assembled.offer_read_tool
                answer = self._stream_body(turn, send, opened, due if late else None)
                if step.assembled.offer_read_tool:  # a later round may refuse it yet
                    try:
                        answer = after_first(await anext(answer, b""), answer)
                    except Refused as exc:  # nothing was sent; the body ended the turn
                        return exc.response
                return StreamingResponse(
                    answer,
                    status_code=200,
                    headers={**headers, **sse.STREAM_HEADERS},
                    media_type="text/event-stream",
                )
        except BaseException:  # until the body takes the turn over, ending it is ours
            if send is not None:
                await drop(send)
            await turn.abort()
            raise
        assert refused is not None
        await turn.abort(learned(step, refused.status_code, said, step.assembled.messages))
        return refused

    async def _stream_body(
        self, turn: Turn, send: asyncio.Future[StreamAnswer], opened: bool, due: float | None
    ) -> AsyncGenerator[bytes, None]:
        """The client's one stream: each round's answer relayed in turn, ``read_tool_output``
        answered between rounds, and the turn ended in ``finally`` however the stream ends
        (the client's hang-up included), with the reply the client saw; a later round's
        ``Refused`` ends it as ``nonstream`` ends a refused call, storing no usage."""
        step = turn.prepared
        reply: dict[str, Any] | None = None
        prompt_tokens = None
        refused = False
        calibration: float | None = None  # learned from a refusal for length
        tap = deltas.tap(self.bus, self.pool, step)
        try:
            messages = list(step.assembled.messages)
            texts: list[str] = []
            rounds: list[Mapping[str, Any]] = []
            # the one stream the client sees, however many rounds; ``opened``: its 200 is out
            client = ClientStream(opened=opened)
            keepalive = self.settings.keepalive_seconds
            for round_no in range(self.settings.max_internal_rounds + 1):
                # Round 0's provider, when still silent here, has been waited for until bytes
                # are due (``stream`` waited: to the end of the interval begun at acceptance,
                # or an interval after the clock's last comment): a comment goes out at once.
                async for comment in keepalive_until(
                    send, keepalive, at_once=round_no == 0, stop=self.stop
                ):
                    due = None  # a comment went out: the next is an interval later
                    yield client.emit(comment)
                resp, error, refusal = await round_response(send, step.route.provider, self.stop)
                if refusal is not None:
                    refused = not client.opened  # then raised: the response is its status
                    # the body as it came, not the relayed rewrite (``provider_refusal``)
                    said = await resp.aread()
                    calibration = learned(step, refusal.status_code, said, messages)
                    refuse(step.route.provider, refusal, opened=client.opened, request=resp.request)
                if error is not None:
                    yield client.emit(error)
                    yield sse.DONE
                    return
                out = RoundOutcome(scrub=resp.scrub)
                tap.round(out.acc)
                first = None if due is None else max(0.0, due - asyncio.get_running_loop().time())
                due = None
                async for piece in self._relay(step, resp, out, client, tap.poll, first):
                    yield piece
                note_answer(step.route.model, out.acc.usage)
                if round_no == 0:  # the prompt the step assembled, as in ``nonstream``
                    prompt_tokens = (out.acc.usage or {}).get("prompt_tokens")
                message = out.acc.message()
                texts.append(str(message.get("content") or ""))
                rounds.append(message)
                if out.error:
                    yield client.emit(self._error_frame(step, out))
                    yield sse.DONE
                    return
                if out.provider_error or not out.acc.indices:
                    # the answer failed (its error's type and code may refuse it for length),
                    # or was no chat stream: nothing to store
                    calibration = learned(step, 400, out.provider_error, messages)
                    return
                internal, client_calls = (
                    split_calls(message) if step.assembled.offer_read_tool else ([], [])
                )
                if not (out.only_internal and round_no < self.settings.max_internal_rounds):
                    reply = client_reply(message, texts, internal, client_calls)
                    reply.update(rounds_merged(rounds))
                    if out.only_internal:  # budget spent: the relay held back the ending
                        for frame in closing_frames(client, out.acc, step.client_wants_usage):
                            yield client.emit(frame)
                    break
                messages = await internal_round(turn, messages, message)
                send = self._open(step, messages)
        finally:
            with anyio.CancelScope(shield=True):
                await drop(send)
                await tap.close()  # the last delta, before the stored reply's event
                await _end(turn, reply, prompt_tokens, refused=refused, calibration=calibration)

    def _error_frame(self, step: Step, out: RoundOutcome) -> bytes:
        """The error frame that ends a stream whose round ended short, logged. The request
        failed as a whole answer's 502 (504 for a timeout) would have: its span says so."""
        if out.stopped:
            return stopped_frame(self.stop.grace)
        late = UpstreamTimeout if out.error_code == UpstreamTimeout.code else UpstreamBadResponse
        note_late_error(late.status_code)
        where = provider_name(step.route.provider)
        log.warning("a stream from %s ended with an error event: %s", where, out.error)
        return sse.error_event(out.error or "", code=out.error_code)

    async def _relay(
        self,
        step: Step,
        resp: StreamAnswer,
        out: RoundOutcome,
        client: ClientStream,
        poll: Callable[[], None],
        first_wait: float | None = None,
    ) -> AsyncIterator[bytes]:
        """One round's answer relayed (``relay_round``), ``poll`` (the delta tap) called after
        each piece and a provider's error in it logged once, before the client can leave, and
        failing the request's span as a whole answer holding it would; the answer is closed at
        the end."""
        failed = False
        try:
            async for piece in relay_round(
                resp,
                out,
                strip_usage=not step.client_wants_usage,
                intercept=step.assembled.offer_read_tool,
                keepalive=self.settings.keepalive_seconds,
                client=client,
                max_event=answers.MAX_ANSWER_BYTES,
                first_wait=first_wait,
                stop=self.stop,
            ):
                poll()
                if out.provider_error and not failed:
                    log_stream_error(step.route.provider, resp.status_code, out.provider_error)
                    note_late_error(UpstreamBadResponse.status_code)  # a whole answer's 502
                    failed = True
                yield piece
        finally:
            if out.unstreamed:  # once a round, never a chunk: the provider ignores ``stream``
                where = provider_name(step.route.provider)
                log.warning("%s ignores stream: its whole completion goes out as a stream", where)
            if (out.provider_error or out.error) and not out.stopped:  # a 200 that failed
                resp.failed(stream_failure(out))
            await resp.aclose()
