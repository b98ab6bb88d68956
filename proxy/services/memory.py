"""The memory API's use cases for facts: list, add and delete them; the scopes they live in.

Every fact, typed by a person or accepted from a suggestion, is stored by :func:`add_fact`
and so passes ``cascade.memory.sanitize_fact`` against the facts already in its scope. All
of it is scoped by tenant: another tenant's fact or suggestion is a 404.

A scope is ``global`` or ``agent:<name>``. Secrets are checked with the scope's redaction
patterns (the agent's merged ``context.redaction``; for ``global``, the top-level one's and
every agent's), even when redaction of messages is switched off: a fact is injected into
every later prompt of its scope. Suggestions, whose accepted facts are stored here, are
``memory_suggestions.py``'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from proxy.cascade.memory import sanitize_facts
from proxy.cascade.redaction import compile_patterns
from proxy.config import AGENT_NAME, Config
from proxy.errors import INVALID_TYPE, INVALID_VALUE, ClientRequestError, NotFound
from proxy.listing import FACTS, iso_time, page_of, row_cursor, rows_to_read
from proxy.store import memory as store

__all__ = [
    "GLOBAL",
    "parse_scope",
    "check_writable",
    "scope_of_agent",
    "list_facts",
    "add_fact",
    "delete_fact",
    "fact_answer",
    "vet_facts",
    "FactRejected",
]

GLOBAL = "global"

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
        raise ClientRequestError(
            f"{shape}; got {scope!r}",
            param=param,
            log_message=shape,
            code=INVALID_VALUE if isinstance(scope, str) else INVALID_TYPE,
        )
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


def fact_answer(row: Any) -> dict[str, Any]:
    """A stored fact as the API answers it."""
    return {"object": "memory.fact"} | {k: iso_time(v) for k, v in dict(row).items()}


async def list_facts(
    pool: Any,
    *,
    tenant: str,
    scope: str,
    may_use: Callable[[str], bool] | None = None,
    limit: int | None = None,
    offset: int = 0,
    after: int = 0,
) -> dict[str, Any]:
    """The scope's facts, oldest first, ``limit`` of them from ``offset`` on (None: all)
    of those with an id past ``after`` (a cursor's place).
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
        after=after,
    )
    rows, more = page_of(rows, limit)
    data = []
    for row in rows:
        fact = dict(row)
        agent = fact.pop("source_agent")
        if may_use is not None and (agent is None or not may_use(agent)):
            fact["source_session"] = None
        data.append(fact_answer(fact))
    cursor = row_cursor(FACTS, rows[-1]["id"]) if more else None
    return {"object": "list", "data": data, "has_more": more, "next_cursor": cursor}


def vet_facts(
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
            vet=vet_facts(cfg, scope, texts, strict),
            source_session=source_session,
        )
    return [fact_answer(r) for r in rows]


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
