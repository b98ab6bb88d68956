"""A scriptable fake OpenAI-compatible upstream, served over real loopback HTTP.

The fake is a raw ASGI app run by uvicorn in a background thread on ``127.0.0.1`` with an
OS-chosen port (httpx's ``TestServer`` + ``serve_in_thread`` pattern). Tests queue responses
with :meth:`FakeUpstream.script`; each chat request pops the next one (FIFO) and an empty queue
falls back to :attr:`FakeUpstream.default`, which echoes ``"ok"``.

Builders, rendering and server live in one module on purpose: tests import a single fake.

Everything the fake says is a pure function of the scripted response and the request, so tests
can predict it exactly:

* ``prompt_tokens`` (when not scripted) is :func:`count_prompt_tokens` of the request messages,
  the same per-message ``len(text) // 4`` rule as the unit tests' fake counter;
* ``completion_tokens`` is ``(len(content) + len(all tool-call arguments)) // 4`` per choice;
* ids are ``chatcmpl-fake-<seq>`` and ``call_<seq>_<k>``, where ``seq`` is the request's index
  in :attr:`FakeUpstream.requests`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeAlias

import uvicorn

__all__ = [
    "CHAT",
    "EMBEDDINGS",
    "MODELS",
    "Error",
    "FakeUpstream",
    "Raw",
    "RecordedRequest",
    "Rendered",
    "Reply",
    "Responder",
    "context_length_exceeded",
    "count_prompt_tokens",
    "error",
    "fake_embedding",
    "raw",
    "rate_limited",
    "render",
    "reply",
    "tool_call",
]

CHAT = "/v1/chat/completions"
EMBEDDINGS = "/v1/embeddings"
MODELS = "/v1/models"
CREATED = 1_700_000_000  # fixed `created` so whole responses can be compared
DEFAULT_MODELS = ("gpt-fake", "gpt-fake-mini")

_SSE = "text/event-stream; charset=utf-8"
_JSON = "application/json"


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request as the fake received it. Header names are lower-cased."""

    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    json: Any
    content: bytes


@dataclass(frozen=True, slots=True)
class Reply:
    """A successful chat completion; streamed as SSE iff the request had ``stream: true``."""

    content: str | None = "ok"
    tool_calls: tuple[Mapping[str, Any], ...] = ()
    usage: tuple[int, int] | None = None
    finish_reason: str | None = None
    id: str | None = None
    chunks: int = 3
    first_byte_delay: float = 0.0
    first_token_delay: float = 0.0
    chunk_delay: float = 0.0
    reset_after: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Error:
    """A non-2xx JSON response, e.g. 429 with ``Retry-After``."""

    status: int
    body: Mapping[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)
    first_byte_delay: float = 0.0


@dataclass(frozen=True, slots=True)
class Raw:
    """Bytes sent exactly as given, one body chunk per item (hand-written SSE, bad JSON …)."""

    chunks: tuple[bytes, ...]
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=lambda: {"content-type": _SSE})
    first_byte_delay: float = 0.0
    chunk_delay: float = 0.0
    reset_after: int | None = None


Responder: TypeAlias = "Reply | Error | Raw | Callable[[RecordedRequest], Reply | Error | Raw]"


@dataclass(frozen=True, slots=True)
class Rendered:
    """What goes on the wire: status, headers, body frames and the timing around them.

    ``reset_after=N`` sends N frames, then closes the connection without finishing the body.
    """

    status: int
    headers: Mapping[str, str]
    frames: tuple[bytes, ...]
    first_byte_delay: float = 0.0
    first_token_delay: float = 0.0
    chunk_delay: float = 0.0
    reset_after: int | None = None

    @property
    def body(self) -> bytes:
        return b"".join(self.frames)


# --------------------------------------------------------------------------- builders


def tool_call(name: str, arguments: Mapping[str, Any] | str, *, id: str | None = None) -> dict:
    """An OpenAI-shaped tool call; ``id=None`` becomes ``call_<seq>_<k>`` when rendered."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": id, "type": "function", "function": {"name": name, "arguments": args}}


def _normalise_call(call: Mapping[str, Any]) -> Mapping[str, Any]:
    if "function" in call:
        return call
    return tool_call(call["name"], call.get("arguments", {}), id=call.get("id"))


def reply(
    content: str | None = "ok",
    *,
    tool_calls: Sequence[Mapping[str, Any]] | None = None,
    usage: tuple[int, int] | None = None,
    finish_reason: str | None = None,
    id: str | None = None,
    chunks: int = 3,
    first_byte_delay: float = 0.0,
    first_token_delay: float = 0.0,
    chunk_delay: float = 0.0,
    reset_after: int | None = None,
    headers: Mapping[str, str] | None = None,
) -> Reply:
    """Build a chat completion reply.

    ``tool_calls`` items are OpenAI-shaped (see :func:`tool_call`) or ``{"name", "arguments",
    "id"?}``. ``usage=(prompt, completion)`` overrides the computed usage. ``finish_reason``
    defaults to ``"tool_calls"`` when there are tool calls, else ``"stop"``.
    """
    return Reply(
        content=content,
        tool_calls=tuple(_normalise_call(c) for c in tool_calls or ()),
        usage=usage,
        finish_reason=finish_reason,
        id=id,
        chunks=max(1, chunks),
        first_byte_delay=first_byte_delay,
        first_token_delay=first_token_delay,
        chunk_delay=chunk_delay,
        reset_after=reset_after,
        headers=dict(headers or {}),
    )


def error(
    status: int,
    body: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
    *,
    first_byte_delay: float = 0.0,
) -> Error:
    """A JSON error response; the default body is OpenAI's ``{"error": {...}}`` shape."""
    if body is None:
        body = _error_body(f"fake upstream error {status}", "server_error", None)
    return Error(status, dict(body), dict(headers or {}), first_byte_delay)


def rate_limited(retry_after: int | str = 1) -> Error:
    """429 with ``Retry-After`` (seconds), as OpenAI sends it."""
    body = _error_body("Rate limit reached (fake)", "requests", "rate_limit_exceeded")
    return error(429, body, {"retry-after": str(retry_after)})


def context_length_exceeded(message: str | None = None) -> Error:
    """400 ``context_length_exceeded``, the error a too-long prompt gets from OpenAI."""
    msg = message or "This model's maximum context length is 128000 tokens (fake)."
    body = _error_body(msg, "invalid_request_error", "context_length_exceeded", "messages")
    return error(400, body)


def raw(
    *chunks: bytes | str,
    status: int = 200,
    headers: Mapping[str, str] | None = None,
    first_byte_delay: float = 0.0,
    chunk_delay: float = 0.0,
    reset_after: int | None = None,
) -> Raw:
    """Send ``chunks`` verbatim (``str`` is UTF-8 encoded); content-type defaults to SSE."""
    data = tuple(c.encode() if isinstance(c, str) else c for c in chunks)
    hdrs = dict(headers) if headers is not None else {"content-type": _SSE}
    return Raw(data, status, hdrs, first_byte_delay, chunk_delay, reset_after)


def _error_body(message: str, type_: str, code: str | None, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


# --------------------------------------------------------------------------- rendering


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
    return ""


def count_prompt_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """The fake's prompt_tokens: ``sum(len(text of content) // 4)`` over the messages."""
    return sum(len(_text(m.get("content"))) // 4 for m in messages)


def fake_embedding(text: str, dim: int = 8) -> list[float]:
    """A deterministic unit vector for ``text``; values are exact float32 (base64-safe)."""
    digest = b"".join(hashlib.sha256(f"{i}:{text}".encode()).digest() for i in range(dim // 8 + 1))
    raw_vals = [(b - 127.5) / 127.5 for b in digest[:dim]]
    norm = sum(v * v for v in raw_vals) ** 0.5 or 1.0
    return list(struct.unpack(f"<{dim}f", struct.pack(f"<{dim}f", *(v / norm for v in raw_vals))))


def _split(text: str, n: int) -> list[str]:
    if not text:
        return []
    n = min(n, len(text))
    base, extra = divmod(len(text), n)
    out, start = [], 0
    for i in range(n):
        size = base + (1 if i < extra else 0)
        out.append(text[start : start + size])
        start += size
    return out


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


@dataclass(frozen=True, slots=True)
class _Chat:
    """A reply resolved against one request: ids filled in, usage computed."""

    reply: Reply
    body: Mapping[str, Any]
    seq: int

    @property
    def n(self) -> int:
        n = self.body.get("n")  # a client's odd value (a string, a float) means one answer
        return max(1, n) if isinstance(n, int) and not isinstance(n, bool) else 1

    @property
    def calls(self) -> list[dict]:
        out = []
        for k, call in enumerate(self.reply.tool_calls):
            fn = call["function"]
            out.append(
                {
                    "id": call.get("id") or f"call_{self.seq}_{k}",
                    "type": "function",
                    "function": {"name": fn["name"], "arguments": fn.get("arguments", "")},
                }
            )
        return out

    @property
    def finish_reason(self) -> str:
        return self.reply.finish_reason or ("tool_calls" if self.reply.tool_calls else "stop")

    @property
    def usage(self) -> dict:
        if self.reply.usage is not None:
            prompt, completion = self.reply.usage
        else:
            prompt = count_prompt_tokens(self.body.get("messages") or [])
            args = sum(len(c["function"]["arguments"]) for c in self.calls)
            completion = (len(self.reply.content or "") + args) // 4 * self.n
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def envelope(self, obj: str) -> dict:
        return {
            "id": self.reply.id or f"chatcmpl-fake-{self.seq}",
            "object": obj,
            "created": CREATED,
            "model": self.body.get("model") or DEFAULT_MODELS[0],
            "system_fingerprint": "fp_fake",
        }

    def logprobs(self, pieces: Sequence[str], start: int = 0) -> dict | None:
        if not self.body.get("logprobs"):
            return None
        top = int(self.body.get("top_logprobs") or 0)

        def entry(tok: str, i: int) -> dict:
            return {"token": tok, "logprob": -0.01 * (i + 1), "bytes": list(tok.encode())}

        content = [
            {**entry(p, i), "top_logprobs": [entry(p, i) for _ in range(top)]}
            for i, p in enumerate(pieces, start)
        ]
        return {"content": content, "refusal": None}


def _chat_json(chat: _Chat) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": chat.reply.content, "refusal": None}
    if chat.calls:
        message["tool_calls"] = chat.calls
    pieces = _split(chat.reply.content or "", chat.reply.chunks)
    choices = [
        {
            "index": i,
            "message": message,
            "logprobs": chat.logprobs(pieces),
            "finish_reason": chat.finish_reason,
        }
        for i in range(chat.n)
    ]
    return {**chat.envelope("chat.completion"), "choices": choices, "usage": chat.usage}


def _chat_deltas(chat: _Chat) -> Iterator[tuple[dict, dict | None]]:
    """(delta, logprobs) for one choice, in wire order, before the finish frame."""
    content = chat.reply.content
    yield {"role": "assistant", "content": "" if content is not None else None}, None
    for i, piece in enumerate(_split(content or "", chat.reply.chunks)):
        yield {"content": piece}, chat.logprobs([piece], start=i)
    for k, call in enumerate(chat.calls):
        fn = call["function"]
        head = {"index": k, "id": call["id"], "type": "function"}
        yield {"tool_calls": [{**head, "function": {"name": fn["name"], "arguments": ""}}]}, None
        for piece in _split(fn["arguments"], chat.reply.chunks):
            yield {"tool_calls": [{"index": k, "function": {"arguments": piece}}]}, None


def _chat_frames(chat: _Chat) -> list[bytes]:
    options = chat.body.get("stream_options") or {}
    include_usage = bool(options.get("include_usage"))
    base = chat.envelope("chat.completion.chunk")
    if include_usage:
        base["usage"] = None  # OpenAI sends usage: null on every chunk but the last
    deltas = list(_chat_deltas(chat))
    frames = []
    for delta, lp in deltas:
        for i in range(chat.n):
            choice = {"index": i, "delta": delta, "logprobs": lp, "finish_reason": None}
            frames.append(_sse({**base, "choices": [choice]}))
    for i in range(chat.n):
        choice = {"index": i, "delta": {}, "logprobs": None, "finish_reason": chat.finish_reason}
        frames.append(_sse({**base, "choices": [choice]}))
    if include_usage:
        frames.append(_sse({**base, "choices": [], "usage": chat.usage}))
    frames.append(b"data: [DONE]\n\n")
    return frames


def _render_reply(r: Reply, request: RecordedRequest, seq: int) -> Rendered:
    body = request.json if isinstance(request.json, Mapping) else {}
    chat = _Chat(r, body, seq)
    headers = {"x-request-id": f"req_fake_{seq}", **r.headers}
    if body.get("stream"):
        frames = tuple(_chat_frames(chat))
        headers.setdefault("content-type", _SSE)
    else:
        data = json.dumps(_chat_json(chat)).encode()
        frames = (data[: len(data) // 2], data[len(data) // 2 :])  # two, so reset_after=1 works
        headers.setdefault("content-type", _JSON)
    return Rendered(
        200,
        headers,
        frames,
        r.first_byte_delay,
        r.first_token_delay,
        r.chunk_delay,
        r.reset_after,
    )


def render(response: Responder, request: RecordedRequest, seq: int = 0) -> Rendered:
    """Resolve a scripted response against ``request``; pure, reusable with MockTransport."""
    if callable(response) and not isinstance(response, Reply | Error | Raw):
        response = response(request)
    if isinstance(response, Error):
        headers = {"content-type": _JSON, **response.headers}
        frames = (json.dumps(response.body).encode(),)
        return Rendered(response.status, headers, frames, response.first_byte_delay)
    if isinstance(response, Raw):
        return Rendered(
            response.status,
            dict(response.headers),
            response.chunks,
            response.first_byte_delay,
            0.0,
            response.chunk_delay,
            response.reset_after,
        )
    return _render_reply(response, request, seq)


def _models_json(models: Sequence[str]) -> Raw:
    data = [{"id": m, "object": "model", "created": CREATED, "owned_by": "fake"} for m in models]
    return raw(json.dumps({"object": "list", "data": data}), headers={"content-type": _JSON})


def _embeddings_json(body: Mapping[str, Any], default_dim: int) -> Raw:
    inputs = body.get("input")
    items = inputs if isinstance(inputs, list) else [inputs]
    if items and isinstance(items[0], int):
        items = [items]  # one tokenised input
    texts = [item if isinstance(item, str) else json.dumps(item) for item in items]
    dim = int(body.get("dimensions") or default_dim)
    data = []
    for i, text in enumerate(texts):
        vec: Any = fake_embedding(text, dim)
        if body.get("encoding_format") == "base64":
            vec = base64.b64encode(struct.pack(f"<{dim}f", *vec)).decode()
        data.append({"object": "embedding", "index": i, "embedding": vec})
    tokens = sum(len(text) // 4 for text in texts)
    out = {
        "object": "list",
        "data": data,
        "model": body.get("model") or "text-embedding-fake",
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    return raw(json.dumps(out), headers={"content-type": _JSON})


# --------------------------------------------------------------------------- server


class _Server(uvicorn.Server):
    """uvicorn for a background thread: stops at once and cancels in-flight requests."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    async def serve(self, sockets: Any = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        await super().serve(sockets)

    async def main_loop(self) -> None:
        # uvicorn polls should_exit every 100 ms; an event makes close() immediate.
        await self.on_tick(0)
        assert self._stop is not None
        await self._stop.wait()

    async def shutdown(self, sockets: Any = None) -> None:
        for server in self.servers:
            server.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        tasks = list(self.server_state.tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def stop(self) -> None:
        self.should_exit = True
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # loop already closed
                self._loop.call_soon_threadsafe(self._stop.set)


class _ResetError(Exception):
    """Raised when the connection to reset cannot be found; uvicorn then drops it."""


async def _read_request(scope: Mapping[str, Any], receive: Callable[[], Any]) -> RecordedRequest:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    content = b"".join(chunks)
    try:
        parsed = json.loads(content) if content else None
    except ValueError:
        parsed = None
    headers: dict[str, str] = {}
    for k, v in scope["headers"]:
        name = k.decode("latin-1").lower()
        value = v.decode("latin-1")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return RecordedRequest(
        method=scope["method"],
        path=scope["path"],
        query=scope.get("query_string", b"").decode("latin-1"),
        headers=headers,
        json=parsed,
        content=content,
    )


class FakeUpstream:
    """A real HTTP server on 127.0.0.1 that speaks enough OpenAI for the proxy's tests.

    Routes: ``POST /v1/chat/completions`` (scripted, else :attr:`default`), ``GET /v1/models``,
    ``POST /v1/embeddings`` (deterministic vectors, float or base64). :meth:`script` with
    ``endpoint=`` overrides any path, e.g. a 500 for ``/v1/models``. Every request is recorded.
    """

    def __init__(
        self,
        *,
        models: Sequence[str] = DEFAULT_MODELS,
        embedding_dim: int = 8,
        tls: tuple[str, str] | None = None,
    ) -> None:
        """``tls``: (certificate file, key file) to serve HTTPS instead of HTTP."""
        self.tls = tls
        self.models = tuple(models)
        self.embedding_dim = embedding_dim
        self.default: Responder = Reply()
        self._cond = threading.Condition()
        self._requests: list[RecordedRequest] = []
        self._disconnects: list[int] = []
        self._open = 0  # responses being delivered
        self._queues: dict[str, deque[Responder]] = {}
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._port = 0

    # -- lifecycle

    def start(self) -> FakeUpstream:
        config = uvicorn.Config(
            self,
            host="127.0.0.1",
            port=0,
            interface="asgi3",
            http="h11",
            ws="none",
            lifespan="off",
            log_config=None,
            access_log=False,
            proxy_headers=False,
            ssl_certfile=self.tls[0] if self.tls else None,
            ssl_keyfile=self.tls[1] if self.tls else None,
        )
        server = _Server(config)
        thread = threading.Thread(target=server.run, name="fake-upstream", daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                server.stop()
                raise RuntimeError("fake upstream did not start")
            time.sleep(0.001)
        self._server, self._thread = server, thread
        self._port = server.servers[0].sockets[0].getsockname()[1]
        return self

    def close(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.stop()
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> FakeUpstream:
        return self.start() if self._server is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- test-facing API (main thread)

    @property
    def origin(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self._port}"

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        """Base URL for OpenAI clients, ending in ``/v1``."""
        return f"{self.origin}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received so far, in arrival order."""
        with self._cond:
            return list(self._requests)

    def bodies(self, path: str = CHAT) -> list[Any]:
        """Parsed JSON bodies of the requests to ``path``."""
        return [r.json for r in self.requests if r.path == path]

    @property
    def disconnects(self) -> list[int]:
        """Indexes (into :attr:`requests`) whose client hung up before the response ended."""
        with self._cond:
            return list(self._disconnects)

    @property
    def open_responses(self) -> int:
        """Responses still being delivered (a stream the client has not read to the end)."""
        with self._cond:
            return self._open

    def script(self, *responses: Responder, endpoint: str = CHAT) -> None:
        """Queue responses for ``endpoint``; each request there pops one, first in first out."""
        with self._cond:
            self._queues.setdefault(endpoint, deque()).extend(responses)

    def pending(self, endpoint: str = CHAT) -> int:
        """How many scripted responses for ``endpoint`` are still unused."""
        with self._cond:
            return len(self._queues.get(endpoint, ()))

    def wait_for_requests(self, n: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until at least ``n`` requests arrived (for work the proxy does off-path)."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._requests) >= n, timeout):
                raise TimeoutError(f"expected {n} requests, got {len(self._requests)}")
            return list(self._requests)

    # -- server side (uvicorn thread)

    def _record(self, request: RecordedRequest) -> tuple[int, Responder]:
        with self._cond:
            seq = len(self._requests)
            self._requests.append(request)
            self._cond.notify_all()
            queue = self._queues.get(request.path)
            if queue:
                return seq, queue.popleft()
        return seq, self._default_for(request)

    def _default_for(self, request: RecordedRequest) -> Responder:
        body = request.json if isinstance(request.json, Mapping) else None
        if request.path == CHAT and request.method == "POST":
            if body is None:
                return error(400, _error_body("body must be JSON", "invalid_request_error", None))
            return self.default
        if request.path == MODELS and request.method == "GET":
            return _models_json(self.models)
        if request.path == EMBEDDINGS and request.method == "POST" and body is not None:
            return _embeddings_json(body, self.embedding_dim)
        msg = f"fake upstream has no route {request.method} {request.path}"
        return error(404, _error_body(msg, "invalid_request_error", "unknown_url"))

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = await _read_request(scope, receive)
        seq, responder = self._record(request)
        rendered = render(responder, request, seq)

        async def until_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        watcher = asyncio.ensure_future(until_disconnect())
        with self._cond:
            self._open += 1
        try:
            if not await self._deliver(rendered, scope, send, watcher):
                with self._cond:
                    self._disconnects.append(seq)
        finally:
            watcher.cancel()
            with self._cond:
                self._open -= 1

    async def _deliver(
        self, r: Rendered, scope: Any, send: Any, watcher: asyncio.Future[None]
    ) -> bool:
        """Send ``r``; False when the client disconnected first."""
        if r.first_byte_delay and await _client_left(watcher, r.first_byte_delay):
            return False
        headers = dict(r.headers)
        if "event-stream" not in headers.get("content-type", "") and r.reset_after is None:
            headers.setdefault("content-length", str(len(r.body)))
        raw_headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        await send({"type": "http.response.start", "status": r.status, "headers": raw_headers})
        if r.first_token_delay and await _client_left(watcher, r.first_token_delay):
            return False
        for i, frame in enumerate(r.frames):
            if r.reset_after is not None and i >= r.reset_after:
                await self._reset(scope, watcher)
                return True
            if i and r.chunk_delay and await _client_left(watcher, r.chunk_delay):
                return False
            if watcher.done():
                return False
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return True

    async def _reset(self, scope: Any, watcher: asyncio.Future[None]) -> None:
        # Close the socket under uvicorn (after flushing what was sent), so the client sees
        # the body end early with no [DONE]; uvicorn logs nothing for a disconnected cycle.
        assert self._server is not None
        for protocol in list(self._server.server_state.connections):
            if getattr(protocol, "client", None) == scope.get("client"):
                protocol.transport.close()
                await asyncio.wait({watcher}, timeout=1.0)
                return
        raise _ResetError("connection to reset not found")


async def _client_left(watcher: asyncio.Future[None], delay: float) -> bool:
    """Sleep ``delay`` seconds, returning early (True) if the client disconnects."""
    done, _ = await asyncio.wait({watcher}, timeout=delay)
    return bool(done)
