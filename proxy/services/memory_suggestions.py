"""The memory API's use cases for suggestions: list, accept and reject them.

A suggestion is the durable facts memory promotion read from a session's folded span
(``promotion.py``, a ``memory.suggestion`` event), waiting for a person's answer. Accepting
one stores its facts, or the ones picked, through the path of a manual add
(``memory.vet_facts``), in the scope its event names, else its session's agent's; rejecting
dismisses it. All of it is scoped by tenant, and by the agents a key may use: a suggestion
the caller may not answer is an unknown id's 404.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from proxy.config import Config
from proxy.errors import EMPTY_ARRAY, INVALID_VALUE, ClientRequestError, NotFound
from proxy.listing import SUGGESTIONS, iso_time, page_of, row_cursor, rows_to_read
from proxy.services.memory import (
    check_writable,
    fact_answer,
    parse_scope,
    scope_of_agent,
    vet_facts,
)
from proxy.store import memory as store, memory_suggestions as suggestions

__all__ = ["SuggestionCheck", "accept_suggestion", "list_suggestions", "reject_suggestion"]

SuggestionCheck = Callable[[str, str], bool]
"""Called with a suggestion's scope and its session's agent before the suggestion is
answered: whether the caller may answer it (and see it listed)."""


def _suggestion(s: dict[str, Any], scope: str | None) -> dict[str, Any]:
    return {
        "object": "memory.suggestion",
        "id": s["suggestion_id"],
        "suggestion_id": s["suggestion_id"],
        "session_id": s["session_id"],
        "scope": scope,
        "facts": s["facts"],
        "created_at": iso_time(s["created_at"]),
    }


async def list_suggestions(
    pool: Any,
    cfg: Config,
    *,
    tenant: str,
    limit: int,
    offset: int = 0,
    may_see: Callable[[str, str], bool] | None = None,
    session_id: str | None = None,
    after: int = 0,
) -> dict[str, Any]:
    """Suggestions nobody has accepted or rejected yet, oldest first, each with the scope
    accepting it writes to, ``limit`` of them past the first ``offset``; only those made
    from ``session_id`` when it is given (a session view's prompt asks its own). ``may_see(scope,
    agent)``, with the agent of the suggestion's session, leaves out those the caller may
    not answer (a key limited to other agents), page by page, so ``limit`` and ``offset``
    count the ones it sees; ``has_more``: one more it sees is past the page. ``after``: only
    those made after that event (a cursor's place), which answered ones leaving the list do
    not move; ``next_cursor`` is the page's last one's."""
    data: list[tuple[int, dict[str, Any]]] = []
    skip = offset
    want = rows_to_read(limit)
    batch = min(want + offset, 1001)  # the rows skipped too, in a few statements
    while len(data) < want:
        rows = await suggestions.fetch_pending_suggestions(
            pool, tenant=tenant, limit=batch, after_event=after, session_id=session_id
        )
        for row in rows:
            scope = _listed_scope(cfg, row)
            if may_see is None or (scope is not None and may_see(scope, _agent_of(row))):
                if skip:
                    skip -= 1
                else:
                    data.append((row["event_id"], _suggestion(row, scope)))
        if len(rows) < batch:
            break
        after = rows[-1]["event_id"]
    page, more = page_of(data, limit)
    cursor = row_cursor(SUGGESTIONS, page[-1][0]) if more else None
    return {
        "object": "list",
        "data": [s for _, s in page],
        "has_more": more,
        "next_cursor": cursor,
    }


def _listed_scope(cfg: Config, found: dict[str, Any]) -> str | None:
    """:func:`_scope_of`, or None for a scope no key can answer (not a valid scope)."""
    try:
        return _scope_of(cfg, found)
    except ClientRequestError:
        return None


async def _pending(
    pool: Any, cfg: Config, tenant: str, suggestion_id: str, check: SuggestionCheck | None
) -> tuple[dict[str, Any], str]:
    """The pending suggestion and its scope. One the caller may not answer (``check``) is
    the 404 of an unknown id, whether pending or answered: such a caller is shown no such
    suggestion (``list_suggestions``), so whether one exists under an id, or was answered,
    is not its to learn."""
    found = await suggestions.fetch_suggestion(pool, tenant=tenant, suggestion_id=suggestion_id)
    if found is not None and check is not None:
        scope = _listed_scope(cfg, found)
        if scope is None or not check(scope, _agent_of(found)):
            found = None
    if found is None:
        raise NotFound(f"no memory suggestion {suggestion_id!r} (for this API key)")
    if found["answer"] is not None:
        raise ClientRequestError(
            f"memory suggestion {suggestion_id!r} was {found['answer']} already"
        )
    return found, _scope_of(cfg, found)


def _agent_of(found: dict[str, Any]) -> str:
    """The agent of the suggestion's session: its facts are read from that session, so a
    key that may not use the agent (the ``default`` one included) may not see them."""
    return str(found["agent"] or "default")


def _scope_of(cfg: Config, found: dict[str, Any]) -> str:
    """The scope a suggestion's facts go to: the one its event names, else its session's."""
    scope = found["scope"] if isinstance(found["scope"], str) else None
    return parse_scope(scope) if scope else scope_of_agent(cfg, found["agent"])


async def accept_suggestion(
    pool: Any,
    cfg: Config,
    *,
    tenant: str,
    suggestion_id: str,
    facts: Sequence[str] | None,
    check: SuggestionCheck | None = None,
) -> dict[str, Any]:
    """Store the suggestion's facts (or the ``facts`` of them a person picked) through the
    manual add's path; facts ``sanitize_fact`` refuses now (a duplicate added meanwhile)
    are left out, and the answer lists the stored ones. An empty ``facts`` is a 400 that
    says to reject instead: it would answer "accepted" and store nothing. ``check`` sees
    the scope and the agent of the suggestion's session first, and says no when the key may
    not write there (a key limited to other agents), as a manual add's 403 does (accepting
    is adding), or may not use that agent (the facts were read from its session): then the
    suggestion is an unknown id's 404 (``_pending``). The answer and the facts are written
    in one transaction, so an accept that fails midway can be given again."""
    found, scope = await _pending(pool, cfg, tenant, suggestion_id, check)
    check_writable(cfg, scope)
    if facts is not None and not facts:
        raise ClientRequestError(
            f"'facts' is empty: accepting none of suggestion {suggestion_id!r}'s facts stores "
            "nothing; reject it instead (POST …/reject)",
            param="facts",
            code=EMPTY_ARRAY,
        )
    chosen = list(found["facts"]) if facts is None else list(facts)
    unknown = [f for f in chosen if f not in found["facts"]]
    if unknown:
        raise ClientRequestError(
            f"facts not in suggestion {suggestion_id!r}: {unknown!r}",
            param="facts",
            code=INVALID_VALUE,
            log_message=f"{len(unknown)} of the facts sent are not in suggestion {suggestion_id!r}",
        )
    async with pool.acquire() as conn, conn.transaction():  # answered only with its facts
        if not await suggestions.answer_suggestion(
            conn, tenant=tenant, suggestion_id=suggestion_id, answer="accepted", facts=chosen
        ):
            raise ClientRequestError(f"memory suggestion {suggestion_id!r} was answered already")
        rows = await store.add_facts(
            conn,
            tenant=tenant,
            scope=scope,
            texts=chosen,
            vet=vet_facts(cfg, scope, chosen, strict=False),
            source_session=found["session_id"],
        )
    stored = [fact_answer(r) for r in rows]
    return {
        "object": "memory.suggestion",
        "id": suggestion_id,
        "status": "accepted",
        "scope": scope,
        "facts": stored,
    }


async def reject_suggestion(
    pool: Any,
    cfg: Config,
    *,
    tenant: str,
    suggestion_id: str,
    check: SuggestionCheck | None = None,
) -> dict[str, Any]:
    """Dismiss a suggestion; ``check`` sees what ``accept_suggestion``'s does, first."""
    await _pending(pool, cfg, tenant, suggestion_id, check)
    if not await suggestions.answer_suggestion(
        pool, tenant=tenant, suggestion_id=suggestion_id, answer="rejected"
    ):
        raise ClientRequestError(f"memory suggestion {suggestion_id!r} was answered already")
    return {"object": "memory.suggestion", "id": suggestion_id, "status": "rejected"}
