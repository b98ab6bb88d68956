"""A per-process memo of what ingesting a message gave, by the chain hash of its prefix.

Ingesting a new message (``cascade.pipeline.ingest``: redaction, the lossless compaction
against the earlier tool results, truncation) and pricing the result depend on the message
itself, on the tool results before it, and on the config. A message's chain hash
(``history.chain``) identifies the canonical prefix it ends, which fixes the earlier results
(role, ``tool_call_id`` and content survive canonicalisation) and the message's position (the
handle its marker names: ``cascade.pins``), so a later ingest of the same prefix can take the
earlier answer: a conversation resumed or forked under a new session id
on this replica, and a request whose guess of the stored head missed (its new messages are
ingested for the guess, then again for the plan).

A hit needs the same config objects (a reload makes new ones) and a message equal to the
one ingested (canonical JSON drops ``None`` fields, which the stored message keeps). When
the ingest left the message as it was, the hit answers with the message now given, so that
a verbatim message stays the client's own object. A token count is kept beside the answer
for the counter that made it.

It is only a cache, bounded by the characters it holds (least recently used first): a miss
costs the ingest it would have cost anyway. Tenants share it: an answer is a function of the
prefix's own content and the config, so a hit hands a client nothing it did not send.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from proxy.cascade.tokens import MemoCounter
from proxy.cascade.truncation import Ingested
from proxy.cascade.types import Message
from proxy.config_context import ContextConfig
from proxy.jsonio import held

__all__ = ["IngestMemo"]


@dataclass(frozen=True, slots=True)
class _Entry:
    ctx: ContextConfig
    given: Message
    got: Ingested
    cost: Callable[[Message], int]
    tokens: int
    weight: int


def _weight(msg: Message, got: Ingested) -> int:
    """About the characters an entry holds beyond what the session's own caches hold: the
    message it was given and the one ingesting gave, when another (``jsonio.held``: a
    message of tiny items weighs what it holds parsed, not its content's characters)."""
    size = 100 + held(got.message)
    if got.message is not msg:
        size += held(msg)
    return size


class IngestMemo:
    def __init__(self, *, max_chars: int = 16_000_000) -> None:
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._chars = 0
        self._max_chars = max_chars

    def get(
        self, chain_hash: str, msg: Message, ctx: ContextConfig, count: MemoCounter
    ) -> Ingested | None:
        """The ingest of ``msg`` ending the prefix ``chain_hash``, if remembered; seeds
        ``count`` with its tokens when the same cost function priced it."""
        entry = self._entries.get(chain_hash)
        if entry is None or entry.ctx is not ctx or entry.given != msg:
            return None
        self._entries.move_to_end(chain_hash)
        got = entry.got
        if got.message is entry.given:
            got = Ingested(msg, got.events, got.spill, got.redacted)
        if count.cost is entry.cost:
            count.seed(got.message, entry.tokens)
        return got

    def put(
        self, chain_hash: str, msg: Message, ctx: ContextConfig, got: Ingested, count: MemoCounter
    ) -> None:
        """Remember ``got``, the ingest of ``msg``, priced by ``count``."""
        old = self._entries.pop(chain_hash, None)
        if old is not None:
            self._chars -= old.weight
        weight = _weight(msg, got)
        if weight > self._max_chars:
            return
        tokens = count.one(got.message)
        self._entries[chain_hash] = _Entry(ctx, msg, got, count.cost, tokens, weight)
        self._chars += weight
        while self._chars > self._max_chars:
            _, dropped = self._entries.popitem(last=False)
            self._chars -= dropped.weight
