"""``cascade-proxy sessions …``: the session API of a running proxy, as tables or JSON.

Talks HTTP to the proxy (``GET /v1/sessions``, ``/{id}``, ``/{id}/messages``, ``POST
/{id}/compact|branch|reset``, ``DELETE /{id}``) with the bearer token an agent would use,
because sessions are scoped by that token's tenant. ``--json`` prints the API's answer as
it is, for scripts; otherwise a table a person reads. The HTTP call itself is
``proxy.cli_api``'s and its paging ``proxy.cli_paging``'s, shared with ``cascade-proxy memory``.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Sequence
from typing import Any

from proxy.cli_api import call_api
from proxy.cli_paging import next_page, offset_of, page_params, past_the_end
from proxy.cli_text import cell, table
from proxy.cli_url import path_segment

__all__ = ["run_sessions", "ACTIONS"]

_ROUTES: dict[str, tuple[str, str]] = {
    "ls": ("GET", "/v1/sessions"),
    "show": ("GET", "/v1/sessions/{id}"),
    "messages": ("GET", "/v1/sessions/{id}/messages"),
    "compact": ("POST", "/v1/sessions/{id}/compact"),
    "branch": ("POST", "/v1/sessions/{id}/branch"),
    "reset": ("POST", "/v1/sessions/{id}/reset"),
    "rm": ("DELETE", "/v1/sessions/{id}"),
}
ACTIONS = tuple(_ROUTES)


def _pairs(pairs: Sequence[tuple[str, Any]]) -> str:
    width = max(len(k) for k, _ in pairs)
    return "\n".join(f"{k.ljust(width)}  {cell(v)}" for k, v in pairs)


def _content(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(
            str(p.get("text", f"[{p.get('type')}]")) if isinstance(p, dict) else str(p)
            for p in content
        )
    calls = message.get("tool_calls") or []
    names = [c.get("function", {}).get("name", "?") for c in calls if isinstance(c, dict)]
    if names:
        content = f"{content or ''} → calls {', '.join(names)}".strip()
    return str(content or "")


def _ls(body: dict[str, Any], what: str = "sessions") -> str:
    """The sessions as a table; none says ``what`` was asked (those matching a filter)."""
    rows = [
        (
            s["id"],
            s.get("agent"),
            s.get("model"),
            s.get("message_count"),
            s.get("occupancy"),
            s.get("reclaimed_tokens"),
            s.get("updated_at"),
        )
        for s in body["data"]  # absent: not this API's answer (call_api says so)
    ]
    if not rows:
        return f"no {what} (for this API key)"
    return table(("ID", "AGENT", "MODEL", "MESSAGES", "OCCUPANCY", "RECLAIMED", "UPDATED"), rows)


def _parts(by_part: Any) -> str | None:
    """A view's split (``usage`` by part, ``reclaimed`` by stage) on one line."""
    return ", ".join(f"{k} {v}" for k, v in by_part.items()) if isinstance(by_part, dict) else None


def _show(body: dict[str, Any]) -> str:
    keys = (
        "id",
        "agent",
        "model",
        "parent_id",
        "created_at",
        "updated_at",
        "message_count",
        "superseded_count",
        "occupancy",
        "context_limit",
        "fraction",
        "calibration",
        "reclaimed_tokens",
    )
    if not isinstance(body["id"], str):  # another service's JSON: call_api says so
        raise TypeError("no session id")
    split = [(k, _parts(body.get(k))) for k in ("usage", "reclaimed")]
    out = _pairs([*((k, body.get(k)) for k in keys), *split])
    summary = body.get("summary")
    if summary:
        out += (
            f"\nsummary v{summary['version']} (up to message {summary['boundary']}, "
            f"{summary['tokens']} tokens):\n{summary['content']}"
        )
    return out


def _messages(body: dict[str, Any]) -> str:
    rows = []
    for m in body["data"]:
        marks = ("summarised", "truncated", "redacted", "evicted", "trimmed", "superseded")
        flags = [f for f in marks if m.get(f)]
        rows.append(
            (
                m["pos"],
                m.get("role"),
                m.get("tokens"),
                ",".join(flags),
                _content(m.get("message") or {}),
            )
        )
    if not rows:
        return "no messages"
    return table(("POS", "ROLE", "TOKENS", "FLAGS", "CONTENT"), rows)


def _compact(body: dict[str, Any]) -> str:
    if not body.get("compacted"):
        return f"{body['id']}: not compacted ({body.get('reason') or 'nothing to fold'})"
    return (
        f"{body['id']}: summary v{body['version']} folds {body['folded']} messages; "
        f"{body['tokens_before']} → {body['tokens_after']} tokens"
    )


_RENDER: dict[str, Callable[[dict[str, Any]], str]] = {
    "ls": _ls,
    "show": _show,
    "messages": _messages,
    "compact": _compact,
    "branch": lambda b: f"branched {b['parent_id']} into {b['id']}",
    "reset": lambda b: f"reset {b['id']}: its history starts again at the next request",
    "rm": lambda b: f"deleted {b['id']}",
}


def _request(args: argparse.Namespace) -> tuple[str, str, dict[str, Any], Any]:
    method, path = _ROUTES[args.action]
    path = path.format(id=path_segment(getattr(args, "id", "")))
    params: dict[str, Any] = {}
    if args.action in ("ls", "messages"):
        params = page_params(args)
    if args.action == "ls" and args.filter:
        params["q"] = args.filter
    if args.action == "messages" and args.all:
        params["include_superseded"] = "true"
    body = None
    if args.action == "branch":
        body = {"id": args.new_id} if args.new_id else {}
    return method, path, params, body


def run_sessions(args: argparse.Namespace, url: str, key: str | None, key_from: str = "") -> int:
    """Call the API; print the answer; its exit status (``call_api``). ``key_from`` names
    where ``key`` came from (``--api-key``)."""
    method, path, params, body = _request(args)
    render = _RENDER[args.action]
    note = None
    if args.action in ("ls", "messages"):
        note = next_page(args.limit, offset_of(args))
        what, whose = ("sessions", "this API key") if args.action == "ls" else ("messages", args.id)
        if args.action == "ls" and args.filter:  # none matching is not none for the key
            what = f'sessions matching "{args.filter}"'
            render = functools.partial(_ls, what=what)
        filtered = args.action == "ls" and bool(args.filter)
        render = past_the_end(render, args, what, whose, filtered=filtered)
    return call_api(
        args,
        url,
        key,
        (method, path, params, body),
        render,
        command="sessions",
        note=note,
        key_from=key_from,
    )
