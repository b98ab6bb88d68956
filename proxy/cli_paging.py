"""How ``cascade-proxy sessions`` and ``memory`` page a list: the page asked of the API
(``--limit``, and ``--offset`` or ``--cursor``), the note on stderr naming where the next
page starts, and what an empty page past a start says. One place for the lists of both
commands, so a list pages, and says it ends, the same way in each."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from typing import Any

from proxy.cli_text import printable

__all__ = ["next_page", "offset_of", "page_params", "past_the_end"]


def page_params(args: argparse.Namespace) -> dict[str, Any]:
    """A list's page as the API takes it: ``--limit``, and ``--cursor`` when given (the
    parser refuses it beside ``--offset``), else ``--offset``."""
    cursor = getattr(args, "cursor", "")
    return {"limit": args.limit, **({"cursor": cursor} if cursor else {"offset": offset_of(args)})}


def offset_of(args: argparse.Namespace) -> int:
    """``--offset``, 0 when left out (None where ``--cursor`` is its alternative)."""
    return int(args.offset or 0)


def past_the_end(
    render: Callable[[dict[str, Any]], str],
    args: argparse.Namespace,
    what: str,
    whose: str,
    *,
    filtered: bool = False,
) -> Callable[[dict[str, Any]], str]:
    """``render``, but an empty page at ``--offset`` N says that nothing is at N or past it,
    and one at ``--cursor`` that the list ends there: "no ``what``" would read as if
    ``whose`` (this API key, a session, a scope) had none. The API gives no count, so all
    that is known at N is that there are at most N; of a ``filtered`` list, that at most N
    match, not that ``whose`` has at most N. ``render`` alone for a first page."""
    n, cursor = offset_of(args), getattr(args, "cursor", "")
    if not n and not cursor:
        return render
    bound = f"at most {n} match, for {whose}" if filtered else f"{whose} has at most {n}"

    def shown(body: dict[str, Any]) -> str:
        if body["data"]:
            return render(body)
        if cursor:
            return f"no {what} past that --cursor (the list ends there)"
        return f"no {what} at --offset {n} or past it ({bound})"

    return shown


def next_page(limit: int, offset: int) -> Callable[[dict[str, Any]], str | None]:
    """When more rows are past the page (the API's ``has_more``), where the next page
    starts: a page cut at ``--limit`` reads as the whole list otherwise. A list that pages
    by cursor names its ``next_cursor``, which rows made or gone between the pages do not
    move as they move an offset; another list names the offset past the page. From a proxy
    whose lists have no ``has_more``, a full page may have more."""

    def note(body: dict[str, Any]) -> str | None:
        data = body.get("data")
        shown = len(data) if isinstance(data, list) else 0
        more = body.get("has_more")
        cursor = body.get("next_cursor")
        if more is True and shown and isinstance(cursor, str) and cursor:
            return f"(more follow: --cursor {shlex.quote(printable(cursor))})"
        if more is True and shown:
            return f"(more follow: --offset {offset + shown})"
        if more is None and shown and shown >= limit:
            return f"(a full page of {shown}; more may follow: --offset {offset + shown})"
        return None

    return note
