"""ChatService: the only place a chat request's steps are sequenced.

1. take the session's advisory lock (held until the reply is stored);
2. reconcile the resent history, ingest new messages, load the window;
3. assemble the prompt (pure), persist its intents (spills, placeholders, events);
4. call upstream, relay the answer (answering read_tool_output internally);
5. store the reply and the provider's real prompt size, publish ``context.usage``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import asyncpg
import httpx
from starlette.background import BackgroundTask
from starlette.responses import Response, StreamingResponse

from proxy import sse
from proxy.bus import EventBus
from proxy.cascade.pipeline import (
    READ_TOOL_SCHEMA,
    Assembled,
    StepInput,
    assemble,
    compact_reply_text,
    drop_commands,
    is_compact_command,
    occupancy,
)
from proxy.cascade.summary import fold_summary
from proxy.cascade.tokens import calibrate
from proxy.cascade.types import (
    MESSAGE_APPENDED,
    USAGE,
    Budget,
    Event,
    Message,
    Spill,
    TokenCounter,
)
from proxy.config import Config, ContextConfig, ModelConfig, ProviderConfig
from proxy.errors import ClientRequestError
from proxy.services.compaction import CompactionResult, DurableSummarizer, job_for
from proxy.services.history import SessionState, append_reply, load_window, reconcile_and_load
from proxy.services.relay import RoundOutcome, relay_round
from proxy.services.toolloop import answer_call, split_calls
from proxy.session_id import strip_proxy_fields
from proxy.settings import Settings
from proxy.store import messages as msgs, raw_outputs, sessions
from proxy.upstream import Upstream, response_headers

__all__ = ["ChatService", "ChatContext", "Route"]

log = logging.getLogger("cascade.chat")
_JSON = "application/json"


@dataclass(frozen=True, slots=True)
class ChatContext:
    tenant: str
    session_id: str
    headers: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Route:
    agent: str
    provider: ProviderConfig
    model: str
    limits: ModelConfig
    ctx: ContextConfig


@dataclass(slots=True)
class _Step:
    ctx: ChatContext
    route: Route
    state: SessionState
    assembled: Assembled
    body: dict[str, Any]
    stream: bool
    client_wants_usage: bool
    conn: Any
    command: CompactionResult | None = None


def route(cfg: Config, body: Mapping[str, Any]) -> Route:
    agent_name, agent = cfg.agent_for(body.get("model"))
    model = agent.model or str(body.get("model") or "")
    return Route(
        agent=agent_name, provider=cfg.providers[agent.provider], model=model,
        limits=cfg.model_limits(model), ctx=cfg.context_for(agent_name),
    )


def reserved_output(body: Mapping[str, Any], limits: ModelConfig) -> int:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return limits.reserved_output


def _client_reply(
    message: Mapping[str, Any], texts: list[str], internal: list[Any], client_calls: list[Any]
) -> dict[str, Any]:
    """The streamed answer as the client saw it: every round's text, only its own calls."""
    reply = {**message, "content": "".join(texts) or message.get("content")}
    if internal:
        reply.pop("tool_calls", None)
        if client_calls:
            reply["tool_calls"] = client_calls
    return reply


def _closing_frames(acc: sse.StreamAccumulator, include_usage: bool) -> list[bytes]:
    """A finish frame (``stop``), the usage frame if asked for, and ``[DONE]``: the ending of a
    stream whose last round only called read_tool_output, which the client must not see."""
    base: dict[str, Any] = {
        "id": acc.id, "object": "chat.completion.chunk", "created": acc.created,
        "model": acc.model,
    }
    finish = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    frames = [sse.encode_event({**finish, "usage": None} if include_usage else finish)]
    if include_usage and acc.usage is not None:
        frames.append(sse.encode_event({**base, "choices": [], "usage": acc.usage}))
    return [*frames, sse.DONE]


class ChatService:
    def __init__(
        self, *, pool: asyncpg.Pool, upstream: Upstream, bus: EventBus, count: TokenCounter,
        settings: Settings, summarizer: DurableSummarizer,
    ) -> None:
        self.summarizer = summarizer
        self.pool = pool
        self.upstream = upstream
        self.bus = bus
        self.count = count
        self.settings = settings

    async def complete(self, cfg: Config, body: dict[str, Any], ctx: ChatContext) -> Response:
        rt = route(cfg, body)
        if not rt.model:
            raise ClientRequestError("'model' is required: name the model to call", param="model")
        conn = await self.pool.acquire()
        try:
            await sessions.lock_session(conn, tenant=ctx.tenant, session_id=ctx.session_id)
        except BaseException:
            await self.pool.release(conn)
            raise
        try:
            step = await self._prepare(conn, cfg, rt, body, ctx)
        except BaseException:
            await self._release(conn, ctx)
            raise
        if step.command is not None:
            return await self._answer_command(step)
        if step.stream:
            return await self._stream(step)
        return await self._nonstream(step)

    async def _release(self, conn: Any, ctx: ChatContext) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await sessions.unlock_session(
                    conn, tenant=ctx.tenant, session_id=ctx.session_id
                )
            finally:
                await self.pool.release(conn)

    async def _publish(self, conn: Any, ctx: ChatContext, events: Any) -> None:
        for event in events:
            await self.bus.publish(
                conn, tenant=ctx.tenant, session_id=ctx.session_id, name=event.name,
                data=event.data,
            )

    async def _prepare(
        self, conn: Any, cfg: Config, rt: Route, body: dict[str, Any], ctx: ChatContext
    ) -> _Step:
        state, spills = await reconcile_and_load(
            conn, tenant=ctx.tenant, session_id=ctx.session_id, agent=rt.agent,
            model=rt.model, messages=body["messages"], ctx=rt.ctx, count=self.count,
        )
        command = None
        if is_compact_command(body["messages"]):
            command = await self.summarizer.compact_now(self._job(cfg, rt, ctx, "command"))
            command = command or CompactionResult(None, None, 0, 0, 0, "nothing to fold")
            state = await load_window(
                conn, tenant=ctx.tenant, session_id=ctx.session_id, state=state
            )
        else:
            state = await self._maybe_compact(conn, cfg, rt, body, ctx, state)
        assembled = await self._assemble(conn, rt, body, ctx, state)
        events: list[Event] = list(state.events)
        if state.appended:
            events.append(Event(MESSAGE_APPENDED, {
                "from_pos": state.head_len - state.appended, "count": state.appended,
                "superseded": state.superseded,
            }))
        events.extend(assembled.events)
        await self._persist_step(conn, ctx, rt, state, assembled, spills)
        await self._publish(conn, ctx, events)
        stream = bool(body.get("stream"))
        so = body.get("stream_options")
        wants_usage = isinstance(so, dict) and bool(so.get("include_usage"))
        return _Step(ctx, rt, state, assembled, body, stream, wants_usage, conn, command)

    def _job(self, cfg: Config, rt: Route, ctx: ChatContext, trigger: str) -> Any:
        return job_for(cfg, tenant=ctx.tenant, session_id=ctx.session_id, agent=rt.agent,
                       model=rt.model, headers=ctx.headers, trigger=trigger)

    def _occupancy(self, state: SessionState) -> int:
        """Occupancy of the prompt this state would send: the window with its summary folded.

        ``last_estimate`` counted the folded summary, so the current estimate must too, or
        every step after a compaction under-reports occupancy by the summary's size.
        """
        row = state.session
        estimate = self.count(fold_summary(
            drop_commands(state.window), summary=state.summary, system_count=state.system_count
        ))
        return occupancy(
            estimate, ratio=row["calibration"],
            last_real=row["last_prompt_tokens"], last_estimate=row["last_estimate"],
        )

    async def _maybe_compact(
        self, conn: Any, cfg: Config, rt: Route, body: Mapping[str, Any], ctx: ChatContext,
        state: SessionState,
    ) -> SessionState:
        """Soft: start a background compaction. Hard or overflowing: wait, then compact now.

        The hard path first waits for the compaction already in flight and re-measures, so a
        request only compacts again when that one did not bring it under the threshold.
        """
        s = rt.ctx.summarize
        if not s.enabled:
            return state
        limit = rt.limits.context_limit
        room = limit - reserved_output(body, rt.limits)

        def pressure(st: SessionState) -> tuple[float, bool]:
            occ = self._occupancy(st)
            prompt = self.count(st.window) + (self.count(
                [{"role": "user", "content": st.summary}]) if st.summary else 0)
            return occ / limit, prompt > room

        fraction, overflowing = pressure(state)
        if fraction >= s.hard_fraction or overflowing:
            await self.summarizer.wait_inflight(ctx.tenant, ctx.session_id)
            state = await load_window(conn, tenant=ctx.tenant, session_id=ctx.session_id,
                                      state=state)
            fraction, overflowing = pressure(state)
            if fraction >= s.hard_fraction or overflowing:
                trigger = "overflow" if overflowing else "hard"
                await self.summarizer.compact_now(self._job(cfg, rt, ctx, trigger))
                state = await load_window(conn, tenant=ctx.tenant, session_id=ctx.session_id,
                                          state=state)
        elif fraction >= s.soft_fraction:
            job = self._job(cfg, rt, ctx, "soft")
            if s.background:
                self.summarizer.start_background(job)
            else:
                await self.summarizer.compact_now(job)
                state = await load_window(conn, tenant=ctx.tenant, session_id=ctx.session_id,
                                          state=state)
        return state

    async def _answer_command(self, step: _Step) -> Response:
        """Answer ``/compact`` ourselves: the exchange never reaches the upstream model."""
        assert step.command is not None
        c = step.command
        text = compact_reply_text(version=c.version, folded=c.folded,
                                  tokens_before=c.tokens_before, tokens_after=c.tokens_after,
                                  reason=c.reason)
        reply = {"role": "assistant", "content": text}
        completion = {
            "id": f"chatcmpl-cascade-{secrets.token_hex(8)}", "object": "chat.completion",
            "created": int(time.time()), "model": step.route.model,
            "choices": [{"index": 0, "message": reply, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }
        if not step.stream:
            task = BackgroundTask(self._finalize, step, reply, None)
            return Response(json.dumps(completion), 200, media_type=_JSON, background=task)

        async def body() -> AsyncIterator[bytes]:
            try:
                for frame in sse.completion_to_chunks(
                    completion, include_usage=step.client_wants_usage
                ):
                    yield frame
            finally:
                with anyio.CancelScope(shield=True):
                    await self._finalize(step, reply, None)

        return StreamingResponse(body(), media_type="text/event-stream")

    async def _assemble(
        self, conn: Any, rt: Route, body: Mapping[str, Any], ctx: ChatContext,
        state: SessionState,
    ) -> Assembled:
        occ = self._occupancy(state)
        tool_ids = [m["tool_call_id"] for m in state.window if m.get("tool_call_id")]
        spilled = await raw_outputs.fetch_spilled_ids(
            conn, tenant=ctx.tenant, session_id=ctx.session_id, tool_call_ids=tool_ids
        ) if rt.ctx.eviction.enabled and tool_ids else frozenset()
        budget = Budget(
            limit=rt.limits.context_limit, reserved_output=reserved_output(body, rt.limits),
            occupancy=occ,
        )
        return assemble(StepInput(
            window=state.window, system_count=state.system_count, summary=state.summary,
            count=self.count, budget=budget, ctx=rt.ctx, spilled=spilled,
            unspillable=state.redacted_ids, ratio=state.session["calibration"],
        ))

    async def _persist_step(
        self, conn: Any, ctx: ChatContext, rt: Route, state: SessionState, asm: Assembled,
        spills: tuple[Spill, ...],
    ) -> None:
        if asm.spills:
            await raw_outputs.insert_raw_outputs(
                conn, tenant=ctx.tenant, session_id=ctx.session_id, spills=asm.spills,
                cap_bytes=rt.ctx.tool_output.raw_cap_bytes,
            )
        if asm.evicted:
            updates = [(state.positions[i], dict(asm.window[i])) for i in asm.evicted]
            await msgs.update_evicted(
                conn, tenant=ctx.tenant, session_id=ctx.session_id, updates=updates
            )
            reclaimed = sum(
                self.count([state.window[i]]) - self.count([asm.window[i]]) for i in asm.evicted
            )
            await sessions.add_reclaimed(
                conn, tenant=ctx.tenant, session_id=ctx.session_id, tokens=reclaimed
            )
        if asm.trimmed:
            await msgs.update_trimmed(
                conn, tenant=ctx.tenant, session_id=ctx.session_id,
                positions=[state.positions[i] for i in asm.trimmed],
            )

    def _upstream_body(self, step: _Step, messages: list[Message]) -> bytes:
        body = strip_proxy_fields(step.body)
        body["model"] = step.route.model
        body["messages"] = messages
        if step.assembled.offer_read_tool:
            body["tools"] = [*(body.get("tools") or []), READ_TOOL_SCHEMA]
        if step.stream:
            so = dict(body.get("stream_options") or {})
            so["include_usage"] = True
            body["stream_options"] = so
        return json.dumps(body, ensure_ascii=False).encode()

    def _request(self, step: _Step, messages: list[Message]) -> httpx.Request:
        return self.upstream.build(
            step.route.provider, "POST", "/chat/completions",
            client_headers=step.ctx.headers, content=self._upstream_body(step, messages),
        )

    async def _internal_round(
        self, step: _Step, messages: list[Message], reply: Mapping[str, Any]
    ) -> list[Message]:
        internal, _ = split_calls(reply)
        answers = [
            await answer_call(
                step.conn, tenant=step.ctx.tenant, session_id=step.ctx.session_id, call=c,
                max_chars=step.route.ctx.tool_output.max_chars,
            )
            for c in internal
        ]
        return [*messages, dict(reply), *answers]

    # -- non-streaming -------------------------------------------------------------------

    async def _nonstream(self, step: _Step) -> Response:
        """Call upstream, answering read_tool_output internally; relay the last answer.

        The response is the provider's bytes untouched unless internal rounds happened: then
        the client gets the last round's completion with the earlier rounds' text in front and
        no read_tool_output call in it.
        """
        offer = step.assembled.offer_read_tool
        earlier: list[str] = []
        rewritten = False
        try:
            messages = list(step.assembled.messages)
            for round_no in range(self.settings.max_internal_rounds + 1):
                resp = await self.upstream.send(self._request(step, messages), stream=False)
                if resp.status_code >= 400:
                    await self._release(step.conn, step.ctx)
                    return Response(resp.content, resp.status_code, response_headers(resp))
                data = resp.json()
                reply = (data.get("choices") or [{}])[0].get("message") or {}
                internal, client_calls = split_calls(reply) if offer else ([], [])
                if internal and not client_calls and round_no < self.settings.max_internal_rounds:
                    earlier.append(str(reply.get("content") or ""))
                    messages = await self._internal_round(step, messages, reply)
                    continue
                if internal or earlier:
                    reply = _client_reply(reply, [*earlier, str(reply.get("content") or "")],
                                          internal, client_calls)
                    reply["content"] = reply.get("content") or None
                    data["choices"][0]["message"] = reply
                    if internal and not client_calls:
                        data["choices"][0]["finish_reason"] = "stop"
                    rewritten = True
                break
        except BaseException:
            await self._release(step.conn, step.ctx)
            raise
        content = json.dumps(data).encode() if rewritten else resp.content
        usage = data.get("usage") or {}
        task = BackgroundTask(self._finalize, step, reply, usage.get("prompt_tokens"))
        return Response(content, resp.status_code, response_headers(resp), background=task)

    # -- streaming -----------------------------------------------------------------------

    async def _stream(self, step: _Step) -> Response:
        send = asyncio.ensure_future(
            self.upstream.send(self._request(step, list(step.assembled.messages)), stream=True)
        )
        done, _ = await asyncio.wait({send}, timeout=self.settings.keepalive_seconds)
        if done:
            try:
                resp = send.result()
            except BaseException:
                await self._release(step.conn, step.ctx)
                raise
            if resp.status_code >= 400:
                body = await resp.aread()
                await resp.aclose()
                await self._release(step.conn, step.ctx)
                return Response(body, resp.status_code, response_headers(resp))
            headers = response_headers(resp)
        else:
            headers = {"content-type": "text/event-stream"}
        return StreamingResponse(
            self._stream_body(step, send), status_code=200, headers=headers,
            media_type="text/event-stream",
        )

    async def _stream_body(self, step: _Step, send: asyncio.Future[httpx.Response]) -> (
        AsyncIterator[bytes]
    ):
        reply: dict[str, Any] | None = None
        prompt_tokens = None
        try:
            # Only reached with the provider still silent after one keep-alive interval
            # (``_stream`` waited that long), so the first comment goes out at once.
            while not send.done():
                yield sse.KEEPALIVE
                await asyncio.wait({send}, timeout=self.settings.keepalive_seconds)
            messages = list(step.assembled.messages)
            texts: list[str] = []
            for round_no in range(self.settings.max_internal_rounds + 1):
                resp, error = await self._round_response(send, round_no, step, messages)
                if error is not None:
                    yield error
                    yield sse.DONE
                    return
                out = RoundOutcome()
                try:
                    async for piece in relay_round(
                        resp, out, strip_usage=not step.client_wants_usage,
                        intercept=step.assembled.offer_read_tool,
                        keepalive=self.settings.keepalive_seconds,
                    ):
                        yield piece
                finally:
                    await resp.aclose()
                usage = out.acc.usage or {}
                prompt_tokens = usage.get("prompt_tokens", prompt_tokens)
                message = out.acc.message()
                texts.append(str(message.get("content") or ""))
                if out.error:
                    yield sse.error_event(out.error)
                    yield sse.DONE
                    return
                internal, client_calls = (
                    split_calls(message) if step.assembled.offer_read_tool else ([], [])
                )
                if not (out.only_internal and round_no < self.settings.max_internal_rounds):
                    reply = _client_reply(message, texts, internal, client_calls)
                    if out.only_internal:  # budget spent: the relay held back the ending
                        for frame in _closing_frames(out.acc, step.client_wants_usage):
                            yield frame
                    break
                messages = await self._internal_round(step, messages, message)
                send = asyncio.ensure_future(
                    self.upstream.send(self._request(step, messages), stream=True)
                )
        finally:
            with anyio.CancelScope(shield=True):
                if not send.done():
                    send.cancel()
                await self._finalize(step, reply, prompt_tokens)

    async def _round_response(
        self, send: asyncio.Future[httpx.Response], round_no: int, step: _Step,
        messages: list[Message],
    ) -> tuple[httpx.Response, bytes | None]:
        try:
            resp = await send
        except Exception as exc:
            status, msg = getattr(exc, "status_code", 502), str(exc)
            return None, sse.error_event(msg, code=str(status))  # type: ignore[return-value]
        if resp.status_code >= 400:
            body = (await resp.aread()).decode("utf-8", "replace")
            await resp.aclose()
            return resp, sse.error_event(
                f"the provider answered {resp.status_code}: {body[:2000]}",
                code=str(resp.status_code),
            )
        return resp, None

    # -- after the answer ----------------------------------------------------------------

    async def _finalize(
        self, step: _Step, reply: Mapping[str, Any] | None, prompt_tokens: int | None
    ) -> None:
        """Store the reply and the real prompt size; publish ``context.usage``; unlock."""
        ctx, conn = step.ctx, step.conn
        try:
            if reply:
                await append_reply(
                    conn, tenant=ctx.tenant, session_id=ctx.session_id, state=step.state,
                    reply=reply, count=self.count,
                )
            row = step.state.session
            estimate = step.assembled.tokens
            ratio = row["calibration"]
            if isinstance(prompt_tokens, int) and prompt_tokens > 0:
                ratio = calibrate(ratio, real=prompt_tokens, estimated=estimate)
            real = prompt_tokens if isinstance(prompt_tokens, int) else None
            await sessions.update_usage(
                conn, tenant=ctx.tenant, session_id=ctx.session_id, prompt_tokens=real,
                estimate=estimate, calibration=ratio,
            )
            limit = step.route.limits.context_limit
            used = real if real is not None else round(estimate * ratio)
            await self.bus.publish(conn, tenant=ctx.tenant, session_id=ctx.session_id,
                                   name=USAGE, data={
                "prompt_tokens": real, "estimated_tokens": estimate, "occupancy": used,
                "limit": limit, "fraction": round(used / limit, 4) if limit else None,
                "calibration": round(ratio, 4), "model": step.route.model,
                "reclaimed_tokens": await self._reclaimed(conn, ctx),
            })
        except Exception:
            log.exception("could not record the reply of session %s", ctx.session_id)
        finally:
            await self._release(conn, ctx)

    async def _reclaimed(self, conn: Any, ctx: ChatContext) -> int:
        return await sessions.add_reclaimed(
            conn, tenant=ctx.tenant, session_id=ctx.session_id, tokens=0
        )
