"""A fake OpenAI upstream that answers with recorded assistant messages and logs every request.

The replay client tells it which recorded message answers the next main-model request
(:meth:`ReplayUpstream.expect`, in process, or ``POST /_replay/expect`` from another process);
requests for the fast model (summarisation) get a deterministic five-section briefing built from
the request text, so a summariser has something well-formed to fold, and memory promotion's
extraction (``response_format`` ``memory_facts``) gets the span's first file paths as facts.
Every request body is kept in :attr:`ReplayUpstream.received`, tagged with the session and step
that were expected when it arrived, so the bench measures exactly what reached the provider.

Run standalone: ``python -m bench.replay_upstream --port 9100`` (binds 127.0.0.1 only).
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from bench.cost import Tokenizer, get_tokenizer, message_text

__all__ = ["Received", "ReplayUpstream", "build_briefing", "build_facts", "BRIEFING_SECTIONS"]

BRIEFING_SECTIONS = (
    "## Objective",
    "## Decisions & Facts",
    "## Files & State",
    "## Open Tasks",
    "## Next Step",
)
TOKENS_PER_MESSAGE = 3
"""Framing a provider counts per message besides its text (OpenAI's cookbook formula)."""
REPLY_PRIMING_TOKENS = 3
"""The reply's priming, counted once per prompt."""
_PATH = re.compile(r"(?<![\w/.-])(?:/|\./)?(?:[\w.-]+/)+[\w.-]+\.[A-Za-z]{1,5}\b")


@dataclass(frozen=True, slots=True)
class Received:
    """One request that reached the upstream."""

    session: str
    step: int | None
    model: str
    fast: bool
    body: Mapping[str, Any]
    at: float

    @property
    def messages(self) -> tuple[Mapping[str, Any], ...]:
        return tuple(self.body.get("messages") or ())


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def build_briefing(messages: Sequence[Mapping[str, Any]]) -> str:
    """A deterministic briefing with the five required sections, drawn from the request text.

    It quotes file paths verbatim and samples lines evenly, so two identical requests get the
    identical briefing and its size grows (slowly) with the span it summarises.
    """
    texts = [message_text(m).split("\n", 1)[-1] for m in messages]
    body = "\n".join(t for t in texts if t.strip())
    lines = [ln.strip() for ln in body.splitlines() if len(ln.strip()) > 20]
    users = [t for m, t in zip(messages, texts, strict=True) if m.get("role") == "user" and t]
    objective = _clip(users[-1] if users else (lines[0] if lines else "Continue the task."), 400)
    k = min(8, len(lines))
    facts = [_clip(lines[i * len(lines) // k], 200) for i in range(k)] if k else []
    paths = list(dict.fromkeys(_PATH.findall(body)))[:15]
    nxt = _clip(lines[-1], 240) if lines else "Continue."
    out = [BRIEFING_SECTIONS[0], objective, "", BRIEFING_SECTIONS[1]]
    out += [f"- {f}" for f in facts] or ["- (none recorded)"]
    out += ["", BRIEFING_SECTIONS[2]]
    out += [f"- `{p}`" for p in paths] or ["- (no files named)"]
    out += ["", BRIEFING_SECTIONS[3], "- Continue the work toward the objective above.", ""]
    out += [BRIEFING_SECTIONS[4], nxt]
    return "\n".join(out)


def _asks_for_facts(body: Mapping[str, Any]) -> bool:
    """Whether a fast-model request is memory promotion's extraction (its response_format)."""
    fmt = body.get("response_format")
    schema = fmt.get("json_schema") if isinstance(fmt, Mapping) else None
    return isinstance(schema, Mapping) and schema.get("name") == "memory_facts"


def build_facts(messages: Sequence[Mapping[str, Any]], limit: int = 3) -> str:
    """A deterministic ``{"facts": [...]}`` answer for memory promotion: the first file paths
    the span names, one fact each, so the stored facts (and the ``<memory>`` block) change
    when a compaction folds a span that names new files."""
    body = "\n".join(message_text(m) for m in messages[1:])
    paths = list(dict.fromkeys(_PATH.findall(body)))[:limit]
    return json.dumps({"facts": [f"The task involves the file {p}." for p in paths]})


def _reply_message(reply: Mapping[str, Any]) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
    calls = [
        {"id": c["id"], "type": "function", "function": dict(c.get("function") or {})}
        for c in reply.get("tool_calls") or ()
    ]
    if calls:
        msg["tool_calls"] = calls
    if reply.get("reasoning_content"):
        msg["reasoning_content"] = reply["reasoning_content"]
    return msg


@dataclass
class ReplayUpstream:
    """The replay server's state; :meth:`start` serves it on 127.0.0.1 in a daemon thread."""

    fast_model: str = "fast-model"
    tokenizer: Tokenizer = field(default_factory=get_tokenizer)
    received: list[Received] = field(default_factory=list)
    _expected: tuple[str, int | None, Mapping[str, Any] | None] = ("", None, None)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: uvicorn.Server | None = None
    _thread: threading.Thread | None = None
    url: str = ""

    def expect(self, session: str, step: int | None, reply: Mapping[str, Any] | None) -> None:
        """The next main-model request belongs to ``session``/``step`` and gets ``reply``."""
        with self._lock:
            self._expected = (session, step, reply)

    def drain(self) -> list[Received]:
        """Return and forget everything received so far."""
        with self._lock:
            out, self.received = self.received, []
        return out

    def last_request_at(self) -> float:
        with self._lock:
            return self.received[-1].at if self.received else 0.0

    def wait_idle(self, quiet: float = 1.0, timeout: float = 30.0) -> None:
        """Block until no request arrived for ``quiet`` seconds (background compactions)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if time.monotonic() - self.last_request_at() >= quiet:
                return
            time.sleep(0.1)

    # --- HTTP -------------------------------------------------------------------------------

    def answer(self, body: Mapping[str, Any]) -> tuple[dict[str, Any], Received]:
        """Pick the answer for one chat request and log the request."""
        model = str(body.get("model") or "")
        fast = model == self.fast_model
        messages = list(body.get("messages") or ())
        with self._lock:
            session, step, reply = self._expected
            log = Received(session, None if fast else step, model, fast, body, time.monotonic())
            self.received.append(log)
        if fast and _asks_for_facts(body):
            message: dict[str, Any] = {"role": "assistant", "content": build_facts(messages)}
        elif fast:
            message = {"role": "assistant", "content": build_briefing(messages)}
        elif reply is not None:
            message = _reply_message(reply)
        else:
            message = {"role": "assistant", "content": "OK."}
        return message, log

    def prompt_tokens(self, body: Mapping[str, Any]) -> int:
        """The request's prompt as a provider counts it in ``usage``: the messages, each
        one's framing (:data:`TOKENS_PER_MESSAGE`, :data:`REPLY_PRIMING_TOKENS`), and the
        ``tools``, legacy ``functions`` and response schema the model is shown. The proxy
        calibrates its estimate on this count, so one that leaves the tools out teaches it
        to count every prompt low (and its overflow guard to let one past the window)."""
        messages = list(body.get("messages") or ())
        total = self.tokenizer.count(messages) + TOKENS_PER_MESSAGE * len(messages)
        total += REPLY_PRIMING_TOKENS if messages else 0
        fmt = body.get("response_format")
        shown = (
            body.get("tools"),
            body.get("functions"),
            fmt.get("json_schema") if isinstance(fmt, Mapping) else None,
        )
        for value in shown:
            if value:
                total += self.tokenizer.count([{"role": "system", "content": json.dumps(value)}])
        return total

    def _usage(self, body: Mapping[str, Any], message: Mapping[str, Any]) -> dict:
        prompt = self.prompt_tokens(body)
        completion = self.tokenizer.count([message])
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        message, _ = self.answer(body)
        usage = self._usage(body, message)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        base = {"id": f"chatcmpl-replay-{len(self.received)}", "created": int(time.time())}
        base["model"] = body.get("model") or "replay"
        if not body.get("stream"):
            choice = {"index": 0, "message": message, "finish_reason": finish}
            payload = {**base, "object": "chat.completion", "choices": [choice], "usage": usage}
            return JSONResponse(payload)
        opts = body.get("stream_options") or {}
        frames = _stream_frames(base, message, finish, usage if opts.get("include_usage") else None)
        return StreamingResponse(frames, media_type="text/event-stream")

    async def _models(self, request: Request) -> Response:
        names = ["gpt-4o", self.fast_model]
        return JSONResponse(
            {"object": "list", "data": [{"id": n, "object": "model"} for n in names]}
        )

    async def _expect(self, request: Request) -> Response:
        data = await request.json()
        self.expect(str(data.get("session") or ""), data.get("step"), data.get("reply"))
        return JSONResponse({"ok": True})

    async def _received(self, request: Request) -> Response:
        logs = self.drain() if request.query_params.get("drain") else list(self.received)
        return JSONResponse(
            [{"session": r.session, "step": r.step, "model": r.model, "body": r.body} for r in logs]
        )

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/_replay/expect", self._expect, methods=["POST"]),
                Route("/_replay/received", self._received, methods=["GET"]),
            ]
        )

    def start(self, port: int = 0) -> str:
        """Serve on 127.0.0.1 in a daemon thread; return the base URL ending in ``/v1``."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        config = uvicorn.Config(self.app(), log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = self._thread = None

    def __enter__(self) -> ReplayUpstream:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def _stream_frames(
    base: Mapping[str, Any], message: Mapping[str, Any], finish: str, usage: dict | None
) -> AsyncIterator[bytes]:
    def frame(delta: Mapping[str, Any], reason: str | None = None) -> bytes:
        chunk = {
            **base,
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": reason}],
        }
        return f"data: {json.dumps(chunk)}\n\n".encode()

    first: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    if message.get("reasoning_content"):
        first["reasoning_content"] = message["reasoning_content"]
    yield frame(first)
    for i, call in enumerate(message.get("tool_calls") or ()):
        yield frame({"tool_calls": [{"index": i, **call}]})
    yield frame({}, finish)
    if usage is not None:
        tail = {**base, "object": "chat.completion.chunk", "choices": [], "usage": usage}
        yield f"data: {json.dumps(tail)}\n\n".encode()
    yield b"data: [DONE]\n\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--fast-model", default="fast-model")
    args = parser.parse_args(argv)
    upstream = ReplayUpstream(fast_model=args.fast_model)
    url = upstream.start(args.port)
    print(f"replay upstream on {url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        upstream.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
