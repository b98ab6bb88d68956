"""A compaction's job, and the summary call it makes to the agent's fast model.

``job_for`` resolves, once per compaction, what the work needs from the config: the provider
and fast model to ask, the fast model's window, the ``summarize`` block, the client's key
header (``Authorization``, ``api-key`` or ``x-api-key``, the only ones forwarded), and the
memory promotion settings.

``summarise`` asks the fast model for the briefing of a planned span: the prompt is cut to
the fast model's own window, an unusable answer is retried (at most ``summarize.maxAttempts``
calls, ≤ 3) and then reported as :class:`SummaryCallError`, a prompt the fast model refuses
as too long is cut to half its size before the next call (the same prompt would be refused
again), and a briefing grown past ``reflectTokens`` gets one reflection pass, kept only if it
parses and is shorter. An answer far longer than the ``max_tokens`` it was given is unusable too
(``_OVERRUN``), as is one its provider cut short (``_UNFINISHED``). An error's
``Retry-After`` up to ``_RETRY_AFTER_WAIT`` is waited for before the next try; a longer
one ends the tries and sets the session's backoff instead. A call the proxy's own budget of
whole answers refuses (``answer_budget``'s 503) is no attempt: the summary waits for room
and asks again, for at most ``answer_budget.WAIT_SECONDS`` in all when a request waits on it
(``CompactionJob.waited_on``, or one that joins it: ``RoomWait.join``). The whole call,
retries and waits included, is bounded by ``summarize.timeoutSeconds``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy import answer_budget, requestlog
from proxy.answer_budget import RoomWait, refused_pause, watch_arrivals
from proxy.cascade.briefing import parse_briefing, without_thinking
from proxy.cascade.overflow import calibrated_count
from proxy.cascade.redaction import patterns_of
from proxy.cascade.summary import build_prompt, build_reflect_prompt, needs_reflect
from proxy.cascade.types import CompactionPlan, TokenCounter
from proxy.config import Config, ModelConfig, ProviderConfig
from proxy.config_context import SummarizeConfig
from proxy.credentials import CLIENT_KEY_HEADERS
from proxy.errors import ServerBusy
from proxy.services.fastmodel import (
    TOO_LONG,
    answer_data,
    output_tokens,
    post_fast_model,
    read_fast_answer,
    retry_after,
)
from proxy.services.memory import patterns_for, scope_of_agent
from proxy.upstream import OWN_KEY_HEADERS, Upstream

__all__ = [
    "Briefing",
    "CompactionJob",
    "job_for",
    "SummaryCallError",
    "SummaryDeferred",
    "summarise",
]

log = logging.getLogger("cascade.compaction")
_SUMMARY_OUTPUT_TOKENS = 2000
_RETRY_AFTER_WAIT = 2.0
"""The longest ``Retry-After`` of the fast model a summary call waits for before trying
again: a request at ``hardFraction`` waits on the call."""
_OVERRUN = 1.5
"""An answer longer than the ``max_tokens`` it was given, by this factor of the proxy's own
estimate (which may count a little high), came from a provider that ignored the bound: it is
unusable, since a briefing past every window would be refused in every later prompt."""
_UNFINISHED = frozenset({"length", "content_filter", "error"})
"""The ``finish_reason`` of an answer the provider stopped before the model finished it: cut
at ``max_tokens``, by its content filter, or by a failure a gateway (OpenRouter) reports so.
Such a briefing holds the sections it reached and the parse would fill the rest with the
previous summary's stale text, so it is unusable."""


@dataclass(frozen=True, slots=True)
class CompactionJob:
    """What one compaction needs from the config, resolved once by ``job_for``: the session,
    the agent's fast model and provider, its ``summarize`` settings, the headers
    forwarded (:data:`_KEPT_HEADERS`), what started it (``trigger``) and where promoted facts go."""

    tenant: str
    session_id: str
    provider: ProviderConfig
    fast_model: str
    fast_limits: ModelConfig
    cfg: SummarizeConfig
    headers: Mapping[str, str]
    trigger: str
    query: tuple[tuple[str, str], ...] = ()
    """The query string of the request that started the job, as that request's own call
    sent it (an ``extra_query``: a gateway's ``api-version``): the fast model is called at
    the same provider, which may refuse a call without it."""
    promotion: str = "off"  # context.memoryPromotion.mode (services/promotion.py)
    memory_scope: str = "global"
    memory_patterns: tuple[re.Pattern[str], ...] = ()
    redaction: tuple[re.Pattern[str], ...] = ()
    """The agent's redaction patterns (none when its redaction is off): the span the fast
    model reads and the summary stored hold no match, whoever wrote the text."""
    observation_prefixes: tuple[str, ...] = ()  # a text agent's steps are rounds too
    agents: tuple[str, ...] | None = None
    """The agents of the proxy key that asked (None: any): the compaction, once it holds its
    claim, refuses a session another key's request moved to an agent outside them."""
    agent: str = "default"
    """The session's agent the job was built for: its settings are that agent's, so the
    compaction folds and stores nothing once the session runs another."""
    summary_version: int | None = None
    """The session's latest summary when the pressure that started the job (``soft``,
    ``hard``, ``overflow``) was measured: one that holds its claim only after another
    compaction (another replica's, or a ``/compact``, whose claim it waited out) stored a
    newer summary folds nothing, that summary having maybe relieved the pressure it was
    started for; the request (hard) or the next one (soft) measures again."""
    waited_on: bool = False
    """Whether a caller waits on the compaction (``DurableSummarizer.compact_now``: a turn at
    the hard threshold or over its window, a forced one): its summary waits for the budget of
    whole answers at most ``WAIT_SECONDS`` in all, as an arriving answer does, and is then
    deferred (the turn goes on with the overflow guard; a forced one answers 503 to retry),
    where a background one waits through ``summarize.timeoutSeconds``."""


_KEPT_HEADERS = frozenset({"authorization", *CLIENT_KEY_HEADERS, *OWN_KEY_HEADERS})
"""The client's headers a compaction's fast-model call keeps: its key (its bearer,
Azure's ``api-key``, an ``x-api-key``), and beside it the
organisation and project it picks (``Upstream`` drops those with the provider's own key)."""


def job_for(
    cfg: Config,
    *,
    tenant: str,
    session_id: str,
    agent: str,
    model: str,
    headers: Mapping[str, str],
    trigger: str,
    agents: tuple[str, ...] | None = None,
    summary_version: int | None = None,
    query: tuple[tuple[str, str], ...] = (),
) -> CompactionJob:
    agent_cfg = cfg.agents.get(agent) or cfg.agent_for(None)[1]
    fast = agent_cfg.fast_model or model
    scope = scope_of_agent(cfg, agent)
    redaction = cfg.context_for(agent).redaction
    return CompactionJob(
        tenant=tenant,
        session_id=session_id,
        provider=cfg.providers[agent_cfg.provider],
        fast_model=fast,
        fast_limits=cfg.model_limits(fast),
        cfg=cfg.context_for(agent).summarize,
        headers={k: v for k, v in headers.items() if k.lower() in _KEPT_HEADERS},
        trigger=trigger,
        query=query,
        promotion=cfg.context_for(agent).memory_promotion.mode,
        memory_scope=scope,
        memory_patterns=tuple(patterns_for(cfg, scope)),
        redaction=patterns_of(redaction),
        observation_prefixes=cfg.context_for(agent).observations.user_prefixes,
        agents=agents,
        agent=agent,
        summary_version=summary_version,
    )


class SummaryCallError(RuntimeError):
    """The fast model could not produce a usable briefing, after ``attempts`` calls;
    ``retry_after``: the wait its last answer asked for, when that ended the attempts."""

    def __init__(self, message: str, attempts: int, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.retry_after = retry_after


class SummaryDeferred(SummaryCallError):
    """``summarize.timeoutSeconds`` (or a waited-on job's ``WAIT_SECONDS``) ran out while
    the summary waited for the proxy's budget of whole answers (``answer_budget``), before
    a call or as its answer arrived: no failure of the fast model's, so it leaves the
    session's backoff as it was (``compaction_failed.report_failed``'s ``server_busy``)."""


class _TooLong(SummaryCallError):
    """The fast model refused the prompt as longer than its window."""


@dataclass(frozen=True, slots=True)
class Briefing:
    """A usable briefing, and the calls to the fast model it took (its reflection's
    included): what a compaction's event reports as its ``attempts``."""

    content: str
    calls: int


@dataclass(slots=True)
class _Tally:
    calls: int = 0
    waiting: bool = False  # for the budget's room (``_call``), not for the fast model
    room: RoomWait | None = None  # its bound (the job's ``waited_on``), from the first wait


async def summarise(
    upstream: Upstream,
    job: CompactionJob,
    plan: CompactionPlan,
    *,
    count: TokenCounter,
    ratio: float = 1.0,
    room: RoomWait | None = None,
) -> Briefing:
    """The briefing of ``plan``'s span, folded onto its previous summary; raises
    :class:`SummaryCallError` when every attempt failed, or when no usable briefing came
    within ``summarize.timeoutSeconds`` (the whole call, retries included; a reflection pass
    still running then is dropped and the briefing kept).

    The prompt is fitted to the fast model's window as the overflow guard counts
    (``calibrated_count`` with the session's real/estimated ``ratio``): it is the session's own
    text, which the estimate may count low by as much as the session's prompts were.
    ``room``: its waits' bound, which a request may join (None: the job's own)."""
    tally = _Tally(room=room)
    deadline = asyncio.get_running_loop().time() + job.cfg.timeout_seconds
    try:
        with watch_arrivals() as arrivals:
            async with requestlog.deadline_at(deadline):
                text = await _briefing_text(upstream, job, plan, count, ratio, tally)
    except TimeoutError:
        within = f"summarize.timeoutSeconds ({job.cfg.timeout_seconds:g} s)"
        if tally.waiting or arrivals.cut:  # for room, before a call or as its answer arrived
            if tally.room and tally.room.by is not None and tally.room.by < deadline:
                within = f"the {answer_budget.WAIT_SECONDS:g} s a waited-on compaction may wait"
            raise SummaryDeferred(
                "the proxy's budget of whole answers (CASCADE_MAX_HELD_ANSWER_BYTES) stayed "
                f"spent through {within}; nothing was folded",
                tally.calls,
            ) from None
        raise SummaryCallError(f"no usable briefing within {within}", tally.calls) from None
    content = parse_briefing(text, previous=plan.previous)
    if needs_reflect(content, count=count, reflect_tokens=job.cfg.reflect_tokens):
        reflect = build_reflect_prompt(content, target_tokens=job.cfg.reflect_tokens // 2)
        with contextlib.suppress(SummaryCallError, ValueError, TimeoutError):
            async with requestlog.deadline_at(deadline):
                answer = await _call(upstream, job, reflect, count, tally)
            shorter = parse_briefing(answer, previous=content)
            if _tokens(shorter, count) < _tokens(content, count):  # else it only costs more
                content = shorter
    return Briefing(content, tally.calls)


async def _briefing_text(
    upstream: Upstream,
    job: CompactionJob,
    plan: CompactionPlan,
    count: TokenCounter,
    ratio: float,
    tally: _Tally,
) -> str:
    """The fast model's usable answer to ``plan``'s prompt, the prompt halved after each
    refusal as too long, within ``summarize.maxAttempts`` calls in all."""
    window = job.fast_limits.context_limit
    output = output_tokens(
        job.fast_model, _SUMMARY_OUTPUT_TOKENS, window, at=job.provider.base_url
    )  # and its thinking
    budget = max(1000, window - output - 500)
    calibrated = calibrated_count(count, ratio)
    prompt = build_prompt(plan, max_input_tokens=budget, count=calibrated)
    while True:
        try:
            return await _call(upstream, job, prompt, count, tally, job.cfg.max_attempts)
        except _TooLong as exc:
            smaller = build_prompt(plan, max_input_tokens=calibrated(prompt) // 2, count=calibrated)
            if tally.calls >= job.cfg.max_attempts or smaller == prompt:
                raise SummaryCallError(str(exc), tally.calls) from None
            prompt = smaller


def _tokens(text: str, count: TokenCounter) -> int:
    return count([{"role": "user", "content": text}])


def _check_answer(resp: Any, text: str) -> None:
    """Raise ValueError for an answer its provider cut short (``_UNFINISHED``), and name what
    came instead of a briefing: a refusal (quoting its head) or a tool call, so the failure's
    event says what the fast model did rather than only that no section was found."""
    choice = answer_data(resp)["choices"][0]
    reason = choice.get("finish_reason")
    if reason in _UNFINISHED:
        raise ValueError(f"finish_reason {reason}: the answer stops before the briefing's end")
    if text.strip():
        return
    message = choice["message"]
    if isinstance(refusal := message.get("refusal"), str) and refusal.strip():
        raise ValueError(f"the fast model refused: {refusal.strip()[:200]}")
    if message.get("tool_calls") or message.get("function_call"):
        raise ValueError("a tool call instead of a briefing")


def _check_length(text: str, count: TokenCounter) -> None:
    """Raise ValueError for an answer past its ``max_tokens`` (``_OVERRUN``): the briefing,
    not the thinking written inline ahead of it (``without_thinking``), which a thinking
    model's ``max_tokens`` holds room for beside it (``fastmodel.output_tokens``)."""
    tokens = count([{"role": "assistant", "content": without_thinking(text)}])
    if tokens > _SUMMARY_OUTPUT_TOKENS * _OVERRUN:
        raise ValueError(
            f"about {tokens} tokens, where max_tokens was {_SUMMARY_OUTPUT_TOKENS}: "
            "the provider ignored the bound"
        )


async def _call(
    upstream: Upstream,
    job: CompactionJob,
    prompt: list[Any],
    count: TokenCounter,
    tally: _Tally | None = None,
    limit: int | None = None,
) -> str:
    """One fast-model call, tried until ``tally`` (the calls of the whole summary) counts
    ``limit`` calls (None: ``summarize.maxAttempts`` more tries); returns text with the five
    sections, within the length asked for. A refusal as too long raises :class:`_TooLong` at
    once: this prompt cannot succeed. An error's ``Retry-After`` is waited for before the
    next try when it is at most ``_RETRY_AFTER_WAIT``; a longer one ends the tries (the next
    would be refused too) and is carried by the error, for the session's backoff."""
    last = "no attempt made"
    tally = _Tally() if tally is None else tally
    end = tally.calls + job.cfg.max_attempts if limit is None else limit
    busy = 0  # the calls the proxy's own budget refused, none of them an attempt
    while tally.calls < end:
        if busy:  # room first, then a pause: an answer refused on arrival was paid for
            tally.waiting = True
            tally.room = tally.room or RoomWait(job.waited_on)
            async with tally.room.bound():  # a waited-on job's: ``WAIT_SECONDS`` in all
                await upstream.budget.room()
                await asyncio.sleep(refused_pause(busy))  # refusals: no bound
            tally.waiting = False
        tally.calls += 1
        attempt = tally.calls
        body = {
            "model": job.fast_model,
            "messages": prompt,
            "max_tokens": _SUMMARY_OUTPUT_TOKENS,
            "temperature": 0,
        }
        too_long, wait = False, None
        try:
            resp = await post_fast_model(upstream, job, body)
        except ServerBusy:  # the proxy's whole answers hold its budget: no fast model's fault
            log.info("compaction of %s waits for the budget of whole answers", job.session_id)
            tally.calls, busy = tally.calls - 1, busy + 1
            continue
        except Exception as exc:  # transport errors (ProxyError) included: no answer's fault
            last = f"{type(exc).__name__}: {exc}"
        else:
            try:
                status, text = read_fast_answer(job, resp)
                if status >= 400:
                    last = f"fast model answered {status}: {text}"
                    too_long = status == 400 and TOO_LONG in text
                    wait = retry_after(resp)
                else:
                    _check_answer(resp, text)
                    parse_briefing(text)  # raises ValueError when no section is recognisable
                    _check_length(text, count)
                    return text
            except (ValueError, LookupError, TypeError, AttributeError) as exc:
                last = f"unusable summary ({type(exc).__name__}: {exc})"
        # an attempt is INFO: the compaction failed is one WARNING, said by its caller
        log.info("compaction of %s attempt %d failed: %s", job.session_id, attempt, last)
        if too_long:
            raise _TooLong(last, attempt)
        if wait is not None and wait > _RETRY_AFTER_WAIT:
            raise SummaryCallError(f"{last} (Retry-After {wait:g} s)", attempt, wait)
        if tally.calls < end:  # no pause after the last attempt
            pause = min(0.2 * (2 ** (attempt - 1)), 2.0)
            await asyncio.sleep(max(pause, wait or 0.0))
    raise SummaryCallError(last, tally.calls)
