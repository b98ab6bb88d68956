"""The proxy's own calls to an agent's fast model: the summary of a compaction and the
facts of memory promotion.

Both go to the provider the compaction job names, with the client's headers, and both count
the answer's token usage (the token histogram and the call's span) as a client's request
does, so the fast model's spend shows in the metrics whichever stage asked.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from proxy import answers, chunks, sse
from proxy.cascade.text import content_text
from proxy.chunk_faults import error_answer
from proxy.errors import UpstreamBadResponse
from proxy.observe import note_bad_answer, note_usage
from proxy.provider_errors import provider_name
from proxy.services.system_role import as_user, takes_system

__all__ = [
    "REASONING_ROOM",
    "TOO_LONG",
    "answer_data",
    "for_model",
    "output_tokens",
    "post_fast_model",
    "read_fast_answer",
    "retry_after",
]

log = logging.getLogger("cascade.compaction")

TOO_LONG = "context_length_exceeded"
"""The error code of a provider that refuses a prompt past its window (OpenAI's)."""


def _error_head(text: str) -> str:
    """The head of an error body, led by ``TOO_LONG`` when that is its code, so a caller
    sees it however long the provider's message before it is."""
    head = text[:300]
    try:
        error = json.loads(text).get("error")
    except (ValueError, AttributeError, RecursionError):  # no JSON object, or one too deep
        return head
    code = error.get("code") if isinstance(error, dict) else None
    return f"{TOO_LONG}: {head}" if code == TOO_LONG and TOO_LONG not in head else head


_REASONING = re.compile(r"(?:^(?:ft:)?|/)(?:o[1-9](?:$|-)|gpt-5(?![.\d]*-chat))")
"""OpenAI's reasoning models by name (o1, o3, o4-mini, gpt-5, gpt-5.1-mini, a router's
``openai/o3``, a fine-tuned ``ft:o4-mini-…:org::id``; not gpt-5-chat)."""


_LEARNED: set[tuple[str, str]] = set()
"""The provider's base URL and the name of each model there that refused ``max_tokens`` as
OpenAI's reasoning models do (``_refuses_max_tokens``): an Azure deployment or a gateway's
alias names any model, so a name read as no reasoning model is one from its first refusal
on, for the process's life, at that provider only: the same name elsewhere (another
resource's deployment, a local server's alias) is another model, and a server that knows
only ``max_tokens`` would take a reasoning model's body unbounded."""
_MAX_LEARNED = 1024  # a bound on the names the config and the clients' models may bring


def _reasoning(model: str, at: str) -> bool:
    return (at, model) in _LEARNED or _REASONING.search(model) is not None


def _refuses_max_tokens(resp: Any) -> bool:
    """Whether ``resp`` refuses ``max_tokens`` or a temperature as OpenAI's reasoning models
    word it (Azure's too): "Unsupported parameter: 'max_tokens' is not supported with this
    model. Use 'max_completion_tokens' instead.", "Unsupported value: 'temperature' does not
    support 0 with this model." A cap on ``max_tokens`` (Groq's, DeepSeek's) is no such one."""
    if resp.status_code != 400:
        return False
    said = resp.text
    return "Unsupported" in said and ("'max_tokens'" in said or "'temperature'" in said)


_THINKS_IN_MAX_TOKENS = re.compile(
    r"(?:^|/)(?:gemini-(?:2\.5|[3-9])|deepseek-(?:reasoner|r1)|gpt-oss|qwq|magistral"
    r"|qwen3(?![^/]*(?:instruct|coder)))|-thinking",
    re.IGNORECASE,
)
"""Thinking models that count their thinking in ``max_tokens`` and take it: Gemini's from
2.5 on (its OpenAI endpoint, or a router's ``google/`` name), DeepSeek's reasoner
(``deepseek-reasoner``, R1 by any host's name), and the open ones other hosts serve (gpt-oss,
QwQ, Magistral, Qwen3 but its instruct and coder models, a ``…-thinking`` name)."""


REASONING_ROOM = 25_000
"""The tokens a reasoning model's call may think in beyond its answer's own bound (OpenAI's
advice for a first bound on these models): bounded at the answer's length alone, the model
may spend it all thinking and answer nothing, cut at ``length``. Only what it writes costs."""


def output_tokens(model: str, max_tokens: int, window: int | None = None, *, at: str = "") -> int:
    """The completion tokens a call to ``model`` at the provider whose base URL is ``at``
    bounding its answer at ``max_tokens`` may take of its ``window``: its thinking's room as
    well for a reasoning model (``for_model``), at most a quarter of the window, so one
    configured small (to keep summaries cheap) still leaves most of it to the prompt."""
    if not (_reasoning(model, at) or _THINKS_IN_MAX_TOKENS.search(model)):
        return max_tokens
    return max_tokens + (REASONING_ROOM if window is None else min(REASONING_ROOM, window // 4))


def for_model(
    model: str, body: dict[str, Any], window: int | None = None, *, at: str = ""
) -> dict[str, Any]:
    """``body`` as ``model`` takes it. OpenAI's reasoning models answer 400 to ``max_tokens``
    (they take ``max_completion_tokens``, which bounds their reasoning and the answer
    together, so it holds room to think in as well: ``output_tokens`` of ``window``) and to
    any ``temperature`` but the default; other models get ``body`` as written, since servers
    that only know ``max_tokens`` (some local ones) would ignore the newer name and leave the
    output unbounded. A model that thinks within ``max_tokens`` (``_THINKS_IN_MAX_TOKENS``)
    keeps the name, its bound raised by the same room, and goes without the temperature:
    their makers advise against greedy decoding while they think (it repeats itself to the
    bound), and the host's default is the one tuned for the model. ``at``: the provider's
    base URL, where a name may have been learned (``_LEARNED``)."""
    if not _reasoning(model, at):
        if not _THINKS_IN_MAX_TOKENS.search(model):
            return body
        out = {k: v for k, v in body.items() if k != "temperature"}
        if "max_tokens" in body:
            out["max_tokens"] = output_tokens(model, body["max_tokens"], window, at=at)
        return out
    return _as_reasoning(model, body, window)


def _as_reasoning(model: str, body: dict[str, Any], window: int | None) -> dict[str, Any]:
    """``body`` as OpenAI's reasoning models take it: ``max_completion_tokens`` with room to
    think in, no temperature."""
    out = {k: v for k, v in body.items() if k not in ("max_tokens", "temperature")}
    if "max_tokens" in body:
        room = REASONING_ROOM if window is None else min(REASONING_ROOM, window // 4)
        out["max_completion_tokens"] = body["max_tokens"] + room
    return out


_STREAMED: set[tuple[str, str]] = set()
"""The provider's base URL and the name of each model there that refused an unstreamed call
for its output bound (``_wants_stream``): called streamed from then on, for the process's
life, so each later summary and extraction draws no refusal first."""
_NO_USAGE_OPTION: set[str] = set()
"""The base URLs of the providers that refused a fast call's ``stream_options``: their streams
go without it from then on (their usage uncounted, as for a provider that reports none)."""


def _learn(learned: set[Any], key: Any) -> bool:
    """Add ``key`` to ``learned`` while it holds fewer than ``_MAX_LEARNED``; whether it is
    new there."""
    if key in learned or len(learned) >= _MAX_LEARNED:
        return False
    learned.add(key)
    return True


async def post_fast_model(upstream: Any, job: Any, body: dict[str, Any]) -> Any:
    """POST ``body`` to ``job``'s fast model (``job``: a ``CompactionJob``), fitted to that
    model and its window (``for_model``), with the query string of the request that started
    the job, as that request's own call had it; the raw reply. A model that refuses the
    body as OpenAI's reasoning models do (``_refuses_max_tokens``) under a name not read as
    one is asked again as one, and its name learned (``_LEARNED``); a provider that asks for
    a stream for the output bound (``_wants_stream``) is asked again streamed, and the
    model called so from then on (``_STREAMED``, ``_post_streamed``): at most four calls.
    A model that takes no system message gets the prompt's as a user message.
    Each is learned once a retry is taken (``_taken``), not from the refusal's words."""
    model, window, at = job.fast_model, job.fast_limits.context_limit, job.provider.base_url
    reasoning, streamed = _reasoning(model, at), (at, model) in _STREAMED
    if not takes_system(model, job.fast_limits):  # its instructions as a user message
        body = {**body, "messages": as_user(body["messages"])}
    sent = for_model(model, body, window, at=at)
    resp = await (_post_streamed if streamed else _post)(upstream, job, sent)
    as_reasoning = not reasoning and _refuses_max_tokens(resp)
    if as_reasoning:
        sent = _as_reasoning(model, body, window)
        resp = await (_post_streamed if streamed else _post)(upstream, job, sent)
    if not streamed and _wants_stream(resp):  # read from its chunks (``answer_data``)
        resp = await _post_streamed(upstream, job, sent)
        if _taken(resp):
            _learn(_STREAMED, (at, model))
    if as_reasoning and _taken(resp):
        _learn_reasoning(job, at, model)
    return resp


def _taken(resp: Any) -> bool:
    """Whether the provider took a retry: only then is what it was retried for learned. A
    refusal's words alone teach nothing, since an error that quotes the body (a validator
    echoing its input, the prompt holding a client's messages) may hold them, and what is
    learned changes every tenant's calls to the model, for the process's life."""
    return bool(resp.status_code < 400)


def _learn_reasoning(job: Any, at: str, model: str) -> None:
    if _learn(_LEARNED, (at, model)):
        log.info(
            "fast model %r at %s refused max_tokens or a temperature as OpenAI's reasoning"
            " models do: it is called with max_completion_tokens and room to think from now"
            " on, until the proxy restarts",
            model,
            provider_name(job.provider),
        )


async def _post_streamed(upstream: Any, job: Any, body: dict[str, Any]) -> Any:
    """``body`` POSTed streamed, with ``stream_options.include_usage`` (a stream reports its
    usage only when asked, and the usage is what the call's metrics count), once more
    without it where a strict server refuses that field (400 or 422 naming it), and without
    it from the start at a provider that refused it before (``_NO_USAGE_OPTION``)."""
    at, streamed = job.provider.base_url, {**body, "stream": True}
    if at in _NO_USAGE_OPTION:
        return await _post(upstream, job, streamed)
    resp = await _post(upstream, job, {**streamed, "stream_options": {"include_usage": True}})
    if resp.status_code in (400, 422) and "stream_options" in resp.text:
        resp = await _post(upstream, job, streamed)
        if _taken(resp):
            _learn(_NO_USAGE_OPTION, at)
    return resp


_STREAM_ASKED = re.compile(r"must have stream\s*[=:]\s*true", re.IGNORECASE)


def _wants_stream(resp: Any) -> bool:
    """Whether ``resp`` refuses an unstreamed call for the length it may answer: Fireworks
    (and gateways alike) take at most 4096 tokens of output unstreamed, "Requests with
    max_tokens > 4096 must have stream=true", which a thinking model's room to think passes.
    Such a call is asked again streamed, its room kept."""
    return resp.status_code == 400 and _STREAM_ASKED.search(resp.text) is not None


async def _post(upstream: Any, job: Any, body: dict[str, Any]) -> Any:
    return await upstream.call(
        job.provider,
        "POST",
        "/chat/completions",
        client_headers=job.headers,
        params=job.query or None,
        content=json.dumps(body).encode(),
        model=job.fast_model,
        max_bytes=answers.MAX_ANSWER_BYTES,
    )


class ErrorEvent(ValueError):
    """A streamed answer holding the provider's error event: its call failed as an error
    object sent with a 200 does (``error_answer``)."""


def answer_data(resp: Any) -> Any:
    """The chat completion a successful ``resp`` holds: its JSON body, or, for an answer
    streamed although the call asked for none (a gateway that always streams), one built
    from its chunks (``_streamed``). Raises ValueError for a body that is neither, or that
    nests past what Python's recursion allows."""
    try:
        return resp.json()
    except RecursionError as exc:
        raise ValueError(_TOO_DEEP) from exc
    except ValueError:
        text = resp.text.lstrip()
        if not text.startswith(("data:", ":", "event:", "id:")):
            raise
        return _streamed(text, _scrubbing(resp))


_TOO_DEEP = "the answer's JSON nests too deep"


def _scrubbing(resp: Any) -> Callable[[str], str]:
    """What scrubs the credential ``resp``'s call sent from a text of its body, which comes
    unscrubbed on a success (``Upstream.call`` scrubs an error's)."""
    request = getattr(resp, "request", None)
    return lambda text: answers.scrub_error(text.encode(), request).decode("utf-8", "replace")


def _streamed(text: str, scrub: Callable[[str], str]) -> dict[str, Any]:
    """A chat completion from an event stream's chunks, built as a relayed stream's reply is
    (``sse`` splits the events, ``chunks.StreamAccumulator`` merges their deltas).

    Raises ValueError for a stream that holds an error event (quoted, ``scrub``-bed) or that
    stops with neither a finish reason nor ``[DONE]``: either breaks off the answer, whose
    missing part a briefing's parse would fill with the previous summary's stale text."""
    splitter = sse.EventSplitter()
    events = [*splitter.feed(text.encode()), splitter.flush()]
    acc, done = chunks.StreamAccumulator(answers.MAX_ANSWER_BYTES), False
    for event in events:
        if sse.is_done(event):
            done = True
            break
        chunk = sse.parse_chunk(event)
        if chunk is None:
            data = sse.event_data(event)
            if data is None:  # a comment, an id or an event name alone
                continue
            try:  # what keeps it from being a chunk: not JSON (its ValueError), or too deep
                json.loads(data)
            except RecursionError as exc:
                raise ValueError(_TOO_DEEP) from exc
            raise ValueError("a streamed chunk is no JSON object")
        if chunk.get("error") is not None:
            quoted = scrub(sse.event_data(event) or "")[:300]
            raise ErrorEvent(f"the stream broke off with an error: {quoted}")
        acc.add(chunk)
    if acc.finish_reason(0) is None and not done:
        raise ValueError("the stream was cut: it ends with neither a finish reason nor [DONE]")
    return acc.to_completion()


def read_fast_answer(job: Any, resp: Any) -> tuple[int, str]:
    """The status of ``resp`` and, for a success, the answer's text (its usage noted), or for
    an error the head of the provider's body (``Upstream.call`` scrubbed the credential it
    sent from it: some providers quote it, and the head goes into a
    ``context.compaction.failed`` event and the log). A success that is not a chat completion raises
    (ValueError for a body that is not JSON; KeyError, IndexError, TypeError or
    AttributeError for another shape; ValueError quoting it for an OpenAI error object, which
    some gateways answer with status 200). A content given as a list of parts reads as its text
    parts joined (``content_text``), as a message's text does everywhere in the proxy; a
    streamed answer as its chunks joined (``answer_data``)."""
    if resp.status_code >= 400:
        return resp.status_code, _error_head(resp.text)
    kind = UpstreamBadResponse.__name__  # the call failed, as the metrics and its span say
    try:
        data = answer_data(resp)
        if error_answer(data) is not None:
            kind = "error_answer"
            head = _scrubbing(resp)(resp.text)[:300]
            raise ValueError(f"an error answered with status {resp.status_code}: {head}")
        text = content_text(data["choices"][0]["message"].get("content"))
    except (ValueError, LookupError, TypeError, AttributeError) as exc:
        note_bad_answer(job.provider.name, "error_answer" if isinstance(exc, ErrorEvent) else kind)
        raise
    note_usage(job.fast_model, data.get("usage"))
    return resp.status_code, text


def retry_after(resp: Any) -> float | None:
    """The seconds an error answer asks the caller to wait before calling again: its
    ``retry-after-ms`` (OpenAI's), else its ``retry-after`` in seconds or as an HTTP date;
    None when it says nothing usable."""
    headers = resp.headers
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if not value:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            seconds = _seconds_until(value) if scale == 1.0 else math.nan
        if math.isfinite(seconds):
            return max(seconds, 0.0)
    return None


def _seconds_until(http_date: str) -> float:
    """Seconds from now to ``http_date`` (NaN when it does not parse)."""
    try:
        when = parsedate_to_datetime(http_date)
    except (TypeError, ValueError, IndexError):
        return math.nan
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - datetime.now(UTC)).total_seconds()
