"""``read_tool_output``: the one tool the proxy answers itself.

The model calls it to page back a truncated or cleared tool result. The proxy executes it
against the session's stored raw outputs (scoped by tenant and session: any other id is
"not found"), appends the exchange to the upstream prompt, and asks the provider again, up to
a bounded number of internal rounds. The client never sees these calls.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from proxy.cascade.handles import drop_handles
from proxy.cascade.paging import raw_output_page
from proxy.cascade.pipeline import Assembled
from proxy.cascade.redaction import redact
from proxy.cascade.types import READ_TOOL_OUTPUT, Message
from proxy.config_context import ContextConfig
from proxy.services.page_threads import make_page
from proxy.store import raw_outputs, sessions

__all__ = [
    "MAX_TOOLS",
    "MIN_PAGE_CHARS",
    "is_internal_call",
    "answer_call",
    "answer_in_room",
    "carries_tools",
    "fit_offer",
    "read_page",
    "split_calls",
]


MAX_TOOLS = 128
"""The most ``tools`` OpenAI takes in one request: a request that sends as many gets no offer,
which would make it one too many (a 400)."""


def is_internal_call(call: Mapping[str, Any]) -> bool:
    return (call.get("function") or {}).get("name") == READ_TOOL_OUTPUT


def _defines_own(tools: Any) -> bool:
    return isinstance(tools, list) and any(
        isinstance(t, Mapping)
        and isinstance(t.get("function"), Mapping)
        and t["function"].get("name") == READ_TOOL_OUTPUT
        for t in tools
    )


def carries_tools(body: Mapping[str, Any], ctx: ContextConfig) -> bool:
    """Whether the request can take ``read_tool_output`` beside its own tools: it sends a
    non-empty ``tools`` list with room for one more (``MAX_TOOLS``), or none at all with
    ``toolOutput.offerWithoutTools``, no legacy ``functions``, and asks for one choice.

    A request without ``tools`` may go to a model or server with no tool support at all
    (Ollama models without tools, llama.cpp without ``--jinja``), which fails on the array;
    one with ``functions`` must not get ``tools`` too (OpenAI refuses the mix, and the
    answers of the legacy form, ``function_call``, are not read here). ``tool_choice``
    does not matter: under ``"none"`` or a named function the schema cannot be called, and
    leaving it out would change the tools the provider caches the prompt behind.
    The proxy answers the tool for one reply, choice 0's, and goes on with one stream: with
    ``n`` above 1, a call in another choice would end the round for all of them, and each
    choice would need rounds of its own.
    """
    if body.get("functions") or _several_choices(body.get("n")):
        return False
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        return len(tools) < MAX_TOOLS
    return ctx.tool_output.offer_without_tools and not tools


def _several_choices(n: Any) -> bool:
    return isinstance(n, int | float) and not isinstance(n, bool) and n > 1


def fit_offer(assembled: Assembled, body: Mapping[str, Any], ctx: ContextConfig) -> Assembled:
    """``assembled`` with the offer of ``read_tool_output`` fitted to the client's request.

    When the client's own ``tools`` define a function of that name, the name is the
    client's: no offer, so its calls go to the client as any other call, and no second tool
    of the same name goes upstream (which a provider refuses, or resolves to either); the
    markers still name the proxy's tool, and the pages stay readable through the session
    API. When the request cannot carry the tool (``carries_tools``), or the tool is not
    offered at all (``persistRaw`` off), the prompt's handles are worded as handles no tool
    reads (``cascade.handles``), so the model is never told to call a tool it lacks.
    """
    if _defines_own(body.get("tools")):
        return replace(assembled, offer_read_tool=False) if assembled.offer_read_tool else assembled
    if assembled.offer_read_tool:
        if carries_tools(body, ctx):
            return assembled
    elif ctx.tool_output.persist_raw:
        return assembled  # ``assemble`` found no handle and no summary in the prompt
    messages = drop_handles(assembled.messages, ctx.observations.user_prefixes)
    if messages is assembled.messages and not assembled.offer_read_tool:
        return assembled
    return replace(assembled, messages=messages, offer_read_tool=False)


def split_calls(message: Mapping[str, Any]) -> tuple[list[Any], list[Any]]:
    """(internal, client) tool calls of an assistant message."""
    calls = list(message.get("tool_calls") or [])
    return [c for c in calls if is_internal_call(c)], [c for c in calls if not is_internal_call(c)]


def _int_arg(args: Mapping[str, Any], key: str, least: int) -> int | None:
    """``args[key]`` as an integer of at least ``least`` (one written as a JSON string or
    as ``100.0`` too, forms models write), None when absent; raises ``ValueError`` naming
    the argument otherwise, so the model is told rather than served another page."""
    value = args.get(key)
    if value is None:
        return None
    n: int | None = None
    if isinstance(value, float) and value.is_integer():
        n = int(value)
    elif isinstance(value, int | str) and not isinstance(value, bool):
        with contextlib.suppress(ValueError):
            n = int(value)
    if n is None or n < least:
        raise ValueError(f"{key} must be an integer of at least {least}, not {json.dumps(value)}")
    return n


def _arguments(call: Mapping[str, Any]) -> tuple[str, int, int | None, str | None]:
    """(id, offset, limit, grep) of a ``read_tool_output`` call; ``ValueError`` saying
    which argument is unusable (the tool-outputs API answers the same values with a 400).
    The arguments are their JSON text, or the object a provider sent them as."""
    args = (call.get("function") or {}).get("arguments") or "{}"
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except RecursionError as exc:  # no ValueError: nested past what Python's recursion allows
            raise ValueError("arguments nest too deep") from exc
    if not isinstance(args, dict):
        raise ValueError("arguments must be a JSON object")
    target = args.get("id")
    if not isinstance(target, str) or not target:
        raise ValueError("id must be the tool_call_id a marker names")
    grep = args.get("grep")
    if grep is not None and not isinstance(grep, str):
        raise ValueError(f"grep must be a string, not {json.dumps(grep)}")
    return target, _int_arg(args, "offset", 0) or 0, _int_arg(args, "limit", 1), grep


async def read_page(
    conn: Any,
    *,
    tenant: str,
    session_id: str,
    tool_call_id: str,
    offset: int = 0,
    limit: int | None = None,
    grep: str | None = None,
    max_chars: int,
    patterns: Sequence[re.Pattern[str]] = (),
) -> str | None:
    """One page of the id's newest result (``raw_outputs.fetchrow_raw_output``, as the
    tool-outputs API reads it), re-truncated at ``max_chars``; None when not found. The
    text is redacted with ``patterns`` (the agent's in force) before it is paged: it was
    stored under the patterns of its day, and a page goes to the provider; offsets then
    count the redacted text."""
    row = await raw_outputs.fetchrow_raw_output(
        conn, tenant=tenant, session_id=session_id, tool_call_id=tool_call_id
    )
    if row is None:
        return None

    def paged(text: str) -> str:
        text = redact(text, patterns)[0] if patterns else text
        return raw_output_page(
            text, id=tool_call_id, offset=offset, limit=limit, grep=grep, max_chars=max_chars
        )[0]

    # on a page thread: redacting or grepping up to rawCapBytes of text on the event loop
    # would hold every other request until it is done (``page_threads``)
    return await make_page(paged, row["content"])


async def answer_call(
    conn: Any,
    *,
    tenant: str,
    session_id: str,
    call: Mapping[str, Any],
    max_chars: int,
    agents: Sequence[str] | None = None,
    patterns: Sequence[re.Pattern[str]] = (),
) -> Message:
    """Execute one read_tool_output call; always returns a tool message (errors included).
    For a key limited to ``agents`` the read is followed by a read of the session's agent
    (``_moved_away``), as the tool-outputs API's is."""
    try:
        target, offset, limit, grep = _arguments(call)
    except ValueError as exc:
        text = f'read_tool_output: invalid arguments ({exc}); pass {{"id": "<tool_call_id>"}}'
    else:
        page = await read_page(
            conn,
            tenant=tenant,
            session_id=session_id,
            tool_call_id=target,
            offset=offset,
            limit=limit,
            grep=grep,
            max_chars=max_chars,
            patterns=patterns,
        )
        text = (
            page
            if page is not None
            else (f"read_tool_output: no stored output with id {target!r} in this session")
        )
        moved = await _moved_away(conn, tenant, session_id, agents)
        text = moved or text
    return {"role": "tool", "tool_call_id": call.get("id"), "content": text}


async def _moved_away(
    conn: Any, tenant: str, session_id: str, agents: Sequence[str] | None
) -> str | None:
    """The answer instead of a read's, when the session runs an agent the key (limited to
    ``agents``) may not use once it was read; None otherwise. The step's lease keeps a move
    out, but one that lapsed under a long request lets another key's request move the
    session, and the read may then have seen what that agent's requests stored. A move
    writes the agent with its first messages, so a read that saw them is followed by this
    one seeing the agent; the answer is the same whatever the id (found or not), the
    refusal the key's next request on the session gets."""
    if agents is None:
        return None
    agent = await sessions.fetchval_agent(conn, tenant=tenant, session_id=session_id)
    if agent is None or agent in agents:
        return None
    return (
        f"read_tool_output: this session now runs agent {agent!r}, which this API key may"
        f" not use; nothing was read (it may use {', '.join(agents)})"
    )


MIN_PAGE_CHARS = 200
"""The least a page is cut to for the window: its header, some text and the note naming
where the next page starts."""


async def answer_in_room(
    conn: Any,
    *,
    tenant: str,
    session_id: str,
    call: Mapping[str, Any],
    max_chars: int,
    room: int,
    cost: Callable[[Message], int],
    agents: Sequence[str] | None = None,
    patterns: Sequence[re.Pattern[str]] = (),
) -> Message:
    """``answer_call`` with its page cut until the answer costs at most ``room`` tokens
    (``cost``): the internal round sends the step's prompt again with the page, and a page
    past the window it was fitted to makes the provider refuse the whole round, an error
    for a request that fit. A cut page still names where the next one starts; one of
    ``MIN_PAGE_CHARS`` is not cut further."""
    read = functools.partial(
        answer_call,
        conn,
        tenant=tenant,
        session_id=session_id,
        call=call,
        agents=agents,
        patterns=patterns,
    )
    answer = await read(max_chars=max_chars)
    while (tokens := cost(answer)) > room and max_chars > MIN_PAGE_CHARS:
        max_chars = max(MIN_PAGE_CHARS, int(max_chars * max(room, 0) / tokens * 0.95))
        answer = await read(max_chars=max_chars)
    return answer
