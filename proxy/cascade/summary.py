"""Durable summarisation (DESIGN §5 stage 2): plan a span, prompt the fast model, fold the result.

The shell keeps a session's messages at absolute positions ``0..N-1``. A summary row has a
``boundary``: the position of the first message *not* folded into it. The prompt the shell sends
upstream is the leading system/developer messages (kept verbatim), then the summary folded into
the first user message, then ``messages[boundary:]``. This module is pure: the shell calls the
fast model with :func:`build_prompt`, normalises its answer with
:func:`proxy.cascade.briefing.parse_briefing`, stores the row, and later rebuilds the prompt
with :func:`fold_summary`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from proxy.cascade.briefing import SECTIONS
from proxy.cascade.observations import is_observation
from proxy.cascade.rounds import call_functions
from proxy.cascade.step import Stage, StepInput
from proxy.cascade.text import content_text, quote_closing_tag
from proxy.cascade.types import (
    LEADING_ROLES,
    CompactionPlan,
    Marks,
    Message,
    StageResult,
    TokenCounter,
)

__all__ = [
    "MIN_SPAN_RATIO",
    "build_prompt",
    "build_reflect_prompt",
    "fold_summary",
    "needs_reflect",
    "plan_compaction",
    "system_prefix_count",
]

_NONE = "(none)"
_TOOL_CAPS = (8000, 4000, 2000, 1000)
_ALL_CAP = 1500
_PREVIOUS_CAPS = (8000, 2000, 500)
MIN_SPAN_RATIO = 0.5
"""A compaction must fold at least half as much text as it keeps (see :func:`plan_compaction`)."""


def system_prefix_count(messages: Sequence[Message]) -> int:
    """Number of leading system/developer messages: the part of a prompt always kept verbatim."""
    n = 0
    while n < len(messages) and messages[n].get("role") in LEADING_ROLES:
        n += 1
    return n


# --- planning -------------------------------------------------------------------------------


def _unsafe_cuts(window: Sequence[Message], prefixes: Sequence[str] = ()) -> list[bool]:
    """``unsafe[j]``: cutting before ``window[j]`` would split a tool round, a legacy
    ``function_call`` and its ``function`` result, or a text-action agent's thought and the
    observation answering it (``prefixes``, ``observations``), or fold a last message that is
    not an answer: the request's own, which the model is about to answer (j in 0..len)."""
    n = len(window)
    unsafe = [False] * (n + 1)
    diff = [0] * (n + 2)
    issued: dict[str, int] = {}
    for i, m in enumerate(window):
        role = m.get("role")
        # a legacy result, or an observation: its call or thought sits right before it
        if role == "function" or (
            role == "user" and is_observation(window, i, prefixes, latest_too=True)
        ):
            unsafe[i] = True
        elif role == "tool":
            unsafe[i] = True
            a = issued.get(str(m.get("tool_call_id")))
            if a is not None:  # cuts a+1..i separate the call from this result
                diff[a + 1] += 1
                diff[i + 1] -= 1
        elif role == "assistant" and (m.get("tool_calls") or m.get("function_call")):
            unsafe[i + 1] = True  # results (maybe still pending) must follow directly
            for call in m.get("tool_calls") or ():
                issued[str(call.get("id"))] = i
    if n and window[-1].get("role") != "assistant":
        unsafe[n] = True  # the last message awaits its answer: the model must see it
    running = 0
    for j in range(n + 1):
        running += diff[j]
        unsafe[j] = unsafe[j] or running > 0
    return unsafe


def _size(m: Message) -> int:
    """Characters a message puts in a prompt: content plus its calls' names and arguments
    (tool calls and a legacy ``function_call``)."""
    args = sum(
        len(str(fn.get("name") or "")) + len(str(fn.get("arguments") or ""))
        for fn in call_functions(m)
    )
    return len(content_text(m.get("content"), media=True)) + args


def plan_compaction(
    messages: Sequence[Message],
    *,
    offset: int,
    boundary: int,
    keep_recent: int,
    previous: str | None,
    system_count: int,
    min_span_ratio: float = MIN_SPAN_RATIO,
    observation_prefixes: Sequence[str] = (),
) -> CompactionPlan | None:
    """Choose the span to fold: from the boundary up to the last ``keep_recent`` messages.

    ``messages`` is a contiguous window whose first element sits at absolute position
    ``offset``. The end moves *earlier* until the cut splits no tool round: the kept tail never
    starts with a tool (or legacy ``function``) result or a tool observation (a user message
    starting with one of ``observation_prefixes`` after an assistant message), and no
    assistant ``tool_calls`` (or ``function_call``) message is folded while its results
    (even pending ones, when it is last) stay behind, and a last message that is not the
    assistant's (it awaits its answer) is kept even with ``keep_recent`` 0. ``None`` when
    nothing can be folded, or when the span is smaller (in characters) than
    ``min_span_ratio`` times the kept tail: a new summary rewrites the first user message, so
    every compaction re-bills the whole prompt after it as a cache miss, and folding one small
    round while a large tail stays behind pays that miss for almost no room (and, once the
    tail alone sits above the soft threshold, would repeat on every step). Raises
    ``ValueError`` if the window starts after the fold start, because folding from there
    would silently lose the messages in between.
    """
    start = max(boundary, system_count)
    total = offset + len(messages)
    if start >= total:
        return None
    if start < offset:
        raise ValueError(f"window starts at {offset} but the span to fold starts at {start}")
    end = total - max(keep_recent, 0)
    unsafe = _unsafe_cuts(messages, observation_prefixes)
    while end > start and unsafe[end - offset]:
        end -= 1
    if end <= start:
        return None
    span = tuple(messages[start - offset : end - offset])
    tail = messages[end - offset :]
    if sum(map(_size, span)) < min_span_ratio * sum(map(_size, tail)):
        return None
    return CompactionPlan(start=start, end=end, span=span, previous=previous)


# --- prompting ------------------------------------------------------------------------------

_SYSTEM_PROMPT = """\
You maintain the working memory of a long-running agent session. Merge the previous summary \
(if any) with the new part of the conversation into one updated briefing that lets the agent \
continue the work without the original messages.

Output exactly these five sections, in this order, each introduced by this exact markdown \
heading on its own line, and nothing before or after them:
{headings}

Rules:
- Quote identifiers verbatim in backticks: file paths, ids, function and class names, \
commands, numbers, versions, URLs and error messages. Never paraphrase them.
- Merge, do not append: keep everything from the previous summary that still matters, update \
what changed, drop what is finished or no longer true.
- Drop chit-chat, pleasantries and reasoning that led nowhere.
- Under ## Next Step give the single most immediate action.
- Write "(none)" under a section that has nothing to say.
- Keep the whole briefing under about {target} tokens (roughly {words} words)."""

_REFLECT_PROMPT = """\
The briefing below, which is the working memory of a long-running agent session, has grown \
too long. Condense it to under about {target} tokens (roughly {words} words).

Keep exactly the five sections, in order, with these exact headings:
{headings}

Keep every identifier quoted in backticks (file paths, ids, commands, numbers, URLs, error \
messages) that still matters for the remaining work, verbatim. Merge duplicates, drop \
finished details and anything superseded. Output only the briefing."""


def _clip(text: str, cap: int | None) -> str:
    """Head (70 %) and tail (30 %) of ``text`` with a note naming what was left out."""
    if cap is None or len(text) <= cap:
        return text
    head = cap * 7 // 10
    tail = cap - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[... {omitted} characters omitted ...]\n{text[len(text) - tail :]}"


_QUOTED = {
    "conversation": "</conversation-text>",
    "previous_summary": "</previous-summary>",
    "summary": "</summary-text>",
}
"""A block's closing tag as the text in it (a message of the span, the previous summary) reads
it, so the block ends where the proxy says: nothing in it reads as the proxy's own words."""


def _quoted(text: str, block: str) -> str:
    return quote_closing_tag(text, block, _QUOTED[block])


def _render(m: Message, *, tool_cap: int | None, cap: int | None) -> str:
    return _quoted(_rendered(m, tool_cap=tool_cap, cap=cap), "conversation")


def _rendered(m: Message, *, tool_cap: int | None, cap: int | None) -> str:
    role = str(m.get("role") or "unknown")
    body = content_text(m.get("content"), media=True)
    if role == "tool":
        name = f" {m['name']}" if m.get("name") else ""
        caps = [c for c in (tool_cap, cap) if c is not None]
        clipped = _clip(body, min(caps) if caps else None)
        return f"[tool result{name} id={m.get('tool_call_id')}]\n{clipped}"
    if role == "function":  # a legacy result: its function's name, as a tool result's tool
        name = f" {m['name']}" if m.get("name") else ""
        return f"[function result{name}]\n{_clip(body, cap)}"
    lines = [f"[{role}]"]
    if body:
        lines.append(_clip(body, cap))
    for call in m.get("tool_calls") or ():
        fn = call.get("function") or {}
        args = _clip(str(fn.get("arguments") or ""), cap)
        lines.append(f"-> tool call {fn.get('name')}({args}) id={call.get('id')}")
    legacy = m.get("function_call")
    if isinstance(legacy, Mapping):  # the deprecated ``functions`` API's one call, no id
        args = _clip(str(legacy.get("arguments") or ""), cap)
        lines.append(f"-> function call {legacy.get('name')}({args})")
    return "\n".join(lines)


def _prompt(system: str, previous: str, blocks: Sequence[str], dropped: int) -> list[Message]:
    parts = list(blocks)
    if dropped:
        parts.insert(0, f"[... {dropped} earlier messages omitted to fit the summariser ...]")
    conversation = "\n\n".join(parts)
    user = (
        f"<previous_summary>\n{previous or _NONE}\n</previous_summary>\n\n"
        f"<conversation>\n{conversation}\n</conversation>\n\n"
        "Write the updated briefing now."
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _headings() -> str:
    return "\n".join(SECTIONS)


def build_prompt(
    plan: CompactionPlan,
    *,
    max_input_tokens: int,
    count: TokenCounter,
    target_tokens: int = 2000,
) -> list[Message]:
    """Messages asking the fast model to merge ``plan.previous`` with ``plan.span``.

    The result fits ``max_input_tokens`` per ``count`` whenever that is possible at all, and
    this never raises: long tool results are cut to head+tail first (they are the bulk of an
    agent transcript and the least quotable), then every message, then the oldest messages are
    dropped with a note, then the previous summary is clipped, and last the whole user text.
    """
    system = _SYSTEM_PROMPT.format(
        headings=_headings(), target=target_tokens, words=target_tokens * 3 // 4
    )
    previous = _quoted(plan.previous or "", "previous_summary")

    def fits(msgs: list[Message]) -> bool:
        return count(msgs) <= max_input_tokens

    for tool_cap in (None, *_TOOL_CAPS):
        blocks = [_render(m, tool_cap=tool_cap, cap=None) for m in plan.span]
        candidate = _prompt(system, previous, blocks, 0)
        if fits(candidate):
            return candidate
    blocks = [_render(m, tool_cap=_TOOL_CAPS[-1], cap=_ALL_CAP) for m in plan.span]
    if fits(candidate := _prompt(system, previous, blocks, 0)):
        return candidate
    lo, hi = 0, len(blocks)  # binary search: fewest oldest blocks to drop
    for prev_cap in (None, *_PREVIOUS_CAPS):
        prev = _clip(previous, prev_cap)
        if fits(_prompt(system, prev, [], len(blocks))):
            while lo < hi:
                mid = (lo + hi) // 2
                if fits(_prompt(system, prev, blocks[mid:], mid)):
                    hi = mid
                else:
                    lo = mid + 1
            return _prompt(system, prev, blocks[lo:], lo)
    return _hard_cut(system, _prompt(system, _clip(previous, 500), [], len(blocks)), fits)


def _hard_cut(
    system: str, candidate: list[Message], fits: Callable[[list[Message]], bool]
) -> list[Message]:
    text = str(candidate[1]["content"])
    while text and not fits(candidate):
        text = text[: len(text) // 2]
        candidate = [candidate[0], {"role": "user", "content": text}]
    return candidate


def build_reflect_prompt(summary: str, *, target_tokens: int) -> list[Message]:
    """Messages asking the fast model to condense an over-long briefing (the reflect pass)."""
    system = _REFLECT_PROMPT.format(
        headings=_headings(), target=target_tokens, words=target_tokens * 3 // 4
    )
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": f"<summary>\n{_quoted(summary, 'summary')}\n</summary>"},
    ]


def needs_reflect(summary: str, *, count: TokenCounter, reflect_tokens: int) -> bool:
    """True when the briefing alone is over ``reflect_tokens`` and should be condensed."""
    return count([{"role": "user", "content": summary}]) > reflect_tokens


# --- folding --------------------------------------------------------------------------------

_OPEN, _CLOSE = "<conversation_summary>\n", "\n</conversation_summary>"
_QUOTED_CLOSE = "</conversation-summary>"
"""What a ``</conversation_summary>`` the summary quotes (a task about this proxy, a user's
text it folded), in any spelling a model reads as one, reads as in the block, so the block
ends where the proxy says, as recitation quotes its ``</plan>``."""


def _with_block(m: Message, block: str) -> Message:
    content = m.get("content")
    if isinstance(content, list):
        return {**m, "content": [{"type": "text", "text": block}, *content]}
    rest = content_text(content, media=True)
    return {**m, "content": f"{block}\n\n{rest}" if rest else block}


def fold_summary(
    messages: Sequence[Message], *, summary: str | None, system_count: int
) -> tuple[Message, ...]:
    """Put the summary into the first user message after the leading system messages.

    Never adds a system message (the leading ones are kept byte for byte, so the cached
    prefix survives and strict providers see one system block). When the first non-system
    message is not a user message, a user message carrying only the summary is inserted
    there; user/assistant alternation stays valid. No summary leaves the messages unchanged.
    A closing tag the summary holds is quoted (``_QUOTED_CLOSE``). The messages are the
    client's (the proxy folds its stored rows, never a prompt it built), so a
    ``<conversation_summary>`` block one already starts with is the client's text (its own
    compaction, a Cascade in front of this one) and is kept after the proxy's block.
    """
    if summary is None or not summary.strip():
        return tuple(messages)
    n = min(max(system_count, 0), len(messages))
    head, rest = tuple(messages[:n]), tuple(messages[n:])
    inner = quote_closing_tag(summary.strip(), "conversation_summary", _QUOTED_CLOSE)
    block = f"{_OPEN}{inner}{_CLOSE}"
    if rest and rest[0].get("role") == "user":
        return (*head, _with_block(rest[0], block), *rest[1:])
    return (*head, {"role": "user", "content": block}, *rest)


def with_summary(messages: tuple[Message, ...], step: StepInput) -> StageResult:
    """The stage: fold the step's summary in (``fold_summary``); an inserted user message
    carrying it is a block of the prompt, not a row of the window."""
    folded = fold_summary(messages, summary=step.summary, system_count=step.system_count)
    if len(folded) == len(messages):
        return StageResult(folded)
    n = min(max(step.system_count, 0), len(messages))
    return StageResult(folded, marks=Marks(source=(*range(n), None, *range(n, len(messages)))))


SUMMARY = Stage("summary", with_summary)
