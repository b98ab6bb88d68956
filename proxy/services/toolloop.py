"""``read_tool_output``: the one tool the proxy answers itself.

The model calls it to page back a truncated or cleared tool result. The proxy executes it
against the session's stored raw outputs (scoped by tenant and session: any other id is
"not found"), appends the exchange to the upstream prompt, and asks the provider again, up to
a bounded number of internal rounds. The client never sees these calls.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from proxy.cascade.pipeline import Assembled
from proxy.cascade.truncation import page_raw_output
from proxy.cascade.types import READ_TOOL_OUTPUT, Message
from proxy.store import raw_outputs

__all__ = ["is_internal_call", "answer_call", "keep_client_tool", "read_page", "split_calls"]


def is_internal_call(call: Mapping[str, Any]) -> bool:
    return (call.get("function") or {}).get("name") == READ_TOOL_OUTPUT


def keep_client_tool(assembled: Assembled, body: Mapping[str, Any]) -> Assembled:
    """``assembled`` without the offer of ``read_tool_output`` when the client's own ``tools``
    define a function of that name: the name is then the client's, so its calls go to the
    client as any other call, and no second tool of the same name goes upstream (which a
    provider refuses, or resolves to either). The markers still name the proxy's tool; the
    pages stay readable through the session API."""
    if not assembled.offer_read_tool:
        return assembled
    tools = body.get("tools")
    if isinstance(tools, list) and any(
        isinstance(t, Mapping)
        and isinstance(t.get("function"), Mapping)
        and t["function"].get("name") == READ_TOOL_OUTPUT
        for t in tools
    ):
        return replace(assembled, offer_read_tool=False)
    return assembled


def split_calls(message: Mapping[str, Any]) -> tuple[list[Any], list[Any]]:
    """(internal, client) tool calls of an assistant message."""
    calls = list(message.get("tool_calls") or [])
    return [c for c in calls if is_internal_call(c)], [c for c in calls if not is_internal_call(c)]


def _int_arg(args: Mapping[str, Any], key: str) -> int | None:
    value = args.get(key)
    if value is None:
        return None
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return None


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
) -> str | None:
    """One page of the id's newest result (``raw_outputs.fetchrow_raw_output``, as the
    tool-outputs API reads it), re-truncated at ``max_chars``; None when not found."""
    row = await raw_outputs.fetchrow_raw_output(
        conn, tenant=tenant, session_id=session_id, tool_call_id=tool_call_id
    )
    if row is None:
        return None
    return page_raw_output(
        row["content"],
        id=tool_call_id,
        offset=offset,
        limit=limit,
        grep=grep,
        max_chars=max_chars,
    )


async def answer_call(
    conn: Any, *, tenant: str, session_id: str, call: Mapping[str, Any], max_chars: int
) -> Message:
    """Execute one read_tool_output call; always returns a tool message (errors included)."""
    try:
        args = json.loads((call.get("function") or {}).get("arguments") or "{}")
        if not isinstance(args, dict):
            raise ValueError("arguments must be a JSON object")
    except ValueError as exc:
        text = f'read_tool_output: invalid arguments ({exc}); pass {{"id": "<tool_call_id>"}}'
    else:
        target = str(args.get("id") or "")
        page = await read_page(
            conn,
            tenant=tenant,
            session_id=session_id,
            tool_call_id=target,
            offset=_int_arg(args, "offset") or 0,
            limit=_int_arg(args, "limit"),
            grep=args.get("grep") if isinstance(args.get("grep"), str) else None,
            max_chars=max_chars,
        )
        text = (
            page
            if page is not None
            else (f"read_tool_output: no stored output with id {target!r} in this session")
        )
    return {"role": "tool", "tool_call_id": call.get("id"), "content": text}
