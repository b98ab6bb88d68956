"""Chat completion chunks and the message they build, both ways (STYLE §E2).

``StreamAccumulator`` folds the parsed ``chat.completion.chunk`` deltas of a relayed stream
into the assistant message(s) the proxy stores, while the relay forwards the bytes untouched
(``proxy.sse`` splits and parses them). ``completion_to_chunks`` goes the other way: the SSE
frames of a ``chat.completion`` the proxy produced itself (the answer to ``/compact``).
Whether a chunk can be read as one at all is ``chunk_faults.py``'s. Pure: no I/O, no clocks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from proxy.cascade.delta_fields import OwnFields
from proxy.jsonio import storable
from proxy.sse import DONE, encode_event, is_map, usage_of

__all__ = [
    "MAX_OWN_FIELDS",
    "PROMPT_FILTERS",
    "StreamAccumulator",
    "completion_to_chunks",
    "index_of",
    "storable",
]

MAX_OWN_FIELDS = 32 << 20
"""The most a choice's own fields of the provider hold (``OwnFields``), in characters unless
the caller says: a whole non-streamed answer's cap (``answers.MAX_ANSWER_BYTES``)."""

PROMPT_FILTERS = "prompt_filter_results"
"""Azure's content filter results for the prompt: a whole answer's top-level field, and its
stream's in an opening chunk of no choices."""


@dataclass(slots=True)
class _ToolCall:
    id: str | None = None
    type: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    whole: Any = None  # arguments a provider sent as a JSON object (or array), not text
    extra: dict[str, Any] = field(default_factory=dict)  # unknown keys, e.g. a signature


@dataclass(slots=True)
class _Choice:
    role: str | None = None
    content: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    tool_calls: dict[int, _ToolCall] = field(default_factory=dict)
    function_call: _ToolCall | None = None  # the legacy ``functions`` API's one call
    finish_reason: str | None = None
    # a provider's own fields (``reasoning_content``, ``annotations``), merged as the SDK does
    own: OwnFields = field(default_factory=lambda: OwnFields(MAX_OWN_FIELDS))


class StreamAccumulator:
    """Builds the final assistant message(s) from ``chat.completion.chunk`` deltas.

    Mutable by design: the relay feeds it one chunk at a time while forwarding bytes.
    ``own_cap`` bounds each choice's own fields of the provider (``OwnFields``).
    """

    def __init__(self, own_cap: int = MAX_OWN_FIELDS) -> None:
        self.own_cap = own_cap
        self.id: str | None = None
        self.model: str | None = None
        self.created: int | None = None
        self.system_fingerprint: str | None = None
        self.usage: dict[str, Any] | None = None
        self._choices: dict[int, _Choice] = {}
        self._missing: tuple[str, ...] = _HEAD  # the top-level fields not seen yet

    def add(self, chunk: Mapping[str, Any]) -> None:
        """Fold one parsed chunk in; top-level fields keep their first value, usage its last."""
        found = False
        for key in self._missing:
            if chunk.get(key) is not None:
                setattr(self, key, chunk[key])
                found = True
        if found:
            self._missing = tuple(k for k in self._missing if getattr(self, k) is None)
        if chunk.get("usage") is not None:
            usage = usage_of(chunk)
            if usage is not None:
                self.usage = usage
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return
        for pos, raw in enumerate(choices):
            if is_map(raw):
                index = index_of(raw, pos)
                choice = self._choices.get(index)
                if choice is None:
                    choice = self._choices[index] = _Choice(own=OwnFields(self.own_cap))
                self._add_choice(choice, raw)

    def _add_choice(self, choice: _Choice, raw: Mapping[str, Any]) -> None:
        if raw.get("finish_reason") is not None:
            choice.finish_reason = raw["finish_reason"]
        delta = raw.get("delta")
        if not delta or not is_map(delta):
            return
        if delta.get("role") is not None:
            choice.role = delta["role"]
        if isinstance(content := delta.get("content"), str):
            choice.content.append(content)
        if isinstance(refusal := delta.get("refusal"), str):
            choice.refusal.append(refusal)
        choice.own.add(delta)
        legacy = delta.get("function_call")
        if is_map(legacy):
            if choice.function_call is None:
                choice.function_call = _ToolCall()
            _add_tool_call(choice.function_call, {"function": legacy})
        calls = delta.get("tool_calls")
        if not calls or not isinstance(calls, list):
            return
        for pos, raw_call in enumerate(calls):
            if is_map(raw_call):
                index = index_of(raw_call, pos)
                call = choice.tool_calls.get(index)
                if call is None:
                    call = choice.tool_calls[index] = _ToolCall()
                _add_tool_call(call, raw_call)

    def text_since(self, marks: dict[int, int]) -> dict[int, str]:
        """Each choice's content that came after ``marks`` (choice: pieces already taken), which
        it moves to the end: the text a live view has not shown yet (``services/deltas.py``)."""
        out = {}
        for index, choice in self._choices.items():
            taken = marks.get(index, 0)
            if len(choice.content) > taken:
                out[index] = "".join(choice.content[taken:])
                marks[index] = len(choice.content)
        return out

    @property
    def indices(self) -> list[int]:
        """Choice indices seen so far, ascending."""
        return sorted(self._choices)

    def finish_reason(self, index: int = 0) -> str | None:
        """The choice's finish reason, ``None`` if the stream ended without one."""
        choice = self._choices.get(index)
        return choice.finish_reason if choice else None

    def message(self, index: int = 0) -> dict[str, Any]:
        """The assistant message for choice ``index``, without ``None``/empty fields.

        ``content`` is omitted when empty beside tool calls, a legacy ``function_call`` or a
        refusal, but kept as ``""`` otherwise so the message stays valid to send upstream
        again. A provider's own fields of the deltas (``reasoning_content``, ``annotations``)
        are merged as the openai SDK merges them (``delta_fields.py``), so the stored reply is
        the message its stream helper gives, and a non-streamed answer would.
        """
        choice = self._choices.get(index) or _Choice()
        msg: dict[str, Any] = {"role": choice.role or "assistant"}
        content = _joined(choice.content)
        refusal = _joined(choice.refusal)
        legacy = choice.function_call
        if content or not (choice.tool_calls or refusal or legacy):
            msg["content"] = content
        if refusal:
            msg["refusal"] = refusal
        msg.update(storable(choice.own.plain()))
        if legacy is not None:
            msg["function_call"] = {
                "name": _joined([legacy.name]),
                "arguments": _arguments(legacy),
            }
        if choice.tool_calls:
            msg["tool_calls"] = [
                _tool_call_dict(choice.tool_calls[i]) for i in sorted(choice.tool_calls)
            ]
        return msg

    def to_completion(self) -> dict[str, Any]:
        """A non-streaming ``chat.completion`` object assembled from the stream."""
        choices = []
        for i in self.indices:
            msg = {"role": "assistant", "content": None, **self.message(i)}
            finish = self.finish_reason(i)
            choices.append({"index": i, "message": msg, "finish_reason": finish, "logprobs": None})
        out: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "usage": self.usage,
        }
        if self.system_fingerprint is not None:
            out["system_fingerprint"] = self.system_fingerprint
        return out


_HEAD = ("id", "model", "created", "system_fingerprint")


def index_of(part: Mapping[str, Any], place: int) -> int:
    """A choice's or a tool-call delta's ``index``, else its place in its list: a provider
    that sends whole calls may leave the index out. The accumulator numbers them so, and so
    does the relay (``relay_calls``), so both name a call alike."""
    index = part.get("index")
    return index if isinstance(index, int) and not isinstance(index, bool) else place


def _add_tool_call(call: _ToolCall, raw: Mapping[str, Any]) -> None:
    if call.id is None and raw.get("id"):
        call.id = raw["id"]
    if call.type is None and raw.get("type"):
        call.type = raw["type"]
    for key, value in raw.items():  # a provider's own fields go back to it, as sent
        if key not in _TOOL_CALL_KEYS and value is not None:
            call.extra.setdefault(key, value)
    fn = raw.get("function")
    if not isinstance(fn, Mapping):
        return
    name = fn.get("name")
    if isinstance(name, str) and name != call.name:
        call.name += name  # some servers repeat the full name on every delta
    arguments = fn.get("arguments")
    if isinstance(arguments, str):
        call.arguments.append(arguments)
    elif isinstance(arguments, Mapping | list) and call.whole is None:
        call.whole = arguments


_TOOL_CALL_KEYS = frozenset(("index", "id", "type", "function"))


def _tool_call_dict(call: _ToolCall) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if call.id is not None:
        out["id"] = storable(call.id)
    out["type"] = call.type or "function"
    out["function"] = {"name": _joined([call.name]), "arguments": _arguments(call)}
    out.update(storable(call.extra))
    return out


def _arguments(call: _ToolCall) -> Any:
    """A call's arguments as the provider streamed them: their text pieces joined, or, when
    no piece holds text, the object it sent whole, which the client gets and sends back as
    it is (stored as text, ``""``, the resend differed and was stored again)."""
    text = _joined(call.arguments)
    return storable(call.whole) if not text and call.whole is not None else text


def _joined(pieces: list[str]) -> str:
    """A streamed text's pieces as one string: two halves of a character a provider escaped
    and cut between chunks (``\\ud83d``, then ``\\ude00``) join (``storable``)."""
    text = "".join(pieces)
    return text if text.isascii() else storable(text)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
    return ""


_FRAMED = ("role", "content", "refusal", "tool_calls")  # each in frames of its own
_CHOICE_KEYS = frozenset(("index", "message", "finish_reason", "logprobs", "delta"))


def _choice_frames(index: int, choice: Mapping[str, Any]) -> list[dict[str, Any]]:
    message = choice.get("message") or {}
    # a content of null (a call's message) stays null, as a stream's first delta has it
    empty = None if message.get("content") is None else ""
    frames: list[dict[str, Any]] = [{"role": message.get("role") or "assistant", "content": empty}]
    if own := {k: v for k, v in message.items() if k not in _FRAMED and v is not None}:
        frames.append(own)  # a provider's own fields (``reasoning_content``), in one delta
    if text := _text(message.get("content")):
        frames.append({"content": text})
    said = len(frames) - 1 if text else -1  # the content frame's place, else the finish's
    if refusal := message.get("refusal"):
        frames.append({"refusal": refusal})
    for k, call in enumerate(message.get("tool_calls") or []):
        fn = call.get("function") or {}
        head = {"index": k, "id": call.get("id"), "type": call.get("type") or "function"}
        extra = {n: v for n, v in call.items() if n not in _TOOL_CALL_KEYS and v is not None}
        named: dict[str, Any] = {"name": fn.get("name", "")}
        args = fn.get("arguments")
        if args is None or isinstance(args, str):  # as OpenAI's head has it: none is ""
            named["arguments"] = ""
        frames.append({"tool_calls": [{**extra, **head, "function": named}]})
        if args:
            frames.append({"tool_calls": [{"index": k, "function": {"arguments": args}}]})
    choices = [{"index": index, "delta": d, "finish_reason": None} for d in frames]
    # the choice's own fields (Azure's ``content_filter_results``) ride its finish frame
    last = {k: v for k, v in choice.items() if k not in _CHOICE_KEYS and v is not None}
    choices.append({"index": index, "delta": {}, "finish_reason": choice.get("finish_reason")})
    choices[-1].update(last)
    if (logprobs := choice.get("logprobs")) is not None:  # with the text they are of
        choices[said]["logprobs"] = logprobs
    return choices


def completion_to_chunks(completion: Mapping[str, Any], *, include_usage: bool) -> list[bytes]:
    """Encode a ``chat.completion`` as the SSE frames a streaming client expects, then DONE.

    A completion's ``prompt_filter_results`` (Azure's content filter's word on the prompt)
    opens the stream in a frame of no choices, where Azure's own streams carry it. Per
    choice: a role frame, a frame of the message's other fields (a provider's own, as a
    delta carries them), a content frame (with the choice's ``logprobs``, else the finish
    frame has them), a refusal frame, per tool call a frame with index/id/name (its text
    arguments ``""`` there, as OpenAI's, and the call's own fields, a thought signature)
    then one with its arguments, and a finish frame
    (with the choice's own fields). Every frame carries the ``service_tier``, and with
    ``include_usage`` ``usage: null``, a final usage-only frame following, as OpenAI does.
    Round-trips through ``StreamAccumulator.to_completion`` (which keeps no ``logprobs``).
    """
    base: dict[str, Any] = {
        "id": completion.get("id"),
        "object": "chat.completion.chunk",
        "created": completion.get("created"),
        "model": completion.get("model"),
    }
    for key in ("system_fingerprint", "service_tier"):
        if completion.get(key) is not None:
            base[key] = completion[key]
    frames: list[bytes] = []
    if (filters := completion.get("prompt_filter_results")) is not None:
        frames.append(encode_event({**base, "choices": [], PROMPT_FILTERS: filters}))
    for pos, choice in enumerate(completion.get("choices") or []):
        index = index_of(choice, pos)
        for c in _choice_frames(index, choice):
            chunk = {**base, "choices": [c]}
            if include_usage:
                chunk["usage"] = None
            frames.append(encode_event(chunk))
    usage = completion.get("usage")
    if include_usage and usage is not None:
        frames.append(encode_event({**base, "choices": [], "usage": usage}))
    frames.append(DONE)
    return frames
