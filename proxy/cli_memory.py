"""``cascade-proxy memory ls|add|rm|suggestions|accept|reject``: the long-term facts of a
running proxy, and the suggestions of ``suggest`` promotion, which wait for a person's answer
(a proxy run without the console is reviewed from here).

Talks HTTP to the memory API (``GET /v1/memory?scope=…``, ``POST /v1/memory``, ``DELETE
/v1/memory/{id}``, ``GET /v1/memory/suggestions``, ``POST …/suggestions/{id}/accept|reject``)
as the tenant of the key given, like ``cascade-proxy sessions``. A fact ``sanitize_fact``
refuses is printed with the reason the API gives, and the exit code is 1. Its arguments are
read by ``proxy.cli``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from proxy.cli_api import call_api
from proxy.cli_paging import next_page, offset_of, page_params, past_the_end
from proxy.cli_text import cell, table
from proxy.cli_url import path_segment

__all__ = ["run_memory"]


def _ls(body: dict[str, Any]) -> str:
    rows = [(f["id"], f.get("scope"), f.get("created_at"), f.get("text")) for f in body["data"]]
    if not rows:
        return "no facts in this scope (for this API key)"
    return table(("ID", "SCOPE", "CREATED", "FACT"), rows)


def _suggestions(body: dict[str, Any], whose: str = "this API key") -> str:
    """Each suggestion, then each of its facts whole on a line of its own: a fact is
    reviewed from what is shown and named by its exact text (``accept --fact``), which a
    table cell's width would cut. None says ``whose`` list was asked (one session's, with
    ``--session``)."""
    blocks = []
    for s in body["data"]:
        facts = s.get("facts") or []
        n = f"{len(facts)} fact{'' if len(facts) == 1 else 's'}"
        head = f"{cell(s['id'])}  session {cell(s.get('session_id'))}, {cell(s.get('scope'))}"
        blocks.append("\n".join([f"{head}: {n}", *(f"  - {cell(f)}" for f in facts)]))
    return "\n".join(blocks) if blocks else f"no pending suggestions (for {whose})"


def _accepted(body: dict[str, Any]) -> str:
    facts = body.get("facts") or []
    n = f"{len(facts)} fact{'' if len(facts) == 1 else 's'}"
    lines = [f"accepted suggestion {body['id']}: {n} stored in {body.get('scope')}"]
    return "\n".join([*lines, *(f"  {f['id']}: {f['text']}" for f in facts)])


_RENDER: dict[str, Callable[[dict[str, Any]], str]] = {
    "ls": _ls,
    "add": lambda b: f"remembered fact {b['id']} in {b['scope']}: {b['text']}",
    "rm": lambda b: f"forgot fact {b['id']}",
    "suggestions": _suggestions,
    "accept": _accepted,
    "reject": lambda b: f"rejected suggestion {b['id']}",
}


def run_memory(args: argparse.Namespace, url: str, key: str | None, key_from: str = "") -> int:
    """Call the memory API for ``args.action`` and print the answer (``call_api``);
    ``key_from`` names where ``key`` came from."""
    request: tuple[str, str, dict[str, Any], Any]
    render, note = _RENDER[args.action], None
    if args.action == "ls":
        request = ("GET", "/v1/memory", {"scope": args.scope, **page_params(args)}, None)
        note = next_page(args.limit, offset_of(args))
        render = past_the_end(render, args, "facts", "this scope")
    elif args.action == "add":
        request = ("POST", "/v1/memory", {}, {"scope": args.scope, "text": args.text})
    elif args.action == "suggestions":
        page = {**page_params(args), "session_id": args.session}
        request = ("GET", "/v1/memory/suggestions", page, None)
        note = next_page(args.limit, offset_of(args))
        whose = f"session {args.session}" if args.session else "this API key"
        render = past_the_end(lambda b: _suggestions(b, whose), args, "pending suggestions", whose)
    elif args.action in ("accept", "reject"):
        path = f"/v1/memory/suggestions/{path_segment(args.id)}/{args.action}"
        facts = getattr(args, "facts", None)
        request = ("POST", path, {}, {"facts": facts} if facts else {})
    else:
        request = ("DELETE", f"/v1/memory/{args.id}", {}, None)
    return call_api(args, url, key, request, render, command="memory", note=note, key_from=key_from)
