"""The one place the cascade's stages are put in order: ``assemble`` builds the upstream prompt.

``STAGES`` is that order; the config decides which of them run (``Stage.enabled``):

0. observations sent as user messages get the ingest step once they are not the latest;
1. lossless eviction of old tool results (placeholders persist, so the prefix stays stable);
2. ``/compact`` exchanges left out (answered by the proxy, never by the model);
3. the durable summary folded into the first user message;
4. the stored memory facts as a ``<memory>`` block in the first system message (opt-in, per
   turn);
5. retrieval: earlier messages outside the prompt that bear on a new turn, as a
   ``<related_context>`` block on its user message (opt-in, per turn);
6. recitation: the summary's plan appended to the last message (opt-in, per turn);
7. the overflow guard: drop the oldest whole rounds after the summary, then the optional
   blocks (retrieval, plan, memory), or refuse.

A per-turn stage (``Stage.per_turn``) computes its value on a turn's first step and reuses it
on the turn's later steps (``phases.py``): ``plan_step`` plans nothing for it then, and
``assemble`` hands it the kept value and returns what the turn must keep (``Assembled.kept``):
a block the overflow guard left out is kept as none, so the turn's prompt stays put.

Each stage reports what the shell must persist in its own input's indices (``Marks``);
``assemble`` carries every message's window index through the stages, so the shell gets
window indices without comparing messages. A stage that needs I/O plans it first
(``plan_step``, ``step.py``). Ingestion-time truncation and redaction run once per new
message (``ingest``), not per step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from proxy.cascade.commands import (
    COMMAND_REPLY_PREFIX,
    COMMANDS,
    COMPACT_COMMAND,
    compact_reply_text,
    drop_commands,
    is_compact_command,
)
from proxy.cascade.eviction import EVICTION, is_placeholder
from proxy.cascade.handles import holds_handle
from proxy.cascade.memory_block import MEMORY
from proxy.cascade.observations import OBSERVATIONS
from proxy.cascade.overflow import OVERFLOW
from proxy.cascade.phases import turn_answers, turn_start
from proxy.cascade.pins import pin
from proxy.cascade.pointers import EarlierLines, line_set_of, lines_of
from proxy.cascade.recitation import RECITATION
from proxy.cascade.redaction import patterns_of, redact
from proxy.cascade.retrieval import RETRIEVAL_STAGE
from proxy.cascade.step import Stage, StepInput
from proxy.cascade.summary import SUMMARY
from proxy.cascade.text import content_text
from proxy.cascade.truncation import Ingested, truncate_tool_result
from proxy.cascade.types import READ_TOOL_OUTPUT, Event, Message
from proxy.config_context import ContextConfig

__all__ = [
    "STAGES",
    "Stage",
    "StepInput",
    "Assembled",
    "assemble",
    "plan_step",
    "stages_for",
    "turn_start",
    "ingest",
    "earlier_results",
    "EarlierResults",
    "READ_TOOL_SCHEMA",
    "COMPACT_COMMAND",
    "COMMAND_REPLY_PREFIX",
    "is_compact_command",
    "compact_reply_text",
    "drop_commands",
]

STAGES: tuple[Stage, ...] = (
    OBSERVATIONS,
    EVICTION,
    COMMANDS,
    SUMMARY,
    MEMORY,
    RETRIEVAL_STAGE,
    RECITATION,
    OVERFLOW,
)
"""The stages, in the order they run (per-turn ones are flagged on their entry)."""

READ_TOOL_SCHEMA = {
    "type": "function",
    "function": {
        "name": READ_TOOL_OUTPUT,
        "description": (
            "Read back the full text of an earlier tool result that was truncated or cleared "
            "from the context. Page with offset/limit (characters), or search it with grep."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "id": {"type": "string", "description": "the tool_call_id named in the marker"},
                "offset": {"type": "integer", "minimum": 0},
                "limit": {"type": "integer", "minimum": 1},
                "grep": {
                    "type": "string",
                    "description": "text to find, any case (a|b: either); returns lines",
                },
            },
            "required": ["id"],
        },
    },
}


@dataclass(frozen=True, slots=True)
class Assembled:
    """The prompt to send, and what the shell persists for it, in window indices."""

    messages: tuple[Message, ...]
    window: tuple[Message, ...]  # the window with this step's evictions applied
    events: tuple[Event, ...]
    evicted: tuple[int, ...]
    trimmed: tuple[int, ...]
    offer_read_tool: bool
    tokens: int
    injected: tuple[int, ...] = ()  # prompt indices of blocks that are no window row
    kept: Mapping[str, Any] | None = None  # the turn's per-turn values, if this step added one

    @property
    def cleared(self) -> tuple[int, ...]:
        """The ``evicted`` indices eviction cleared (a placeholder now): the others are
        observations the observations stage cut, stored beside the row like an eviction but
        reclaimed as truncation (their ``context.truncated`` event), not counted twice."""
        return tuple(i for i in self.evicted if is_placeholder(self.window[i]))


EARLIER_RESULTS = 64
"""How many of the latest earlier tool results a new one's lines are compared with: bounds
the work per request (the index is built only when a new multi-line result arrives)."""


def earlier_results(messages: Sequence[Message], pos: int) -> Callable[[], EarlierLines]:
    """The tool results before ``pos`` in the client's history, as ``EarlierLines`` on demand.

    The client resends the whole history, so the originals are at hand without a fetch; a
    pointer names only a handle and line numbers, so a redacted earlier result leaks nothing
    (the new result itself is never compacted when redacted). Each result is named by
    ``pins.pin`` (its id and position), not its id alone: an id can name more than one
    result (``call_0`` every turn), now or once the pointer is frozen, and
    ``read_tool_output`` reads an id's newest result."""

    def build() -> EarlierLines:
        found = [
            (_pinned(m, i), content_text(m.get("content")))
            for i, m in enumerate(messages[:pos])
            if m.get("role") == "tool"
        ]
        return EarlierLines.build(found[-EARLIER_RESULTS:])

    return build


def _pinned(msg: Message, pos: int) -> str:
    """The pointer handle of the tool result ``msg`` at ``pos`` ("" without an id)."""
    cid = str(msg.get("tool_call_id") or "")
    return pin(cid, pos) if cid else ""


class EarlierResults:
    """``earlier_results`` for each new message of one request, positions in increasing order.

    A long first request brings many tool results at once; splitting the whole history again
    for each of them is quadratic in the history's size, and so is indexing the latest
    ``EARLIER_RESULTS`` again for each new one once the history holds more. Here the latest
    ``EARLIER_RESULTS`` results slide along as the positions grow, and each is split at most
    once (when a build first needs it; one that slides out unneeded never is), so a request
    costs one split per result whatever its size. Each build equals ``earlier_results``'s.
    """

    def __init__(self, messages: Sequence[Message]) -> None:
        self._messages = messages
        self._scanned = 0
        # The latest results: [pinned handle, text, (lines, line set) once indexed, or None].
        self._window: deque[list[Any]] = deque(maxlen=EARLIER_RESULTS)

    def before(self, pos: int) -> Callable[[], EarlierLines]:
        """The tool results before ``pos``, as ``EarlierLines`` on demand."""

        def build() -> EarlierLines:
            for i in range(self._scanned, pos):
                m = self._messages[i]
                if m.get("role") == "tool":
                    text = content_text(m.get("content"))
                    self._window.append([_pinned(m, i), text, None])
            self._scanned = max(self._scanned, pos)
            kept = [e for e in self._window if e[0] and e[1]]
            for entry in kept:
                if entry[2] is None:
                    entry[2] = (lines_of(entry[1]), line_set_of(entry[1]))
            return EarlierLines(
                tuple(entry[0] for entry in kept),
                tuple(entry[2][0] for entry in kept),
                tuple(entry[2][1] for entry in kept),
            )

        return build


def ingest(
    msg: Message,
    ctx: ContextConfig,
    earlier: Callable[[], EarlierLines] = EarlierLines,
    pos: int | None = None,
) -> Ingested:
    """Redact, compact losslessly and truncate one newly arrived message (tool results only);
    ``pos``, its position in the history, pins the handle its marker names (``pins.py``)."""
    return truncate_tool_result(
        msg, cfg=ctx.tool_output, redaction=ctx.redaction, earlier=earlier, pos=pos
    )


def stages_for(ctx: ContextConfig, stages: Sequence[Stage] = STAGES) -> tuple[Stage, ...]:
    """The stages this config runs, in order."""
    return tuple(s for s in stages if s.enabled(ctx))


def plan_step(inp: StepInput, stages: Sequence[Stage] | None = None) -> dict[str, Any]:
    """What the enabled stages need from the outside world, by stage name (pure); a per-turn
    stage needs nothing on a step whose turn has its value already."""
    needs: dict[str, Any] = {}
    for stage in stages_for(inp.ctx, STAGES if stages is None else stages):
        if stage.per_turn and stage.name in inp.kept:
            continue
        if stage.plan is not None and (need := stage.plan(inp)) is not None:
            needs[stage.name] = need
    return needs


def _secrets_hidden(inp: StepInput) -> StepInput:
    """``inp`` with the proxy's own texts redacted with the agent's patterns in force: the
    summary (and so its plan) and the stages' answers (the ``<memory>`` block, the
    ``<related_context>`` block). Each was made from what the store holds: a summary or a
    fact stored before a pattern was added, a turn's block kept from before a reload, a
    folded reply the model wrote a key in. The same text and patterns give the same bytes,
    so the prompt's prefix stays put from step to step."""
    patterns = patterns_of(inp.ctx.redaction)
    if not patterns:
        return inp
    summary = None if inp.summary is None else redact(inp.summary, patterns)[0]
    answers = {name: _hidden(answer, patterns) for name, answer in inp.answers.items()}
    return replace(inp, summary=summary, answers=answers)


def _hidden(answer: Any, patterns: Sequence[Any]) -> Any:
    """A stage's answer redacted: a text, or the ``block`` of a JSON answer."""
    if isinstance(answer, str):
        return redact(answer, patterns)[0]
    if isinstance(answer, Mapping) and isinstance(answer.get("block"), str):
        return {**answer, "block": redact(answer["block"], patterns)[0]}
    return answer


def assemble(
    inp: StepInput, stages: Sequence[Stage] | None = None, *, answers: dict[str, Any] | None = None
) -> Assembled:
    """Run the enabled stages over the window, in order, and return the prompt to send.

    ``origin`` holds, for each message on its way through, the window index it came from
    (None: a block a stage injected); each stage's marks are mapped through it. Per-turn
    stages read the value kept for the turn, or the one computed now (``phases``).
    """
    if answers is not None:
        inp = replace(inp, answers=answers)
    enabled = stages_for(inp.ctx, STAGES if stages is None else stages)
    turn, kept = turn_answers(enabled, inp, inp.answers)
    if turn != inp.answers:
        inp = replace(inp, answers=turn)
    inp = _secrets_hidden(inp)
    messages = inp.window
    window = list(inp.window)
    origin: tuple[int | None, ...] = tuple(range(len(messages)))
    events: list[Event] = []
    evicted: list[int] = []
    trimmed: list[int] = []
    for stage in enabled:
        result = stage.run(messages, inp)
        marks = result.marks
        events.extend(result.events)
        source = marks.source
        if source is None and len(result.messages) != len(messages):
            raise ValueError(f"stage {stage.name!r} changed the message count without marks")
        out_of = {s: j for j, s in enumerate(source) if s is not None} if source else None
        for i in marks.evicted:
            w = origin[i]
            if w is not None:
                evicted.append(w)
                window[w] = result.messages[i if out_of is None else out_of[i]]
        trimmed.extend(w for i in marks.trimmed if (w := origin[i]) is not None)
        if marks.dropped_blocks:  # the turn's later steps leave them out too
            kept = {**(inp.kept if kept is None else kept), **dict.fromkeys(marks.dropped_blocks)}
        if source is not None:
            origin = tuple(None if s is None else origin[s] for s in source)
        messages = result.messages
    offer = inp.ctx.tool_output.persist_raw and (
        _folded(inp.summary) or holds_handle(messages, inp.ctx.observations.user_prefixes)
    )
    return Assembled(
        messages=messages,
        window=tuple(window),
        events=tuple(events),
        evicted=tuple(sorted(evicted)),
        trimmed=tuple(sorted(trimmed)),
        offer_read_tool=offer,
        tokens=inp.count(messages),
        injected=tuple(j for j, w in enumerate(origin) if w is None),
        kept=kept,
    )


def _folded(summary: str | None) -> bool:
    """Whether the prompt carries a summary, which keeps ``read_tool_output`` offered as a
    handle does: the span it folded held the results the tool reads, and a tool that left
    with the span's last handle and came back with the next cut result would change the
    tools, the head of the provider's cached prefix, twice."""
    return bool(summary and summary.strip())
