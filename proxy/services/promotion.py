"""Memory promotion: right after a compaction folds a span, the fast model lists the span's
durable facts (from its original text, not the summary), and each passes ``sanitize_fact``.

``suggest`` persists a ``memory.suggestion`` event ``{suggestion_id, facts, scope}`` for a
person to accept or reject through the memory API, without the facts a pending suggestion
for the scope holds already (durable facts come up in span after span); ``auto`` stores the
facts in the session's scope (its agent's, else global). Nothing here may affect the turn:
every failure is logged and swallowed, as a WARNING (for an answer that is not the facts'
JSON, saying why without quoting it: logs hold no content), except a session deleted while
the fast model answered: that is no fault, and is an INFO line, as it is for the compaction.

It runs after the compaction that folded the span, inside a forced one (which lends it
its connection) and in a task of its own after one the pressure started (a request waits
for that one, and needs its summary, not the facts). Either way the connection (``Lent``)
goes back to the pool before the fast model is asked and is borrowed again only to write,
so a slow extraction holds none (issue 24). A promotion that a stop or a kill cuts is owed
by its session, and its next request takes it over (``services/promotion_owed.py``).

A call the proxy's own budget of whole answers refuses (``ServerBusy``: no fault of the fast
model's nor of the span's) waits for the budget's room and is asked again, as a summary's
is (``compaction_job._call``), for at most ``answer_budget.WAIT_SECONDS`` in all when a
request waits on it (a forced compaction's); one still waiting when that or the promotion's
bound ends leaves the span owed, for the next request to take over, where a failure settles
it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
from collections.abc import Sequence
from typing import Any

import asyncpg

from proxy import answer_budget
from proxy.cascade.memory import (
    MAX_FACTS_PER_SPAN,
    MEMORY_FACTS_FORMAT,
    SPAN_TEXT_CHARS,
    FactsAnswerError,
    extraction_prompt,
    fit_span_text,
    parse_facts,
    read_form,
    sanitize_facts,
    span_facts,
    span_text,
)
from proxy.cascade.redaction import redact
from proxy.cascade.text import content_text
from proxy.cascade.types import MEMORY_SUGGESTION, Message, TokenCounter
from proxy.errors import ServerBusy
from proxy.services.fastmodel import output_tokens, post_fast_model, read_fast_answer
from proxy.services.memory import GLOBAL
from proxy.store import memory as store, memory_suggestions, summaries
from proxy.store.db import DatabaseUnavailable, Lent, PoolExhausted

__all__ = ["promote"]

log = logging.getLogger("cascade.memory")

_OUTPUT_TOKENS = 1000
_MARGIN = 500
"""Tokens of the fast model's window left free beside the request and its answer, as the
summary's prompt leaves them (the proxy's count is an estimate of the provider's)."""


_FORMAT_WORDS = ("response_format", "response format", "json_schema", "response_schema")


def _format_refused(resp: Any) -> bool:
    """Whether ``resp`` refuses the ``json_schema`` response format rather than the call:
    DeepSeek takes ``json_object`` only ("This response_format type is unavailable now"),
    and Groq's models without structured outputs name it too; Gemini's OpenAI endpoint names
    the ``response_schema`` it turns the format into (a schema keyword it does not know,
    "Unknown name … at 'generation_config.response_schema'"). Such a provider is asked
    again without the field, as it is no fault of the span's: the prompt asks for the same
    object, and ``parse_facts`` reads it through fences and words around it."""
    if resp.status_code not in (400, 422):
        return False
    said = resp.text.lower()
    return any(word in said for word in _FORMAT_WORDS)


BOUND_SECONDS = summaries.OWED_SECONDS - 60.0
"""How long a promotion may run (the fast model's calls, which only the provider's per-read
timeout bounds, and the writes): under ``summaries.OWED_SECONDS`` with room for what runs
between the summary's insert and the promotion's start, so that the session's next request
takes over only a promotion that no longer runs, and asks the fast model once for a span."""


async def promote(
    upstream: Any,
    bus: Any,
    lent: Lent,
    job: Any,
    span: Sequence[Message],
    *,
    count: TokenCounter,
    owed: tuple[int, int] | None = None,
    waited_on: bool = False,
) -> None:
    """Extract, sanitise and suggest or store the facts of ``span`` (``job``: the
    compaction's ``CompactionJob``; ``lent``: its connection, given back while the fast
    model answers; ``count``: the session's token counter, which fits the request to the
    fast model's window); never raises. ``owed``: the span's positions, which the session
    owes a promotion for (``summaries.insert_summary``) and owes no more once it ends, its
    failures too (they are no stop's: a fast model that refused it would refuse it again);
    one the database cut, or a cancellation, leaves it owed for the next request. One past
    ``BOUND_SECONDS`` ends as a failure, but for one waiting for the budget's room: owed.
    ``waited_on``: a request waits for it (a forced compaction's), so its waits for the
    budget's room are bounded as the summary's are (``_Busy``)."""
    settled, busy = owed is not None, _Busy(waited_on)
    try:
        async with asyncio.timeout(BOUND_SECONDS):
            await _promote(upstream, bus, lent, job, span, count, busy)
    except asyncpg.ForeignKeyViolationError:  # no session left to record a suggestion in
        log.info("memory promotion for %s: the session was deleted", job.session_id)
    except FactsAnswerError as exc:  # says why without quoting the answer
        log.warning(
            "memory promotion for %s: the fast model's answer was refused: %s", job.session_id, exc
        )
    except Exception as exc:  # a failed extraction never fails the compaction or the turn
        if busy.waiting and isinstance(exc, TimeoutError):  # no room came: no failure
            settled = False
            log.info("memory promotion for %s stays owed: the budget had no room", job.session_id)
            return
        settled = settled and not isinstance(exc, DatabaseUnavailable | PoolExhausted)
        log.warning("memory promotion for %s failed: %s", job.session_id, type(exc).__name__)
    if settled and owed is not None:
        with contextlib.suppress(Exception):  # still owed: the next request takes it over
            conn = await lent.take()
            await summaries.settle_owed(
                conn, tenant=job.tenant, session_id=job.session_id, span=owed
            )


def _readable(span: Sequence[Message], job: Any) -> Sequence[Message]:
    """``span`` as the extraction may read it: each message's role and its content's text
    (``span_text`` renders no more: a call's arguments are not read), redacted as sent and
    in the form the fact check reads (``_shown``), with the patterns a fact of the scope is
    checked with (``job.memory_patterns``: the built-in ones even with the agent's redaction
    or ``defaultPatterns`` off). A fact is checked for a secret's shape, not its value: the
    fast model that read ``"password": "…"`` could restate the value in words no pattern
    reads, so it is never shown it. A span the compaction redacted already is marked once
    (no pattern reads ``[REDACTED]``).

    Only the newest messages whose text fills what ``span_text`` keeps are read (it cuts the
    older ones away): redacting the rest on the event loop would stall every other request
    for text no model reads."""
    read: list[Message] = []
    held = 0
    for message in reversed(span):
        if held >= SPAN_TEXT_CHARS:
            break
        body = _shown(content_text(message.get("content"), media=True), job.memory_patterns)
        read.append({"role": message.get("role"), "content": body})
        held += len(read[-1]["content"])
    return read[::-1]


def _shown(text: str, patterns: Sequence[re.Pattern[str]]) -> str:
    """``text`` redacted, and read in ``read_form`` only when that form shows a secret the
    raw text hid, and on one line only when that does (a fact is checked on one line, its
    line breaks and separators spaces: ``password\n=\n…``): folding changes what legitimate
    text says (Persian without its non-joiner, an emoji sequence without its joiners,
    ``10⁹`` as ``109``, a message without its lines), and a fact the fast model took from
    the folded form would be stored so. The raw form is redacted first, so a pattern only it
    matches (one written in fullwidth letters) is not undone by the fold; each fold that
    changes the text costs another redaction. The one-line form is the read form's words,
    so the read form (a scan of a non-ASCII text) is made once unless it showed a secret."""
    shown = redact(text, patterns)[0]
    form = read_form(shown)
    if form != shown:  # ASCII text, and most other text: nothing to fold
        folded, hidden = redact(form, patterns)
        if hidden:
            shown, form = folded, read_form(folded)
    line = " ".join(form.split())
    if line != shown:  # a text of one line with single spaces: nothing to fold
        folded, hidden = redact(line, patterns)
        shown = folded if hidden else shown
    return shown


class _Busy(answer_budget.RoomWait):
    """Whether a promotion waits for the budget's room now (``_asked``), and the bound of
    its waits (``RoomWait``: for one a request waits on, ``WAIT_SECONDS`` in all, as its
    summary waits)."""

    __slots__ = ("waiting",)

    def __init__(self, waited_on: bool = False) -> None:
        super().__init__(waited_on)
        self.waiting = False


async def _asked(upstream: Any, job: Any, body: dict[str, Any], busy: _Busy) -> Any:
    """``post_fast_model``'s reply, asked again after the budget's room each time the
    budget refuses the call (a pause after the room, growing, as a summary's), within
    ``busy``'s bound."""
    refused = 0
    while True:
        try:
            return await post_fast_model(upstream, job, body)
        except ServerBusy:
            refused += 1
            log.info(
                "memory promotion for %s waits for the budget of whole answers", job.session_id
            )
        busy.waiting = True
        async with busy.bound():  # past it: ``promote`` leaves the span owed
            await upstream.budget.room()
            await asyncio.sleep(answer_budget.refused_pause(refused))
        busy.waiting = False


async def _promote(
    upstream: Any,
    bus: Any,
    lent: Lent,
    job: Any,
    span: Sequence[Message],
    count: TokenCounter,
    busy: _Busy | None = None,
) -> None:
    window = job.fast_limits.context_limit
    budget = (
        window
        - output_tokens(job.fast_model, _OUTPUT_TOKENS, window, at=job.provider.base_url)
        - _MARGIN
    )
    text = fit_span_text(
        span_text(_readable(span, job)), budget, lambda t: count(extraction_prompt(t))
    )
    if not text:
        return
    await lent.give_back()  # none held while the fast model answers
    body = {
        "model": job.fast_model,
        "messages": extraction_prompt(text),
        "response_format": MEMORY_FACTS_FORMAT,
        "max_tokens": _OUTPUT_TOKENS,
        "temperature": 0,
    }
    busy = _Busy() if busy is None else busy  # ``promote``'s, which reads it after
    resp = await _asked(upstream, job, body, busy)  # its errors are no reply's fault
    if _format_refused(resp):  # a provider without structured outputs: the prompt asks too
        del body["response_format"]
        resp = await _asked(upstream, job, body, busy)
    try:
        status, answer = read_fast_answer(job, resp)
    except (ValueError, LookupError, TypeError, AttributeError) as exc:  # read_fast_answer's
        raise FactsAnswerError(
            f"the reply is not a chat completion ({type(exc).__name__})"
        ) from exc
    if status >= 400:
        log.warning("memory promotion for %s: the fast model answered %d", job.session_id, status)
        return
    facts = parse_facts(answer)
    conn = await lent.take()
    carried_keys, carried = await _also_carried(conn, job, facts)
    if job.promotion == "auto":

        def vet(stored: set[str]) -> list[str]:
            return span_facts(
                sanitize_facts(
                    facts,
                    existing=carried,
                    stored_keys=stored | carried_keys,
                    patterns=job.memory_patterns,
                    keep=MAX_FACTS_PER_SPAN,
                )
            )

        await store.add_facts(
            conn,
            tenant=job.tenant,
            scope=job.memory_scope,
            texts=facts,
            vet=vet,
            source_session=job.session_id,
        )
        return
    keys, stored = await store.stored_matches(
        conn, tenant=job.tenant, scope=job.memory_scope, texts=facts
    )
    stored += await memory_suggestions.fetch_pending_facts(
        conn, tenant=job.tenant, scope=job.memory_scope
    )
    kept = span_facts(
        sanitize_facts(
            facts,
            existing=[*stored, *carried],
            stored_keys=keys | carried_keys,
            patterns=job.memory_patterns,
            keep=MAX_FACTS_PER_SPAN,
        )
    )
    if kept:
        await bus.publish(
            conn,
            tenant=job.tenant,
            session_id=job.session_id,
            name=MEMORY_SUGGESTION,
            data={
                "suggestion_id": f"sug-{secrets.token_hex(8)}",
                "facts": kept,
                "scope": job.memory_scope,
            },
        )


async def _also_carried(conn: Any, job: Any, facts: Sequence[str]) -> tuple[set[str], list[str]]:
    """The facts the session's prompts carry from beyond its own scope, which promotion
    leaves out as it leaves out the scope's: an agent's sessions carry ``global`` too, so a
    fact it stores is remembered already (the keys of ``facts`` it stores, and the text of
    its unkeyed facts). A fact only a pending suggestion for ``global`` holds is not left
    out: a pending suggestion is in no prompt, and the two ask different things (every
    agent's, this agent's), so one rejected would leave the fact in no scope, never asked
    for the agent's. None for ``global`` itself, whose sessions carry no agent's scope."""
    if job.memory_scope == GLOBAL:
        return set(), []
    return await store.stored_matches(conn, tenant=job.tenant, scope=GLOBAL, texts=facts)
