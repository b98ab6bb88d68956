"""Fake upstreams that speak the dialects of real OpenAI-compatible providers.

Each :class:`Dialect` is what one provider's public documentation says of its chat endpoint:
the path under its base URL, the credential it takes, the fields it refuses and in which
shape it says so, how it streams (comments, a filter chunk first, reasoning deltas, usage
only when asked, in its last chunk with ``choices: []`` or beside the finish reason, or
never), and what it asks back (DeepSeek's ``reasoning_content`` beside a tool call in
thinking mode, Mistral's nine-character tool-call ids). :class:`DialectUpstream` serves one
at its own path over real loopback HTTP (tests.fakes.upstream). The model's turns are
scripted as :class:`Turn` values; each request answers the next, in the dialect's shape.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tests.fakes.rendering import count_prompt_tokens
from tests.fakes.replies import Error, RecordedRequest, Responder, raw
from tests.fakes.upstream import FakeUpstream

__all__ = [
    "AZURE_DEPLOYMENT",
    "DIALECTS",
    "FACT",
    "KEY",
    "REFUSE",
    "Dialect",
    "DialectUpstream",
    "Turn",
    "signature",
    "tool_turn",
]

_FACTS = "durable facts"  # what memory promotion's extraction prompt asks for
FACT = "The API listens on port 8443."
REFUSE = "refuse this"  # a last user message the provider refuses (400)

KEY = "sk-dialect-key"
"""The provider key the proxy's config names (``apiKeyEnv``); every dialect checks it."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One answer of the model: text, tool calls (``{"id", "name", "arguments"}``), thinking."""

    content: str = "ok"
    calls: tuple[Mapping[str, Any], ...] = ()
    reasoning: str | None = None
    fails: bool = False  # the stream breaks off with the provider's error after its text


@dataclass(frozen=True)
class Dialect:
    """What one provider does (its docs); the defaults are OpenAI's own."""

    name: str
    base: str = "/v1"  # the baseUrl's path; chat is at base + /chat/completions
    usage: str = "asked"  # "asked": last chunk, choices [], only with stream_options;
    # "beside": always, on the finish chunk; "never": no usage in a stream at all
    known: frozenset[str] | None = None  # top-level fields taken; None: any
    error_shape: str = "openai"  # "openai", "list" (Gemini's), "detail" (FastAPI's 422)
    comments: tuple[str, ...] = ()  # SSE comments before the first chunk
    filter_chunk: bool = False  # Azure's prompt_filter_results chunk first
    reasoning_field: str | None = None  # "reasoning_content" (DeepSeek), "reasoning"
    reasoning_back: bool = False  # a tool call of this turn must come back with its thinking
    call_id: re.Pattern[str] | None = None  # the tool-call ids it takes (Mistral's)
    max_n: int | None = None  # Anthropic takes n == 1 only
    formats: frozenset[str] | None = None  # the response_format types taken; None: any
    signed: bool = False  # Gemini 3: a tool call carries a thought signature, asked back
    call_index: bool = True  # a streamed tool call's delta names its index (Gemini's not)
    query: str | None = None  # a query parameter every call must carry (Azure's api-version)
    stream_above: int | None = None  # an unstreamed call may bound its output at this at most

    @property
    def chat(self) -> str:
        return f"{self.base}/chat/completions"

    # -- refusals ----------------------------------------------------------------------

    def refuse(self, status: int, message: str, param: str | None = None) -> Error:
        if self.error_shape == "list":  # Gemini's OpenAI endpoint answers a list of one
            body: Any = [
                {"error": {"code": status, "message": message, "status": "INVALID_ARGUMENT"}}
            ]
        elif self.error_shape == "detail":
            loc = ["body", param or "?"]
            body = {"detail": [{"type": "extra_forbidden", "loc": loc, "msg": message}]}
        else:
            kind = "invalid_request_error"
            body = {"error": {"message": message, "type": kind, "param": param, "code": None}}
        return Error(status, body, {}, 0.0)  # a list too (``error`` takes a mapping only)

    def check(self, req: RecordedRequest) -> Error | None:
        """The refusal of ``req``, or None when the provider takes it."""
        if req.headers.get("authorization") != f"Bearer {KEY}":
            return self.refuse(401, "Incorrect API key provided")
        if self.query is not None and f"{self.query}=" not in req.query:
            return self.refuse(404, "Resource not found")
        body = req.json
        if self.known is not None:
            for name in body:
                if name not in self.known:
                    status = 422 if self.error_shape == "detail" else 400
                    said = f'Invalid JSON payload received. Unknown name "{name}"'
                    return self.refuse(status, said, name)
        bound = body.get("max_tokens") or body.get("max_completion_tokens") or 0
        if self.stream_above is not None and not body.get("stream") and bound > self.stream_above:
            said = f"Requests with max_tokens > {self.stream_above} must have stream=true"
            return self.refuse(400, said, "max_tokens")
        if self.max_n is not None and int(body.get("n") or 1) > self.max_n:
            return self.refuse(400, "n: must be exactly 1", "n")
        kind = (body.get("response_format") or {}).get("type")
        if self.formats is not None and kind is not None and kind not in self.formats:
            return self.refuse(400, "This response_format type is unavailable now")
        messages = body.get("messages") or []
        if self.call_id is not None:
            for m in messages:
                ids = [c.get("id") for c in m.get("tool_calls") or []]
                ids += [m["tool_call_id"]] if m.get("role") == "tool" else []
                for cid in ids:
                    if not isinstance(cid, str) or not self.call_id.fullmatch(cid):
                        return self.refuse(400, "Tool call id was not valid", "messages")
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
        if self.signed:  # the turn in progress: its calls are asked back with their signatures
            for i, m in enumerate(messages[last_user + 1 :], last_user + 1):
                for c in m.get("tool_calls") or []:
                    if c.get("extra_content") != signature(c.get("id")):
                        said = f"Function call is missing a thought_signature (message {i})"
                        return self.refuse(400, said, "messages")
        if self.reasoning_back and self.reasoning_field:
            for i, m in enumerate(messages[last_user + 1 :], last_user + 1):
                if m.get("tool_calls") and not m.get(self.reasoning_field):
                    said = f"Missing `{self.reasoning_field}` field in the assistant message"
                    return self.refuse(400, f"{said} at message index {i}", "messages")
        return None

    # -- answers -----------------------------------------------------------------------

    def message(self, turn: Turn) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": turn.content or None}
        if turn.reasoning and self.reasoning_field:
            msg[self.reasoning_field] = turn.reasoning
        if turn.calls:
            msg["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])},
                    **({"extra_content": signature(c["id"])} if self.signed else {}),
                }
                for c in turn.calls
            ]
        return msg

    def usage_of(self, req: RecordedRequest, turn: Turn) -> dict[str, int]:
        prompt = count_prompt_tokens(req.json.get("messages") or [])
        done = len(turn.content) // 4 + 1
        return {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}

    def answer(self, req: RecordedRequest, turn: Turn) -> Responder:
        finish = "tool_calls" if turn.calls else "stop"
        head = {"id": "chatcmpl-d1", "created": 1_700_000_000, "model": req.json.get("model")}
        if not req.json.get("stream"):
            choice = {"index": 0, "message": self.message(turn), "finish_reason": finish}
            whole = {
                **head,
                "object": "chat.completion",
                "choices": [choice],
                "usage": self.usage_of(req, turn),
            }
            return raw(json.dumps(whole).encode(), headers={"content-type": "application/json"})
        frames = [f": {c}\n\n" for c in self.comments]

        def chunk(choices: list[Any], **more: Any) -> str:
            data = {**head, "object": "chat.completion.chunk", "choices": choices, **more}
            return f"data: {json.dumps(data)}\n\n"

        if self.filter_chunk:
            filters = [{"prompt_index": 0, "content_filter_results": {}}]
            opening = {"id": "", "object": "", "created": 0, "model": "", "choices": []}
            opening["prompt_filter_results"] = filters
            frames.append(f"data: {json.dumps(opening)}\n\n")
        frames.append(
            chunk(
                [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]
            )
        )
        if turn.reasoning and self.reasoning_field:
            for piece in _pieces(turn.reasoning):
                frames.append(
                    chunk(
                        [
                            {
                                "index": 0,
                                "delta": {self.reasoning_field: piece},
                                "finish_reason": None,
                            }
                        ]
                    )
                )
        for piece in _pieces(turn.content or ""):
            frames.append(chunk([{"index": 0, "delta": {"content": piece}, "finish_reason": None}]))
        for k, call in enumerate(self.message(turn).get("tool_calls") or []):
            frames.append(
                chunk(
                    [
                        {
                            "index": 0,
                            "delta": {"tool_calls": [_indexed(k, call, self.call_index)]},
                            "finish_reason": None,
                        }
                    ]
                )
            )
        if turn.fails:  # OpenRouter's shape: the error beside a choice finished by "error"
            failed = {"message": "Provider disconnected", "code": 502}
            frames.append(
                chunk([{"index": 0, "delta": {}, "finish_reason": "error"}], error=failed)
            )
            return raw(*frames, "data: [DONE]\n\n")
        usage = self.usage_of(req, turn)
        asked = (req.json.get("stream_options") or {}).get("include_usage")
        last = {"index": 0, "delta": {}, "finish_reason": finish}
        if self.usage == "beside":
            frames.append(chunk([last], usage=usage))
        else:
            frames.append(chunk([last]))
            if self.usage == "asked" and asked:
                frames.append(chunk([], usage=usage))
        frames.append("data: [DONE]\n\n")
        return raw(*frames)


def signature(call_id: Any) -> dict[str, Any]:
    return {"google": {"thought_signature": f"sig-{call_id}"}}


def _indexed(k: int, call: Mapping[str, Any], named: bool) -> dict[str, Any]:
    return {"index": k, **call} if named else dict(call)


def _pieces(text: str) -> list[str]:
    return [text[i : i + 7] for i in range(0, len(text), 7)]


_OPENAI_FIELDS = frozenset(
    {
        "model",
        "messages",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "n",
        "stop",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "seed",
        "user",
        "logprobs",
        "top_logprobs",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
    }
)

DIALECTS: dict[str, Dialect] = {
    d.name: d
    for d in (
        # Azure OpenAI's v1 API (/openai/v1/): the OpenAI client with the resource's key as
        # its bearer, no api-version; a stream opens with the prompt filter's chunk.
        Dialect("azure", base="/openai/v1", filter_chunk=True),
        # Gemini's OpenAI endpoint: unknown fields refused, errors as a list of one object,
        # usage beside the last chunk's finish reason; Gemini 3's tool calls carry a thought
        # signature (extra_content) asked back within the turn; a streamed call names no index.
        Dialect(
            "gemini",
            base="/v1beta/openai",
            usage="beside",
            error_shape="list",
            known=_OPENAI_FIELDS | {"reasoning_effort", "extra_body"},
            signed=True,
            call_index=False,
        ),
        # Anthropic's OpenAI SDK compatibility: n must be 1; stream_options taken.
        Dialect("anthropic", max_n=1),
        # Ollama's /v1: usage in a stream only with stream_options.
        Dialect("ollama", reasoning_field="reasoning"),
        # An older vLLM: unknown fields refused by its validation (422, FastAPI's detail).
        Dialect(
            "vllm-strict",
            known=_OPENAI_FIELDS - {"stream_options"},
            error_shape="detail",
            usage="never",
        ),
        Dialect("groq", base="/openai/v1"),
        # Mistral: nine-character alphanumeric tool-call ids; usage on the last chunk.
        Dialect("mistral", usage="beside", call_id=re.compile(r"[A-Za-z0-9]{9}")),
        # DeepSeek in thinking mode: reasoning_content in deltas and messages, asked back
        # beside a tool call of the turn in progress; response_format json_object only.
        Dialect(
            "deepseek",
            reasoning_field="reasoning_content",
            reasoning_back=True,
            formats=frozenset({"text", "json_object"}),
        ),
        # OpenRouter: processing comments first; usage only with stream_options.
        Dialect(
            "openrouter",
            base="/api/v1",
            comments=("OPENROUTER PROCESSING",) * 2,
            reasoning_field="reasoning",
        ),
        Dialect("together"),
        # Fireworks: an unstreamed call bounds its output at 4096 tokens at most.
        Dialect("fireworks", base="/inference/v1", stream_above=4096),
    )
}


AZURE_DEPLOYMENT = Dialect(
    "azure-deployment", base="/openai/deployments/dep", filter_chunk=True, query="api-version"
)
"""Azure's deployment paths, called with a Microsoft Entra ID token as the client's bearer
(``KEY`` stands for it) and the ``api-version`` every call must carry."""


class DialectUpstream(FakeUpstream):
    """A fake provider of ``dialect``: chat at its own path, each request checked as it
    would check it and answered with the next scripted :class:`Turn` (``"ok"`` when none);
    the summary's fast model (``fast``) gets ``briefing`` back."""

    def __init__(self, dialect: Dialect, *, fast: str = "fast-model", briefing: str = "") -> None:
        super().__init__()
        self.dialect = dialect
        self.fast = fast
        self.briefing = briefing
        self._turns: deque[Turn] = deque()
        self.refusals: list[tuple[int, str]] = []  # (status, message) of each refused call

    @property
    def base_url(self) -> str:
        return f"{self.origin}{self.dialect.base}"

    def turns(self, *turns: Turn) -> None:
        with self._cond:
            self._turns.extend(turns)

    def chats(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == self.dialect.chat]

    def _default_for(self, request: RecordedRequest) -> Responder:
        if request.path != self.dialect.chat or request.method != "POST":
            return super()._default_for(request)
        refusal = self.dialect.check(request)
        said = str((request.json.get("messages") or [{}])[-1].get("content"))
        if refusal is None and said.startswith(REFUSE):  # a refusal the test asks for
            refusal = self.dialect.refuse(400, "Invalid value for 'top_p'", "top_p")
            if said == f"{REFUSE} late":  # after the proxy's keep-alive interval
                refusal = replace(refusal, first_byte_delay=0.8)
        if refusal is not None:
            with self._cond:
                self.refusals.append((refusal.status, json.dumps(refusal.body)))
            return refusal
        if _FACTS in str(request.json["messages"][0].get("content")):
            return self.dialect.answer(request, Turn(json.dumps({"facts": [FACT]})))
        if request.json.get("model") == self.fast:
            return self.dialect.answer(request, Turn(self.briefing))
        with self._cond:
            turn = self._turns.popleft() if self._turns else Turn()
        return self.dialect.answer(request, turn)


def tool_turn(calls: Sequence[tuple[str, str, Mapping[str, Any]]], **kw: Any) -> Turn:
    """A turn of tool calls, each ``(id, name, arguments)``."""
    return Turn(
        content="", calls=tuple({"id": i, "name": n, "arguments": a} for i, n, a in calls), **kw
    )
