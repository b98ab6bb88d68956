"""One replica's queue per session, in front of the session's lease.

A session's requests are serialised by a lease on its row (migration 0016; the step's first
statement, ``cascade_begin_step_v6``, takes it, ``record_step`` releases it), which every
replica names by its own owner id (``services/leases.py``). Within a replica the requests on
one session wait here, first come first served, holding nothing, and only the request at
the head of each session's queue goes to the database for the lease: without the queue, a
client that sends 20 requests on one session at once would have 20 requests polling one
lease in no order (DESIGN §4: different sessions never wait on each other). The lease
serialises a session across replicas and against the session API's operations, and the
queue of waiters on the session row (migration 0022) orders the heads of several replicas'
queues, so this replica's back-to-back requests do not starve a waiter on another.

A request whose client disconnects while it waits here leaves the queue and is never sent
(``acquire``; ``client_watch.py``): a client that retries on a timeout would otherwise pile
up provider calls, each billed, behind a busy session. A session operation whose client
leaves does the same and changes nothing (``turn``).

The session API's reset, delete, branch and compact take their place in the same queue
(``turn``) before they wait for the lease, so a request that arrives here while one of them
waits goes after it. Polling the lease alone, an operation waited until the session fell
idle: a busy agent's next request takes the lease back the moment the last one frees it.

A derived session (``auto-…``, no id from the client) is a guess, and a guess never makes a
request wait for another conversation: ``lane`` sends a request whose derived session is
busy here to a sibling session (``auto-….2``, ``auto-….3``, …) that no request holds
(README, Decisions). It waits only behind its own conversation's previous request: one
whose history goes past what that request sent (its next turn, which a client sends the
moment the previous answer arrives, while that turn still stores the reply).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence

from proxy.requestlog import note_session_wait, session_wait
from proxy.services.client_watch import WAITING, ClientWatch, watching

__all__ = ["SessionLocks", "lane_id"]

Key = tuple[str, str]
Head = tuple[int, "str | None"]
_MAX_LANES = 4096  # a bound on the scan, far above any replica's concurrency


def lane_id(session_id: str, lane: int) -> str:
    """The id of a derived session's lane: the session itself for lane 1, else ``id.N``."""
    return session_id if lane == 1 else f"{session_id}.{lane}"


class SessionLocks:
    def __init__(self) -> None:
        self._locks: dict[Key, tuple[asyncio.Lock, int]] = {}  # lock, requests holding or waiting
        self._sent: dict[Key, Head] = {}  # the history its holder sent, while a key is held

    async def acquire(
        self,
        key: Key,
        client: ClientWatch | None = None,
        why: str = WAITING,
        sent: Head | None = None,
    ) -> None:
        """Take ``key``'s place at the end of its queue and wait for its turn; a request
        whose ``client`` leaves meanwhile leaves the queue (``ClientDisconnected`` naming
        ``why``). A free session is taken at once, its client unwatched
        (``client_watch.py``). The wait is noted on the request's record
        (``requestlog.session_wait``; 0 for a free session). ``sent``: the length and last
        chain hash of the history the request sent, which ``lane`` reads while it holds
        the session."""
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            if not users:  # free: taken at once, its client unwatched
                await lock.acquire()
            else:
                with session_wait(), watching(client, why):
                    await lock.acquire()
        except BaseException:  # cancelled or left while waiting: leave the queue
            self._leave(key)
            raise
        if sent is not None:
            self._sent[key] = sent
        else:
            self._sent.pop(key, None)
        if not users:
            note_session_wait(0.0)

    @contextlib.asynccontextmanager
    async def turn(
        self, key: Key, client: ClientWatch | None = None, why: str = WAITING
    ) -> AsyncIterator[None]:
        """Hold ``key``'s place at the head of its queue for the block (a session API
        operation: the requests before it go first, those after it wait for it); one whose
        ``client`` leaves while it waits leaves the queue (``acquire``; ``why`` names it)."""
        await self.acquire(key, client, why)
        try:
            yield
        finally:
            self.release(key)

    def release(self, key: Key) -> None:
        self._locks[key][0].release()
        self._leave(key)

    def waiting(self, key: Key) -> int:
        """Requests holding or waiting for ``key`` (0 when none: the entry is gone)."""
        entry = self._locks.get(key)
        return entry[1] if entry else 0

    def lane(self, key: Key, hashes: Sequence[str], head: Callable[[Key], Head | None]) -> Key:
        """Where a request on the derived session ``key`` goes: the first lane (``key``
        itself, then ``lane_id(.., 2)``, …) that no request holds or waits for and whose
        stored head, as ``head`` remembers it, is a prefix of this request's history
        (``hashes``, its chain), so a conversation keeps to the lane it started in; else
        the first free lane. The scan stops at the first lane this replica knows nothing
        of. Acquire the result before the next ``await``: until then no other request can
        take it.

        A busy lane is the answer, to wait for, when this history goes past the one its
        holder sent (``acquire``'s ``sent``): that is the same conversation's next turn,
        sent once the holder's answer arrived and while its turn still stores the reply (a
        non-streamed reply is stored after the response is sent, a stream's after its last
        chunk). Another lane would split the conversation over two sessions; the wait is
        the store's. A request that repeats a busy lane's history (a batch, a retry), or
        shares only part of it, never waits. A lane a session operation holds (``turn``: a
        compaction waits there for the request in flight, then gives the turn back) sent no
        history: the stored head judges it, as a free lane's, so the conversation's next
        turn sent meanwhile waits for the operation on its lane rather than splitting.
        """
        tenant, base = key
        first_free: Key | None = None
        for n in range(1, _MAX_LANES + 1):
            candidate = (tenant, lane_id(base, n))
            if self.waiting(candidate):
                sent = self._sent.get(candidate)
                if sent is not None:
                    if sent[0] < len(hashes) and _begins(hashes, sent):
                        return candidate
                    continue
                known = head(candidate)  # held by a session operation: the stored head says
                if known is not None and _begins(hashes, known):
                    return candidate
                continue
            known = head(candidate)
            if known is None:
                return first_free or candidate
            if _begins(hashes, known):
                return candidate
            first_free = first_free or candidate
        return first_free or key

    def _leave(self, key: Key) -> None:
        lock, users = self._locks[key]
        if users > 1:
            self._locks[key] = (lock, users - 1)
        else:
            del self._locks[key]
            self._sent.pop(key, None)


def _begins(hashes: Sequence[str], head: Head) -> bool:
    """Whether a history (its chain ``hashes``) begins with the one ``head`` names."""
    length, digest = head
    return length <= len(hashes) and (length == 0 or hashes[length - 1] == digest)
