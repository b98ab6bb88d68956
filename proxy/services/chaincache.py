"""A per-process memo of each session's last resent history and its hash chain.

Clients resend the whole history on every request, so hashing it is O(history) CPU per
request, milliseconds for a long session. The previous request's parsed messages are kept
per session; the longest prefix that compares equal (a C-speed list comparison) reuses
its hashes and only the rest is hashed. Equal dicts serialise to equal canonical JSON, so
the hashes are exactly those ``chain`` would compute. It is only a cache: a miss (another
replica served the last request, or the entry was evicted) costs the full hash, nothing else.

It is bounded by messages and by the characters of their content, whichever is reached
first (the least recently used sessions go): the lists it keeps are the parsed requests
themselves, and a message count alone let a few hundred agent sessions with large tool
results hold hundreds of megabytes. A message holding more than strings is weighed by
all it holds (``_weight``).

It also remembers each session's stored head (length, chain hash) as this replica last left
it: the guess that lets a request store its new messages in the statement that takes the
session's lease (``store.steps.begin_step``). A wrong guess costs a second statement.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from proxy.history import chain
from proxy.jsonio import held

__all__ = ["ChainCache"]


def _weight(msg: Any) -> int:
    """About what a parsed message holds: its strings' characters and each array and object
    in it (``jsonio.held``), plus a fixed overhead."""
    return 100 + held(msg)


class ChainCache:
    def __init__(
        self, *, max_messages: int = 200_000, max_chars: int = 128_000_000, max_heads: int = 100_000
    ) -> None:
        # per session: the messages, their chain hashes, and their running weight
        self._entries: OrderedDict[tuple[str, str], tuple[list[Any], list[str], list[int]]] = (
            OrderedDict()
        )
        self._size = 0
        self._chars = 0
        self._max = max_messages
        self._max_chars = max_chars
        self._heads: OrderedDict[tuple[str, str], tuple[int, str | None]] = OrderedDict()
        self._max_heads = max_heads

    def head(self, key: tuple[str, str]) -> tuple[int, str | None] | None:
        """The stored head this replica last left for the session, if it remembers one."""
        return self._heads.get(key)

    def set_head(self, key: tuple[str, str], head: tuple[int, str | None] | None) -> None:
        """Remember (or, with None, forget) the session's stored head."""
        self._heads.pop(key, None)
        if head is not None:
            self._heads[key] = head
            if len(self._heads) > self._max_heads:
                self._heads.popitem(last=False)

    def chain(self, key: tuple[str, str], messages: Sequence[Any]) -> list[str]:
        """Chain hashes of ``messages``, reusing the session's previous ones where possible."""
        msgs = list(messages)
        entry = self._pop(key)
        same = 0
        if entry is not None:
            old, hashes, weights = entry
            same = min(len(old), len(msgs))
            # The common request extends the last one: the whole previous list is the prefix.
            # One slice is compared and the kept hashes are copied once; each copy touches
            # every message or hash object (a reference count), which a long history feels.
            if (same == len(old) and old != msgs[:same]) or (
                same < len(old) and msgs[:same] != old[:same]
            ):
                same = next(i for i in range(same) if msgs[i] != old[i])
            seed = hashes[same - 1] if same else ""
            fresh = chain(msgs[same:], seed)
            result = hashes + fresh if same == len(hashes) else hashes[:same] + fresh
            running = weights if same == len(weights) else weights[:same]
        else:
            result = chain(msgs)
            running = []
        total = running[-1] if running else 0
        for msg in msgs[same:]:
            total += _weight(msg)
            running.append(total)
        if len(msgs) <= self._max and total <= self._max_chars:
            self._entries[key] = (msgs, result, running)
            self._size += len(msgs)
            self._chars += total
            while self._size > self._max or self._chars > self._max_chars:
                self._pop(next(iter(self._entries)))
        return result

    def _pop(self, key: tuple[str, str]) -> tuple[list[Any], list[str], list[int]] | None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._size -= len(entry[0])
            self._chars -= entry[2][-1] if entry[2] else 0
        return entry
