"""``cascade-proxy memory ls|add|rm``: the long-term facts of a running proxy.

Talks HTTP to the memory API (``GET /v1/memory?scope=…``, ``POST /v1/memory``, ``DELETE
/v1/memory/{id}``) as the tenant of the key given, like ``cascade-proxy sessions``. A fact
``sanitize_fact`` refuses is printed with the reason the API gives, and the exit code is 1.
Its arguments are read by ``proxy.cli``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from proxy.cli_api import call_api, table
from proxy.cli_sessions import next_page

__all__ = ["run_memory"]


def _ls(body: dict[str, Any]) -> str:
    rows = [(f["id"], f.get("scope"), f.get("created_at"), f.get("text")) for f in body["data"]]
    if not rows:
        return "no facts in this scope (for this API key)"
    return table(("ID", "SCOPE", "CREATED", "FACT"), rows)


def _ls_from(offset: int) -> Callable[[dict[str, Any]], str]:
    """:func:`_ls`, but an empty page at ``--offset`` N says nothing is at N or past it:
    "no facts" would read as if the scope had none (the API gives no count)."""

    def shown(body: dict[str, Any]) -> str:
        if body["data"]:
            return _ls(body)
        return f"no facts at --offset {offset} or past it (this scope has at most {offset})"

    return shown


_RENDER: dict[str, Callable[[dict[str, Any]], str]] = {
    "ls": _ls,
    "add": lambda b: f"remembered fact {b['id']} in {b['scope']}: {b['text']}",
    "rm": lambda b: f"forgot fact {b['id']}",
}


def run_memory(args: argparse.Namespace, url: str, key: str | None, key_from: str = "") -> int:
    """Call the memory API for ``args.action`` and print the answer (``call_api``);
    ``key_from`` names where ``key`` came from."""
    request: tuple[str, str, dict[str, Any], Any]
    render, note = _RENDER[args.action], None
    if args.action == "ls":
        page = {"limit": args.limit, "offset": args.offset}
        request = ("GET", "/v1/memory", {"scope": args.scope, **page}, None)
        note = next_page(args.limit, args.offset)
        render = _ls_from(args.offset) if args.offset else render
    elif args.action == "add":
        request = ("POST", "/v1/memory", {}, {"scope": args.scope, "text": args.text})
    else:
        request = ("DELETE", f"/v1/memory/{args.id}", {}, None)
    return call_api(args, url, key, request, render, command="memory", note=note, key_from=key_from)
