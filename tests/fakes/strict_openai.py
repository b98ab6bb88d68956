"""OpenAI's chat-completions request rules, checked as strictly as OpenAI checks them.

:func:`violations` lists what makes OpenAI answer 400 ``invalid_request_error`` for a body:
the parameters the openai SDK's ``CompletionCreateParams`` names and no others (a proxy's own
field leaking out is "Unrecognized request argument"); each message's role, its known keys
(OpenAI refuses additional properties), its content (string or a non-empty array of the parts
its role allows; an assistant's may be absent only beside ``tool_calls`` or
``function_call``); a ``tool`` message only as the answer to a call of the assistant message
just before its run of tool messages, every call of that message answered before the next
other message, no call id twice or over 40 characters; message ``name`` matching
``^[^\\s<|\\\\/>]+$``; ``tools`` a non-empty array of at most 128
functions named ``^[a-zA-Z0-9_-]{1,64}$`` without duplicates;
``tool_choice`` and ``parallel_tool_calls`` only beside ``tools``, a named choice naming one
of them; ``stream_options`` only with ``stream``; for a reasoning model (o1, o3, o4-mini,
gpt-5), no ``max_tokens`` and no ``temperature`` or ``top_p`` but 1; for o1-mini and
o1-preview, no system or developer message.
:func:`system_after_others` is a stricter provider's rule (some refuse a system message
after the conversation started) kept apart, since OpenAI accepts it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["MAX_TOOLS", "PARAMS", "system_after_others", "violations"]

_PARAM_NAMES = """
messages model audio frequency_penalty function_call functions logit_bias logprobs
max_completion_tokens max_tokens metadata modalities moderation n parallel_tool_calls prediction
presence_penalty prompt_cache_key prompt_cache_options prompt_cache_retention
reasoning_effort response_format safety_identifier seed
service_tier stop store stream stream_options temperature tool_choice tools
top_logprobs top_p user verbosity web_search_options
"""
PARAMS = frozenset(_PARAM_NAMES.split())
"""The parameters of the openai SDK's ``CompletionCreateParams``."""
_KEYS = {
    "system": {"role", "content", "name"},
    "developer": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {
        "role",
        "content",
        "name",
        "tool_calls",
        "function_call",
        "refusal",
        "audio",
        "annotations",  # the SDK's resend of a completion's message carries them
    },
    "tool": {"role", "content", "tool_call_id", "name"},  # tau-bench's gpt-4o runs sent it
    "function": {"role", "content", "name"},
}
_PARTS = {
    "system": {"text"},
    "developer": {"text"},
    "user": {"text", "image_url", "input_audio", "file"},
    "assistant": {"text", "refusal"},
    "tool": {"text"},
}
_MESSAGE_NAME = re.compile(r"^[^\s<|\\/>]+$")
MAX_TOOLS = 128
"""The most ``tools`` OpenAI takes in one request (its API reference)."""
_FUNCTION_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_REASONING = re.compile(r"(?:^|/)(?:o[1-9](?:$|-)|gpt-5(?![.\d]*-chat))")
"""OpenAI's reasoning models (o1, o3, o4-mini, gpt-5…, not gpt-5-chat): they refuse
``max_tokens`` and a ``temperature`` or ``top_p`` other than 1."""


def _content(where: str, role: str, msg: Mapping[str, Any]) -> list[str]:
    content = msg.get("content")
    if content is None:
        if role == "assistant" and (msg.get("tool_calls") or msg.get("function_call")):
            return []
        if role == "function" and "content" in msg:
            return []
        return [f"{where}.content: required (got null)"]
    if isinstance(content, str):
        return []
    if not isinstance(content, list):
        return [f"{where}.content: expected a string or an array"]
    if not content:
        return [f"{where}.content: empty array"]
    out: list[str] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind not in _PARTS.get(role, set()):
            out.append(f"{where}.content[{j}]: part type {kind!r} not allowed for {role}")
        elif kind in ("text", "refusal") and not isinstance(part.get(kind), str):
            out.append(f"{where}.content[{j}].{kind}: expected a string")
        elif kind == "image_url" and not isinstance((part.get("image_url") or {}).get("url"), str):
            out.append(f"{where}.content[{j}].image_url.url: required")
    return out


def _tool_calls(where: str, calls: Any) -> tuple[list[str], list[str]]:
    """Problems of an assistant's ``tool_calls``, and its call ids."""
    if not isinstance(calls, list):
        return [f"{where}.tool_calls: expected an array"], []
    if not calls:
        return [f"{where}.tool_calls: empty array"], []
    out: list[str] = []
    ids: list[str] = []
    for j, call in enumerate(calls):
        at = f"{where}.tool_calls[{j}]"
        if not isinstance(call, Mapping):
            out.append(f"{at}: expected an object")
            continue
        if set(call) - {"id", "type", "function"}:
            out.append(f"{at}: unexpected keys {sorted(set(call) - {'id', 'type', 'function'})}")
        if not isinstance(call.get("id"), str) or not call["id"]:
            out.append(f"{at}.id: required")
        elif len(call["id"]) > 40:
            out.append(f"{at}.id: string too long, {len(call['id'])} over the maximum length 40")
        elif call["id"] in ids:
            out.append(f"{at}.id: duplicate {call['id']!r}")
        else:
            ids.append(call["id"])
        if call.get("type") != "function":
            out.append(f"{at}.type: expected 'function'")
        fn = call.get("function")
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            out.append(f"{at}.function.name: required")
        elif not isinstance(fn.get("arguments"), str):
            out.append(f"{at}.function.arguments: expected a string")
        elif set(fn) - {"name", "arguments"}:
            out.append(f"{at}.function: unexpected keys {sorted(set(fn) - {'name', 'arguments'})}")
    return out, ids


def _messages(messages: Sequence[Any]) -> list[str]:
    out: list[str] = []
    open_ids: list[str] = []  # calls of the last assistant message not yet answered
    answerable: set[str] = set()  # while in its run of tool messages
    for i, msg in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(msg, Mapping):
            out.append(f"{where}: expected an object")
            continue
        role = msg.get("role")
        if role not in _KEYS:
            out.append(f"{where}.role: invalid {role!r}")
            continue
        extra = set(msg) - _KEYS[role]
        if extra:
            out.append(f"{where}: unexpected keys {sorted(extra)}")
        name = msg.get("name")
        if name is not None and (not isinstance(name, str) or not _MESSAGE_NAME.match(name)):
            out.append(f"{where}.name: {name!r} does not match the pattern")
        out += _content(where, role, msg)
        if role == "tool":
            call_id = msg.get("tool_call_id")
            if call_id not in answerable:
                out.append(f"{where}: tool message {call_id!r} answers no preceding tool_call")
            else:
                answerable.discard(call_id)
                open_ids.remove(call_id)
            continue
        if open_ids:
            out.append(f"messages[{i - 1}]: tool_call_ids without a response: {open_ids}")
        open_ids, answerable = [], set()
        if role == "assistant" and "tool_calls" in msg:
            problems, ids = _tool_calls(where, msg["tool_calls"])
            out += problems
            open_ids, answerable = list(ids), set(ids)
    if open_ids:
        out.append(f"messages[{len(messages) - 1}]: tool_call_ids without a response: {open_ids}")
    return out


def _tools(body: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    tools = body.get("tools")
    if tools is None:
        return [], []
    if not isinstance(tools, list) or not tools:
        return ["tools: expected a non-empty array"], []
    if len(tools) > MAX_TOOLS:
        return [f"tools: array too long, {len(tools)} over the maximum length {MAX_TOOLS}"], []
    out: list[str] = []
    names: list[str] = []
    for j, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(tool, Mapping) or tool.get("type") != "function" or not fn:
            out.append(f"tools[{j}]: expected a function tool")
            continue
        name = fn.get("name")
        if not isinstance(name, str) or not _FUNCTION_NAME.match(name):
            out.append(f"tools[{j}].function.name: {name!r} does not match the pattern")
        elif name in names:
            out.append(f"tools[{j}].function.name: duplicate {name!r}")
        names.append(str(name))
    return out, names


_NO_SYSTEM = re.compile(r"(?:^|/)o1-(?:mini|preview)(?:$|-)")
"""OpenAI's models that refuse any system or developer message ("Unsupported value:
'messages[0].role' does not support 'system' with this model.", code ``unsupported_value``)."""


def violations(body: Any) -> list[str]:
    """Every reason OpenAI would answer this chat-completions body with a 400 (none: valid)."""
    if not isinstance(body, Mapping):
        return ["body: expected a JSON object"]
    out = [f"{key}: unrecognized request argument" for key in body if key not in PARAMS]
    if not isinstance(body.get("model"), str) or not body["model"]:
        out.append("model: required")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        out.append("messages: expected a non-empty array")
    else:
        out += _messages(messages)
    problems, names = _tools(body)
    out += problems
    for key in ("tool_choice", "parallel_tool_calls"):
        if body.get(key) is not None and body.get("tools") is None:
            out.append(f"{key}: only allowed when 'tools' are specified")
    choice = body.get("tool_choice")
    if isinstance(choice, Mapping):
        chosen = (choice.get("function") or {}).get("name")
        if names and chosen not in names:
            out.append(f"tool_choice: names {chosen!r}, which is not in tools")
    if body.get("stream_options") is not None and not body.get("stream"):
        out.append("stream_options: only allowed when 'stream' is enabled")
    if _NO_SYSTEM.search(str(body.get("model") or "")) and isinstance(messages, list):
        out += [
            f"messages[{i}].role: does not support {m['role']!r} with this model"
            for i, m in enumerate(messages)
            if isinstance(m, Mapping) and m.get("role") in ("system", "developer")
        ]
    if _REASONING.search(str(body.get("model") or "")):
        if "max_tokens" in body:
            out.append("max_tokens: unsupported parameter, use 'max_completion_tokens'")
        out += [
            f"{key}: unsupported value, only the default (1) is supported"
            for key in ("temperature", "top_p")
            if body.get(key) not in (None, 1)
        ]
    return out


def system_after_others(body: Mapping[str, Any]) -> list[int]:
    """Indexes of system/developer messages that come after a message of another role."""
    seen_other = False
    late: list[int] = []
    for i, msg in enumerate(body.get("messages") or ()):
        if isinstance(msg, Mapping) and msg.get("role") in ("system", "developer"):
            if seen_other:
                late.append(i)
        else:
            seen_other = True
    return late
