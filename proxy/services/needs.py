"""The one place the shell fulfils what the stages' plans ask for (``cascade.step``).

``pipeline.plan_step`` returns each enabled stage's need (a small frozen value, keyed by stage
name); ``fulfil`` runs the fulfiller registered for that need's type on the request's
connection and returns the answers, which ``pipeline.assemble`` hands back to the stages in
``StepInput.answers``. A stage that needs I/O adds one entry to ``FULFILLERS``. A per-turn
stage's need is planned only at its turn's first step; its answer is then kept with the
turn (``Assembled.kept``, stored by ``store.steps.record_step``) and reused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any

from proxy.cascade.memory_block import MemoryNeed, memory_lines, memory_rows, render_memory
from proxy.cascade.retrieval import RetrievalNeed
from proxy.services.retrieval import related_messages
from proxy.session_id import SessionKey
from proxy.store import memory

__all__ = ["Fulfiller", "FULFILLERS", "fulfil"]

Fulfiller = Callable[[Any, Any, SessionKey], Awaitable[Any]]
"""``(need, connection, session) -> answer``."""


async def memory_block(need: MemoryNeed, conn: Any, key: SessionKey) -> str | None:
    """The ``<memory>`` block of the session's facts (asked for at a turn's first step; the
    turn keeps it, ``cascade.phases``). Only the oldest facts the block can use are read
    (``memory_rows``); a read of that many the block does not fill reads the rest."""
    tenant, sid = key.tenant, key.session_id
    rows = memory_rows(need.max_tokens)
    facts = await memory.session_facts(conn, tenant=tenant, session_id=sid, limit=rows)
    if (
        len(facts) == rows
        and not memory_lines(facts, max_tokens=need.max_tokens, tokens=need.tokens)[1]
    ):
        facts += await memory.session_facts(conn, tenant=tenant, session_id=sid, offset=rows)
    return render_memory(facts, max_tokens=need.max_tokens, tokens=need.tokens)


FULFILLERS: Mapping[type, Fulfiller] = MappingProxyType(
    {MemoryNeed: memory_block, RetrievalNeed: related_messages}
)
"""Fulfillers by the type of the need they answer."""


async def fulfil(
    needs: Mapping[str, object],
    *,
    conn: Any,
    key: SessionKey,
    fulfillers: Mapping[type, Fulfiller] = FULFILLERS,
) -> dict[str, Any]:
    """Every need's answer, by stage name; a need nobody fulfils is a programming error."""
    answers: dict[str, Any] = {}
    for name, need in needs.items():
        fulfiller = fulfillers.get(type(need))
        if fulfiller is None:
            raise TypeError(f"stage {name!r} needs a {type(need).__name__}: no fulfiller for it")
        answers[name] = await fulfiller(need, conn, key)
    return answers
