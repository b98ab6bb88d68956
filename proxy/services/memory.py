"""The memory API's use cases: list, add and delete facts; list, accept and reject suggestions.

Every fact, typed by a person or accepted from a suggestion, is stored by :func:`add_fact`
and so passes ``cascade.memory.sanitize_fact`` against the facts already in its scope. All
of it is scoped by tenant: another tenant's fact or suggestion is a 404.

A scope is ``global`` or ``agent:<name>``. Secrets are checked with the scope's redaction
patterns (the agent's merged ``context.redaction``; for ``global``, the top-level one's and
every agent's), even when redaction of messages is switched off: a fact is injected into
every later prompt of its scope.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from proxy.cascade.memory import sanitize_facts
from proxy.cascade.redaction import compile_patterns
from proxy.config import AGENT_NAME, Config
from proxy.errors import ClientRequestError, NotFound
from proxy.listing import page_of, rows_to_read
from proxy.store import memory as store

__all__ = [
    "GLOBAL",
    "parse_scope",
    "check_writable",
    "scope_of_agent",
    "list_facts",
    "add_fact",
    "delete_fact",
    "list_suggestions",
    "accept_suggestion",
    "reject_suggestion",
    "FactRejected",
]

GLOBAL = "global"

SuggestionCheck = Callable[[str, str], bool]
"""Called with a suggestion's scope and its session's agent before the suggestion is
answered: whether the caller may answer it (and see it listed)."""
_AGENT = re.compile(f"agent:{AGENT_NAME.pattern}")
"""An agent's scope: its name as the config spells it, which may be a model's
(``llama3:8b``, ``openai/gpt-4o``): promotion stores and suggests facts under it, so the API
takes any name the config takes (``proxy.config.AGENT_NAME``)."""


class FactRejected(ClientRequestError):
    """``sanitize_fact`` refused a fact (400, code ``fact_rejected``); the message says why."""

    code = "fact_rejected"


def parse_scope(scope: str | None, *, param: str = "scope") -> str:
    """``scope`` when it is ``global`` or ``agent:<name>``; a 400 otherwise."""
    if scope is None:
        return GLOBAL
    if not isinstance(scope, str) or (scope != GLOBAL and not _AGENT.fullmatch(scope)):
        shape = "scope must be 'global' or 'agent:<name>' (an agent's name, 1 to 256 characters)"
        # the value is a query's or a body's: the client is told it, the log is not
        raise ClientRequestError(f"{shape}; got {scope!r}", param=param, log_message=shape)
    return scope


def scope_of_agent(cfg: Config, agent: str | None) -> str:
    """The scope a session's facts belong to: its agent's when the config names that agent,
    else global. The ``default`` agent, which takes every request naming no agent, is no
    agent of its own: its facts are global."""
    if agent and agent != "default" and agent in cfg.agents:
        return f"agent:{agent}"
    return GLOBAL


def check_writable(cfg: Config, scope: str) -> None:
    """A 400 (``param`` scope) for an agent scope no prompt carries, which a fact added to
    would sit in unread: ``agent:default`` (the ``default`` agent's facts are ``global``)
    or an agent the config does not name (a config reload that adds the agent makes its
    scope writable: the agent comes first, then its facts)."""
    if scope == GLOBAL:
        return
    agent = scope.removeprefix("agent:")
    if agent == "default":
        raise ClientRequestError(
            "the 'default' agent has no scope of its own: its sessions' facts are global; "
            "use scope 'global'",
            param="scope",
        )
    if agent not in cfg.agents:
        raise ClientRequestError(
            f"no agent {agent!r} in the config: a fact of scope {scope!r} would reach no "
            "prompt (add the agent to the config first; a reload picks it up)",
            param="scope",
            log_message="no agent in the config has the scope sent: a fact of it would reach "
            "no prompt",
        )


def patterns_for(cfg: Config, scope: str) -> Sequence[re.Pattern[str]]:
    """The redaction patterns a fact of ``scope`` is checked with: the built-in ones and its
    agent's, and for ``global``, whose facts go into every agent's prompts, every agent's and
    the top-level ones (what any agent redacts is a secret in some prompt the fact reaches).
    The built-in ones count even with ``defaultPatterns`` off, which spares tool output, not
    a fact: one holding a key would ride in every prompt of its scope."""
    if scope != GLOBAL:
        ctx = cfg.context_for(scope.removeprefix("agent:"))
        return compile_patterns(ctx.redaction.patterns)
    contexts = [cfg.context, *(cfg.context_for(agent) for agent in cfg.agents)]
    patterns = dict.fromkeys(p for ctx in contexts for p in ctx.redaction.patterns)
    return compile_patterns(tuple(patterns))


def _iso(value: Any) -> Any:
    return value.isoformat() if hasattr(value, "isoformat") else value


def _fact(row: Any) -> dict[str, Any]:
    return {"object": "memory.fact"} | {k: _iso(v) for k, v in dict(row).items()}


async def list_facts(
    pool: Any,
    *,
    tenant: str,
    scope: str,
    may_use: Callable[[str], bool] | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> dict[str, Any]:
    """The scope's facts, oldest first, ``limit`` of them from ``offset`` on (None: all).
    ``may_use(agent)`` (a key limited to some agents)
    keeps a fact's ``source_session`` only when that session runs an agent the key may use,
    else it is None: a ``global`` fact, which every key reads, would name sessions of other
    agents, which the key may not list or open (a deleted session's agent is unknown).
    ``has_more``, as every list says it: a fact is past the page (one more row is read to
    know)."""
    rows = await store.fetch_listed_facts(
        pool,
        tenant=tenant,
        scopes=[scope],
        limit=rows_to_read(limit),
        offset=offset,
    )
    rows, more = page_of(rows, limit)
    data = []
    for row in rows:
        fact = dict(row)
        agent = fact.pop("source_agent")
        if may_use is not None and (agent is None or not may_use(agent)):
            fact["source_session"] = None
        data.append(_fact(fact))
    return {"object": "list", "data": data, "has_more": more}


def _vet(
    cfg: Config, scope: str, texts: Sequence[str], strict: bool
) -> Callable[[set[str]], list[str]]:
    """What ``store.add_facts`` calls with the keys of ``texts`` the scope stores: the facts
    to store. With ``strict`` (a single manual add) a rejection is a 400; otherwise rejected
    ones are left out."""
    patterns = patterns_for(cfg, scope)

    def vet(stored: set[str]) -> list[str]:
        verdicts = sanitize_facts(texts, stored_keys=stored, patterns=patterns)
        if strict:
            for verdict in verdicts:
                if verdict.reason is not None:
                    raise FactRejected(f"fact rejected: {verdict.reason}", param="text")
        return [v.text for v in verdicts if v.text is not None]

    return vet


async def store_facts(
    pool: Any,
    cfg: Config,
    *,
    tenant: str,
    scope: str,
    texts: Sequence[str],
    strict: bool = False,
    source_session: str | None = None,
) -> list[dict[str, Any]]:
    """The one write path of facts (manual, accepted, promoted): sanitised, then stored."""
    async with pool.acquire() as conn:
        rows = await store.add_facts(
            conn,
            tenant=tenant,
            scope=scope,
            texts=texts,
            vet=_vet(cfg, scope, texts, strict),
            source_session=source_session,
        )
    return [_fact(r) for r in rows]


async def add_fact(pool: Any, cfg: Config, *, tenant: str, scope: str, text: str) -> dict[str, Any]:
    """Store one fact by hand; a 400 saying why when ``sanitize_fact`` refuses it or no
    prompt carries the scope (:func:`check_writable`)."""
    check_writable(cfg, scope)
    stored = await store_facts(pool, cfg, tenant=tenant, scope=scope, texts=[text], strict=True)
    if not stored:  # the insert skipped a key the scope holds
        raise FactRejected(
            "fact rejected: the same fact is already stored in this scope", param="text"
        )
    return stored[0]


async def delete_fact(
    pool: Any, *, tenant: str, fact_id: int, check: Callable[[str], None]
) -> dict[str, Any]:
    """Delete one fact; ``check`` sees its scope first and raises when the key may not. The
    answer keeps the fact's object type, as a session's delete and OpenAI's deletes do."""
    async with pool.acquire() as conn:
        found = await store.delete_fact(conn, tenant=tenant, fact_id=fact_id, check=check)
    if not found:
        raise NotFound(f"no memory fact {fact_id} (for this API key)")
    return {"id": fact_id, "object": "memory.fact", "deleted": True}


def _suggestion(s: dict[str, Any], scope: str | None) -> dict[str, Any]:
    return {
        "object": "memory.suggestion",
        "id": s["suggestion_id"],
        "suggestion_id": s["suggestion_id"],
        "session_id": s["session_id"],
        "scope": scope,
        "facts": s["facts"],
        "created_at": _iso(s["created_at"]),
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
) -> dict[str, Any]:
    """Suggestions nobody has accepted or rejected yet, oldest first, each with the scope
    accepting it writes to, ``limit`` of them past the first ``offset``; only those made
    from ``session_id`` when it is given (a session view's prompt asks its own). ``may_see(scope,
    agent)``, with the agent of the suggestion's session, leaves out those the caller may
    not answer (a key limited to other agents), page by page, so ``limit`` and ``offset``
    count the ones it sees; ``has_more``: one more it sees is past the page."""
    data: list[dict[str, Any]] = []
    after, skip = 0, offset
    want = rows_to_read(limit)
    batch = min(want + offset, 1001)  # the rows skipped too, in a few statements
    while len(data) < want:
        rows = await store.fetch_pending_suggestions(
            pool, tenant=tenant, limit=batch, after_event=after, session_id=session_id
        )
        for row in rows:
            scope = _listed_scope(cfg, row)
            if may_see is None or (scope is not None and may_see(scope, _agent_of(row))):
                if skip:
                    skip -= 1
                else:
                    data.append(_suggestion(row, scope))
        if len(rows) < batch:
            break
        after = rows[-1]["event_id"]
    data, more = page_of(data, limit)
    return {"object": "list", "data": data, "has_more": more}


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
    found = await store.fetch_suggestion(pool, tenant=tenant, suggestion_id=suggestion_id)
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
        )
    chosen = list(found["facts"]) if facts is None else list(facts)
    unknown = [f for f in chosen if f not in found["facts"]]
    if unknown:
        raise ClientRequestError(
            f"facts not in suggestion {suggestion_id!r}: {unknown!r}",
            param="facts",
            log_message=f"{len(unknown)} of the facts sent are not in suggestion {suggestion_id!r}",
        )
    async with pool.acquire() as conn, conn.transaction():  # answered only with its facts
        if not await store.answer_suggestion(
            conn, tenant=tenant, suggestion_id=suggestion_id, answer="accepted", facts=chosen
        ):
            raise ClientRequestError(f"memory suggestion {suggestion_id!r} was answered already")
        rows = await store.add_facts(
            conn,
            tenant=tenant,
            scope=scope,
            texts=chosen,
            vet=_vet(cfg, scope, chosen, strict=False),
            source_session=found["session_id"],
        )
    stored = [_fact(r) for r in rows]
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
    if not await store.answer_suggestion(
        pool, tenant=tenant, suggestion_id=suggestion_id, answer="rejected"
    ):
        raise ClientRequestError(f"memory suggestion {suggestion_id!r} was answered already")
    return {"object": "memory.suggestion", "id": suggestion_id, "status": "rejected"}
