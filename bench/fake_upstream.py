"""The cheapest OpenAI-compatible upstream we can serve, for measuring proxy overhead.

``python -m bench.fake_upstream --port N [--chunks 50] [--chunk-delay-ms 2]``

A raw ASGI app under uvicorn (httptools + uvloop when installed), the same for every target
measured. ``POST .../chat/completions``
answers a non-streaming JSON completion, or with ``"stream": true`` an SSE stream of ``--chunks``
content chunks spaced ``--chunk-delay-ms`` apart, then the finish chunk, the usage-only chunk when
``stream_options.include_usage`` is set, and ``data: [DONE]``. The spacing is what makes
buffering visible: a proxy that buffers shows a late first chunk and near-zero gaps.

When the request carries ``tools`` the reply is one ``tool_calls`` call (``read_file``) so an
agent-shaped load generator can append it and answer with a tool result, exactly as a real
agent would; otherwise it is a short text.

The request body is never JSON-parsed: a 200 KB body would cost the fake more than the proxies
we measure. Top-level flags are found with regexes that skip escaped quotes (keys inside message
strings are always escaped in JSON), which is exact for every body the load generator sends.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = [
    "FAKE_TEXT",
    "FAKE_STREAM_PIECE",
    "FakeSettings",
    "create_app",
    "has_flag",
    "completion_body",
    "stream_frames",
    "main",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

FAKE_TEXT = "All done: the change is applied and the tests pass."
FAKE_STREAM_PIECE = "tok "
_VALUE_RE = re.compile(rb"\s*:\s*(true|\[)")
_MODEL_VALUE_RE = re.compile(rb'\s*:\s*"([^"\\]{1,200})"')
_JSON_HEADERS = [(b"content-type", b"application/json")]
_SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


class FakeSettings:
    """How the fake answers; one instance per process."""

    __slots__ = ("chunks", "chunk_delay")

    def __init__(self, *, chunks: int = 50, chunk_delay_ms: float = 2.0) -> None:
        self.chunks = chunks
        self.chunk_delay = chunk_delay_ms / 1000.0


def _usage(prompt_bytes: int, completion: int) -> dict[str, int]:
    prompt = max(1, prompt_bytes // 4)
    total = prompt + completion
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}


def completion_body(body: bytes, call_id: str) -> bytes:
    """A non-streaming chat.completion for ``body``: a tool call when it offers tools."""
    model = _model(body)
    if has_flag(body, b"tools", b"["):
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "src/app.py"}'},
                }
            ],
        }
        finish = "tool_calls"
    else:
        message = {"role": "assistant", "content": FAKE_TEXT}
        finish = "stop"
    out = {
        "id": "chatcmpl-" + call_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": _usage(len(body), 12),
    }
    return json.dumps(out, separators=(",", ":")).encode()


def stream_frames(body: bytes, call_id: str, chunks: int) -> list[bytes]:
    """Every SSE frame of a streamed answer, in order, each a complete ``data: ...\\n\\n``."""
    model = _model(body)
    base = {"id": "chatcmpl-" + call_id, "object": "chat.completion.chunk", "created": 0}
    base["model"] = model

    def frame(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        return b"data: " + json.dumps({**base, "choices": choices, **extra}).encode() + b"\n\n"

    frames = [frame([{"index": 0, "delta": {"role": "assistant", "content": ""}}])]
    piece = frame([{"index": 0, "delta": {"content": FAKE_STREAM_PIECE}, "finish_reason": None}])
    frames.extend(itertools.repeat(piece, chunks))
    frames.append(frame([{"index": 0, "delta": {}, "finish_reason": "stop"}]))
    if has_flag(body, b"include_usage", b"true"):
        frames.append(frame([], usage=_usage(len(body), chunks)))
    frames.append(b"data: [DONE]\n\n")
    return frames


def has_flag(body: bytes, key: bytes, value: bytes) -> bool:
    """Whether an unescaped ``"key": value`` occurs in ``body`` (value ``true`` or ``[``).

    ``bytes.find`` skips through a 200 KB body in microseconds, where a regex with a
    look-behind costs milliseconds; keys inside JSON strings are escaped, so they never match.
    """
    quoted = b'"' + key + b'"'
    start = body.find(quoted)
    while start >= 0:
        if start == 0 or body[start - 1] != 0x5C:  # not preceded by a backslash
            match = _VALUE_RE.match(body, start + len(quoted))
            if match and match.group(1) == value:
                return True
        start = body.find(quoted, start + len(quoted))
    return False


def _model(body: bytes) -> str:
    start = body.find(b'"model"')
    while start >= 0:
        match = _MODEL_VALUE_RE.match(body, start + 7)
        if match and (start == 0 or body[start - 1] != 0x5C):
            return match.group(1).decode()
        start = body.find(b'"model"', start + 7)
    return "fake"


async def _read_body(receive: Receive) -> bytes:
    parts: list[bytes] = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)


async def _send_json(send: Send, status: int, payload: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": _JSON_HEADERS})
    await send({"type": "http.response.body", "body": payload})


def create_app(settings: FakeSettings) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The raw ASGI app; a counter gives every answer a unique id."""
    counter = itertools.count()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        body = await _read_body(receive)
        if scope["method"] == "GET":
            models = {"object": "list", "data": [{"id": "fake", "object": "model"}]}
            payload = json.dumps(models if path.endswith("/models") else {"ok": True})
            await _send_json(send, 200, payload.encode())
            return
        if not path.endswith("/chat/completions"):
            await _send_json(send, 404, b'{"error":{"message":"not found","type":"not_found"}}')
            return
        call_id = f"call_{next(counter):08d}"
        if not has_flag(body, b"stream", b"true"):
            await _send_json(send, 200, completion_body(body, call_id))
            return
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        frames = stream_frames(body, call_id, settings.chunks)
        for frame in frames[:-1]:
            await send({"type": "http.response.body", "body": frame, "more_body": True})
            if settings.chunk_delay:
                await asyncio.sleep(settings.chunk_delay)
        await send({"type": "http.response.body", "body": frames[-1]})

    return app


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--chunks", type=int, default=50)
    parser.add_argument("--chunk-delay-ms", type=float, default=2.0)
    args = parser.parse_args(argv)
    app = create_app(FakeSettings(chunks=args.chunks, chunk_delay_ms=args.chunk_delay_ms))
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        http=_http(),
        loop=_best("uvloop", "asyncio"),
        backlog=4096,
        lifespan="off",
    )


def _http() -> Any:
    """uvicorn's httptools protocol, or h11 when httptools is not installed."""
    return _best("httptools", "h11")


def _best(preferred: str, fallback: str) -> str:
    try:
        __import__(preferred)
    except ImportError:
        return fallback
    return preferred


if __name__ == "__main__":
    main()
