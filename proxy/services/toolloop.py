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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from proxy.cascade.handles import drop_handles
from proxy.cascade.paging import raw_output_page
from proxy.cascade.pipeline import Assembled
from proxy.cascade.types import READ_TOOL_OUTPUT, Message
from proxy.config_context import ContextConfig
from proxy.services import raw_cache
from proxy.store import sessions
from proxy.work_threads import PAGES, off_loop

__all__ = [
    "MAX_TOOLS",
    "MIN_PAGE_CHARS",
    "is_internal_call",
    "answer_call",
    "answer_in_room",
    "carries_tools",
    "fit_offer",
    "read_page",
    "read_text",
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


async def read_text(
    conn: Any,
    *,
    tenant: str,
    session_id: str,
    tool_call_id: str,
    patterns: Sequence[re.Pattern[str]] = (),
) -> str | None:
    """The id's newest result (``raw_outputs.fetchrow_raw_output``, as the tool-outputs API
    reads it) redacted with ``patterns`` (the agent's in force); None when not found. It
    was stored under the patterns of its day, and a page of it goes to the provider: the
    whole text is redacted before any page is cut from it, so a secret across a page's
    edge is replaced whole, and offsets count the redacted text. The text read and
    redacted is kept for the next page while its rows are unchanged (``raw_cache``)."""
    out = await raw_cache.read_output(
        conn, tenant=tenant, session_id=session_id, tool_call_id=tool_call_id, patterns=patterns
    )
    return None if out is None else out.content


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
    """One page of the id's newest result redacted (``read_text``), re-truncated at
    ``max_chars``; None when not found."""
    text = await read_text(
        conn, tenant=tenant, session_id=session_id, tool_call_id=tool_call_id, patterns=patterns
    )
    if text is None:
        return None
    return await _page(text, tool_call_id, offset, limit, grep, max_chars)


async def _page(
    text: str, id: str, offset: int, limit: int | None, grep: str | None, max_chars: int
) -> str:
    # on a page thread: a grep reads every line of up to rawCapBytes of text (``work_threads``)
    page = functools.partial(
        raw_output_page, text, id=id, offset=offset, limit=limit, grep=grep, max_chars=max_chars
    )
    return (await off_loop(PAGES, page))[0]


Pages = Callable[[int], Awaitable[str]]
"""A call's answer at a page cap of that many characters."""


async def _pages(
    conn: Any,
    *,
    tenant: str,
    session_id: str,
    call: Mapping[str, Any],
    agents: Sequence[str] | None,
    patterns: Sequence[re.Pattern[str]],
) -> Pages:
    """A read_tool_output call's answer at any cap, the output read and redacted once
    (``read_text``): an answer cut to fit is the same text paged again at a smaller cap.
    For a key limited to ``agents`` the read is followed by a read of the session's agent
    (``_moved_away``), as the tool-outputs API's is."""
    try:
        target, offset, limit, grep = _arguments(call)
    except ValueError as exc:
        return _fixed(
            f'read_tool_output: invalid arguments ({exc}); pass {{"id": "<tool_call_id>"}}'
        )
    text = await read_text(
        conn, tenant=tenant, session_id=session_id, tool_call_id=target, patterns=patterns
    )
    moved = await _moved_away(conn, tenant, session_id, agents)
    if moved is not None:
        return _fixed(moved)
    if text is None:
        return _fixed(f"read_tool_output: no stored output with id {target!r} in this session")
    stored = text
    return lambda max_chars: _page(stored, target, offset, limit, grep, max_chars)


def _fixed(text: str) -> Pages:
    async def answer(max_chars: int) -> str:
        return text

    return answer


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
    """Execute one read_tool_output call; always returns a tool message (errors included)."""
    pages = await _pages(
        conn, tenant=tenant, session_id=session_id, call=call, agents=agents, patterns=patterns
    )
    return _answer(call, await pages(max_chars))


def _answer(call: Mapping[str, Any], text: str) -> Message:
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
    ``MIN_PAGE_CHARS`` is not cut further. The stored output is read and redacted once
    (``_pages``), whatever the tries: each pages the same text at a smaller cap."""
    pages = await _pages(
        conn, tenant=tenant, session_id=session_id, call=call, agents=agents, patterns=patterns
    )
    answer = _answer(call, await pages(max_chars))
    while (tokens := cost(answer)) > room and max_chars > MIN_PAGE_CHARS:
        max_chars = max(MIN_PAGE_CHARS, int(max_chars * max(room, 0) / tokens * 0.95))
        answer = _answer(call, await pages(max_chars))
    return answer
