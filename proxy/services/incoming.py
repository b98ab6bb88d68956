"""What a chat request brings, made ready before its step takes a pooled connection.

The part of reconciling a resent history (``history.reconcile_and_load``) that reads no
store: the system prefix, whether the history extends the head this replica last left for
the session (the guess), and the ingest of the messages after that head (redaction, the
lossless compaction against earlier results, truncation: ``cascade.pipeline.ingest``), in
the stored form the step's first statement writes. ``read`` does it all before
``Turn.connect``, so a connection is held around the statement and not through the
request's CPU work: in a burst, requests queue for the pool's few connections, and each
one's ingest would otherwise lengthen every later request's wait (issue 24).

A session this replica has never seen is guessed new (nothing stored) only when its
history is short (``GUESS_NEW_SESSION_MAX``); a longer one is ingested once the plan says
where the store ends, with the connection held (``history.py``): docs/perf.md, issue 24,
says why it is not ingested speculatively.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from proxy.cascade.observations import is_observation, observation_id
from proxy.cascade.pipeline import EarlierResults, ingest
from proxy.cascade.summary import system_prefix_count
from proxy.cascade.tokens import MemoCounter
from proxy.cascade.types import MESSAGE_APPENDED, TRUNCATED, Event, Message
from proxy.config_context import ContextConfig
from proxy.history import Append, plan_reconcile
from proxy.services.ingestmemo import IngestMemo
from proxy.store import messages as msgs, raw_outputs

__all__ = ["GUESS_NEW_SESSION_MAX", "Incoming", "Pending", "ingest_from", "read"]


def _handle(messages: Sequence[Message], pos: int, stored: Message, ctx: ContextConfig) -> Any:
    """The row's ``tool_call_id``: a tool result's, or an observation's handle
    (``cascade.observations``), so that its body reads back once it is rewritten."""
    if is_observation(messages, pos, ctx.observations.user_prefixes, latest_too=True):
        return observation_id(stored)
    return messages[pos].get("tool_call_id")


@dataclass(slots=True)
class Pending:
    """The new messages, in stored form, with their spilled outputs and events."""

    new: list[tuple[int, Message]]
    rows: list[msgs.NewMessage]
    raw: list[tuple[str, str, int, bool]]  # the spills as ``raw_outputs.raw_rows`` makes them
    events: list[Event]


def ingest_from(
    messages: Sequence[Message],
    hashes: list[str],
    start: int,
    ctx: ContextConfig,
    count: MemoCounter,
    superseded: int = 0,
    memo: IngestMemo | None = None,
) -> Pending:
    """The messages from ``start`` on, ingested (``memo`` answers a prefix seen before)."""
    out = Pending([], [], [], [])
    spills: list[Any] = []
    earlier = EarlierResults(messages)
    for pos in range(start, len(messages)):
        got = memo.get(hashes[pos], messages[pos], ctx, count) if memo is not None else None
        if got is None:
            got = ingest(messages[pos], ctx, earlier.before(pos), pos)
            if memo is not None:
                memo.put(hashes[pos], messages[pos], ctx, got, count)
        out.new.append((pos, got.message))
        out.rows.append(
            msgs.NewMessage(
                pos=pos,
                hash=hashes[pos],
                role=str(messages[pos].get("role")),
                message=dict(got.message),
                tool_call_id=_handle(messages, pos, got.message, ctx),
                tokens=count.one(got.message),
                redacted=got.redacted > 0,
                verbatim=got.message is messages[pos],
            )
        )
        out.events.extend(e for e in got.events if e.name == TRUNCATED)
        if got.spill is not None:
            spills.append(got.spill)
    out.raw = raw_outputs.raw_rows(spills, ctx.tool_output.raw_cap_bytes)
    if out.rows or superseded:  # a history cut back (a retry, a rollback) stores nothing new
        out.events.append(
            Event(
                MESSAGE_APPENDED,
                {
                    "from_pos": start,
                    "count": len(out.rows),
                    "superseded": superseded,
                },
            )
        )
    return out


GUESS_NEW_SESSION_MAX = 8
"""A session this replica has not seen is guessed empty only when the client sends at most
this many messages (a conversation that is probably new); a longer one would be ingested
for nothing whenever the guess is wrong (a restart, another replica's session)."""


def _plausible(
    guess: tuple[int, str | None] | None, hashes: list[str]
) -> tuple[int, str | None] | None:
    """``guess`` when the incoming history extends that stored head (``plan_reconcile``)."""
    if guess is None:
        return (0, None) if len(hashes) <= GUESS_NEW_SESSION_MAX else None
    length, head_hash = guess
    if plan_reconcile(hashes, stored_len=length, stored_head_hash=head_hash) == Append(length):
        return guess
    return None


@dataclass(frozen=True, slots=True)
class Incoming:
    """A request's history, read before its step connects (``read``)."""

    messages: Sequence[Message]
    hashes: list[str]
    system_count: int
    guessed: tuple[int, str | None] | None  # the stored head it extends, as last left here
    pending: Pending | None  # the messages after ``guessed``, ingested

    @property
    def head_hash(self) -> str | None:
        """The chain hash of the head the request leaves."""
        return self.hashes[-1] if self.hashes else None

    def ingested(
        self,
        start: int,
        ctx: ContextConfig,
        count: MemoCounter,
        superseded: int = 0,
        memo: IngestMemo | None = None,
    ) -> Pending:
        """The messages from ``start`` on, ingested: what ``read`` made when it began there
        and nothing was superseded, else afresh."""
        afresh = superseded or self.guessed is None or self.guessed[0] != start
        if self.pending is None or afresh:
            return ingest_from(self.messages, self.hashes, start, ctx, count, superseded, memo)
        return self.pending


def read(
    messages: Sequence[Message],
    hashes: list[str],
    ctx: ContextConfig,
    count: MemoCounter,
    guess: tuple[int, str | None] | None,
    memo: IngestMemo | None = None,
) -> Incoming:
    """The request's history ready for its first statement; ``guess`` is the stored head
    (length, chain hash) as this replica last left the session, or None."""
    guessed = _plausible(guess, hashes)
    pending = ingest_from(messages, hashes, guessed[0], ctx, count, memo=memo) if guessed else None
    return Incoming(messages, hashes, system_prefix_count(messages), guessed, pending)
