"""A per-process memo of each session's last resent history and its hash chain.

Clients resend the whole history on every request, so hashing it is O(history) CPU per
request: about 10 ms for 5,000 messages. The previous request's parsed messages are kept
per session; the longest prefix that compares equal (a C-speed list comparison) reuses
its hashes and only the rest is hashed. Equal dicts serialise to equal canonical JSON, so
the hashes are exactly those ``chain`` would compute. It is only a cache: a miss (another
replica served the last request, or the entry was evicted) costs the full hash, nothing else.

It also remembers each session's stored head (length, chain hash) as this replica last left
it: the guess that lets a request store its new messages in the statement that takes the
session lock (``store.messages.begin_step``). A wrong guess costs a second statement.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from proxy.history import chain

__all__ = ["ChainCache"]


class ChainCache:
    def __init__(self, *, max_messages: int = 200_000, max_heads: int = 100_000) -> None:
        self._entries: OrderedDict[tuple[str, str], tuple[list[Any], list[str]]] = OrderedDict()
        self._size = 0
        self._max = max_messages
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
        entry = self._entries.pop(key, None)
        same = 0
        if entry is not None:
            self._size -= len(entry[0])
            old, hashes = entry
            same = min(len(old), len(msgs))
            if msgs[:same] != old[:same]:
                same = next(i for i in range(same) if msgs[i] != old[i])
            seed = hashes[same - 1] if same else ""
            result = hashes[:same] + chain(msgs[same:], seed)
        else:
            result = chain(msgs)
        if len(msgs) <= self._max:
            self._entries[key] = (msgs, result)
            self._size += len(msgs)
            while self._size > self._max:
                _, (dropped, _) = self._entries.popitem(last=False)
                self._size -= len(dropped)
        return result
