"""How the fake upstream renders a scripted response against a request: pure, so tests can
predict every byte (and reuse it with MockTransport).

Everything the fake says is a pure function of the scripted response and the request:

* ``prompt_tokens`` (when not scripted) is :func:`count_prompt_tokens` of the request messages,
  the same per-message ``len(text) // 4`` rule as the unit tests' fake counter;
* ``completion_tokens`` is ``(len(content) + len(all tool-call arguments)) // 4`` per choice;
* ids are ``chatcmpl-fake-<seq>`` and ``call_<seq>_<k>``, where ``seq`` is the request's index
  in :attr:`FakeUpstream.requests`.

The default ``/v1/models`` and ``/v1/embeddings`` answers are rendered here too.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tests.fakes.replies import (
    _JSON,
    _SSE,
    Error,
    Pacer,
    Raw,
    RecordedRequest,
    Reply,
    Responder,
    _error_body,
    raw,
)

__all__ = [
    "CREATED",
    "DEFAULT_MODELS",
    "Rendered",
    "count_prompt_tokens",
    "fake_embedding",
    "render",
]

CREATED = 1_700_000_000  # fixed `created` so whole responses can be compared
DEFAULT_MODELS = ("gpt-fake", "gpt-fake-mini")


@dataclass(frozen=True, slots=True)
class Rendered:
    """What goes on the wire: status, headers, body frames and the timing around them.

    ``reset_after=N`` sends N frames, then closes the connection without finishing the body;
    a ``pacer`` sends each frame after the first only when the test allows it.
    """

    status: int
    headers: Mapping[str, str]
    frames: tuple[bytes, ...]
    first_byte_delay: float = 0.0
    first_token_delay: float = 0.0
    chunk_delay: float = 0.0
    reset_after: int | None = None
    pacer: Pacer | None = None

    @property
    def body(self) -> bytes:
        return b"".join(self.frames)


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


MAX_N = 128
"""OpenAI's most choices per request; past it, its 400 (a fake that rendered every choice
asked for would take forever over schemathesis's ``n`` of 2**57)."""


def _n_refused(n: int) -> Rendered:
    said = f"Invalid 'n': integer above maximum value. Expected a value <= {MAX_N}, but got {n}"
    error = {"message": said, "type": "invalid_request_error", "param": "n"}
    data = json.dumps({"error": {**error, "code": "integer_above_max_value"}}).encode()
    return Rendered(400, {"content-type": _JSON}, (data,))


def _render_reply(r: Reply, request: RecordedRequest, seq: int) -> Rendered:
    body = request.json if isinstance(request.json, Mapping) else {}
    chat = _Chat(r, body, seq)
    if chat.n > MAX_N:
        return _n_refused(chat.n)
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
        r.pacer,
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
            response.pacer,
        )
    return _render_reply(response, request, seq)


def _models_json(models: Sequence[str]) -> Raw:
    data = [{"id": m, "object": "model", "created": CREATED, "owned_by": "fake"} for m in models]
    return raw(json.dumps({"object": "list", "data": data}), headers={"content-type": _JSON})


MAX_DIMENSIONS = 3072
"""The most ``dimensions`` OpenAI's largest embedding model returns; more is its 400."""


def embeddings_refusal(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """OpenAI's 400 body for an embeddings body whose ``input`` or ``dimensions`` it refuses
    (the proxy forwards both as they came), else None."""
    dim = body.get("dimensions")
    if dim is not None and (type(dim) is not int or not 1 <= dim <= MAX_DIMENSIONS):
        return _error_body(f"Invalid 'dimensions': {dim!r}.", "invalid_request_error", None)
    inputs = body.get("input")
    items = inputs if isinstance(inputs, list) else [inputs]
    if not items or not all(isinstance(i, str | int | list) for i in items):
        return _error_body("Invalid 'input'.", "invalid_request_error", None, "input")
    return None


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
