"""An app's budget of the bytes that whole provider answers hold in memory.

Each whole answer is capped on its own (``answers.MAX_ANSWER_BYTES``, an embeddings answer's
``MAX_EMBEDDINGS_BYTES``), but many large ones at once could still take all the memory the
process has: parsed, an answer holds several times its bytes. So every whole answer read
(``answers.read_capped``: a chat asked unstreamed, a model list, an embeddings answer, a fast
model's summary asked unstreamed, a provider's error body) takes its bytes from one budget as
they arrive (``Lease.grow``) and gives them back when the proxy is done with the answer: its
object is freed (``Lease.tie``), or at once when no answer comes of them (``with Lease``: a
read that fails, or anything after it before the answer exists). Streams are relayed as
they arrive and hold only an event at a time, so they take nothing (a summary read from a
stream is built in its accumulator, bounded as a relayed reply is, and takes nothing either).

``CASCADE_MAX_HELD_ANSWER_BYTES`` sets the budget (``limit``; 0 turns it off), which the
app's ``Upstream`` keeps; unset, it is ``default_limit``: a quarter of the container's memory,
at most ``DEFAULT_LIMIT``. Over it:

- a call for a whole answer made while the budget is spent is refused before it is sent, a
  503 ``server_busy`` with ``Retry-After`` (the SDKs retry those), so no provider is paid
  for an answer the proxy would not hold;
- an answer arriving when the budget runs out waits up to ``WAIT_SECONDS`` for others to
  give theirs back (its provider held back by TCP meanwhile), then is the same 503, its
  connection closed unread; at once when every byte held would then wait (``take``);
- an answer alone larger than the budget is over its cap (``read_capped``'s 502): waiting
  would never make room for it.

Streamed answers never wait on it: held whole in no buffer, they cost it nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections.abc import AsyncIterator, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from proxy.errors import ServerBusy

__all__ = [
    "DEFAULT_LIMIT",
    "WAIT_SECONDS",
    "refused_pause",
    "AnswerBudget",
    "RoomWait",
    "Arrivals",
    "Lease",
    "default_limit",
    "watch_arrivals",
]

WAIT_SECONDS = 5.0
"""How long an answer arriving over the budget waits for room before its 503."""


def refused_pause(refused: int) -> float:
    """The pause after the budget's room before a call it refused ``refused`` times (a
    summary's, a promotion's) is asked again: an answer refused as it arrived was paid
    for, so a burst of refusals backs off, doubling to at most 2 s."""
    return min(0.2 * 2.0 ** min(refused - 1, 4), 2.0)


class RoomWait:
    """The bound of a caller's waits for the budget's room (a summary's, a promotion's),
    which no client retries: none for one no request waits on (only the caller's own), and
    ``WAIT_SECONDS`` in all for one a request waits on (``waited_on``), as an arriving
    answer waits, from its first wait; ``by``: the loop time they end by, once set. One a
    request joins later (``join``) is bounded from then on."""

    __slots__ = ("waited_on", "by", "_now")

    def __init__(self, waited_on: bool = False) -> None:
        self.waited_on = waited_on
        self.by: float | None = None
        self._now: asyncio.Timeout | None = None  # the bound of the wait running, if one is

    @contextlib.asynccontextmanager
    async def bound(self) -> AsyncIterator[asyncio.Timeout]:
        """The bound of one wait: its ``TimeoutError`` ends the caller's waiting."""
        if self.waited_on and self.by is None:
            self.by = asyncio.get_running_loop().time() + WAIT_SECONDS
        async with asyncio.timeout_at(self.by if self.waited_on else None) as timeout:
            self._now = timeout
            try:
                yield timeout
            finally:
                self._now = None

    def join(self) -> None:
        """A request now waits on the caller (it joined a background compaction): its waits
        end ``WAIT_SECONDS`` from now when it waits now, else from its next wait, as a
        caller waited on from the start; one waited on already keeps its bound."""
        if self.waited_on:
            return
        self.waited_on = True
        if self._now is not None:
            self.by = asyncio.get_running_loop().time() + WAIT_SECONDS
            self._now.reschedule(self.by)


_SETTING = "CASCADE_MAX_HELD_ANSWER_BYTES"

DEFAULT_LIMIT = 512 << 20
"""The budget where the process's memory has no limit the proxy can read, and the most a
container's gets."""

CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
"""Where cgroup v2, then v1, says the most memory the container may take."""


def default_limit(files: Sequence[str] = CGROUP_LIMITS) -> int:
    """A quarter of the memory the container may take (the first of ``files`` there is), at
    most ``DEFAULT_LIMIT``: an answer parsed holds about its bytes again (text) or a few
    times them (an embeddings answer's numbers), beside the raw bytes while it is parsed and
    the proxy's own memory, so half a 1 GiB container's memory in raw answers would be more
    than it has. No limit ("max", v1's near 2**63) is ``DEFAULT_LIMIT``."""
    for name in files:
        try:
            text = Path(name).read_text().strip()
        except OSError:
            continue
        return min(DEFAULT_LIMIT, int(text) // 4) if text.isdigit() else DEFAULT_LIMIT
    return DEFAULT_LIMIT


@dataclass(slots=True)
class Arrivals:
    """What ``watch_arrivals`` saw: ``cut``, an answer of the block's was cut off (its
    deadline, a cancel) while it waited for room as it arrived (``AnswerBudget.take``)."""

    cut: bool = False


_watched: ContextVar[Arrivals | None] = ContextVar("cascade_answer_arrivals", default=None)


@contextlib.contextmanager
def watch_arrivals() -> Iterator[Arrivals]:
    """Note the answers of the block (its task, and tasks it starts) cut off while they
    waited for room: a caller whose deadline ran out learns whether the budget held it."""
    token = _watched.set(seen := Arrivals())
    try:
        yield seen
    finally:
        _watched.reset(token)


class AnswerBudget:
    """The bytes whole answers hold now (``held``) and the most they may (``limit``, 0:
    no budget). One per app, its ``Upstream``'s, which every call of that app goes through;
    several apps in one process (tests, an embedding host) each have their own."""

    def __init__(self, limit: int = 0) -> None:
        self.limit = limit
        self.held = 0
        # ``held`` changes on the loop (``take``) and on whatever thread a finalizer runs
        # (``give``): unlocked, a thread switch inside ``+=`` loses one of the two updates.
        self._lock = threading.Lock()
        self._freed: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the waiters' loop
        self._stuck = 0  # the bytes held by answers waiting for room (``take``)

    def busy(self) -> bool:
        """Whether the budget is spent: a new whole answer would have no room."""
        return self.limit > 0 and self.held >= self.limit

    def refuse_if_busy(self) -> None:
        """The 503 for a call about to be sent while the budget is spent."""
        if self.busy():
            raise ServerBusy(
                f"the proxy holds {self.held} bytes of whole provider answers, its budget "
                f"({_SETTING}); nothing was sent to the provider: retry shortly, or stream"
            )

    async def room(self) -> None:
        """Return once the budget is not spent (at once when it is not): for a caller that
        can wait for a call the budget would refuse (a compaction's summary, which has no
        client to retry it), rather than count the refusal as its call's failure. No timeout
        bounds this wait, only its caller's: no wake-up may be lost (``_waiter``)."""
        while (freed := self._waiter(0)) is not None:
            await freed.wait()

    def _waiter(self, size: int) -> asyncio.Event | None:
        """The event ``give`` sets, to wait on while ``size`` more bytes find no room (the
        budget spent, for ``size`` 0); None once they do. It is made before the budget is
        looked at, which is under the lock ``give`` takes: a collection set off while it is
        made may run a finalizer's ``give`` (``Lease.tie``), which frees room and finds no
        event to set, so a look before it would wait for a ``give`` that may never come."""
        event = asyncio.Event()
        with self._lock:
            room = not self.busy() if size == 0 else self.held + size <= self.limit
            if self.limit <= 0 or room:
                return None
            if self._freed is None:
                self._freed, self._loop = event, asyncio.get_running_loop()
            return self._freed

    async def take(self, size: int, holding: int = 0) -> None:
        """Take ``size`` bytes, waiting up to ``WAIT_SECONDS`` for room; then the 503.

        ``holding`` is what the caller's answer holds already. While answers wait their
        bytes are ``_stuck``: room comes only from answers that do not wait, so one that
        would leave every held byte waiting is the 503 at once (its bytes then go back, and
        the others go on), where they all waited out ``WAIT_SECONDS`` on each other."""
        if self.limit <= 0:
            return
        deadline = time.monotonic() + WAIT_SECONDS
        while self.held + size > self.limit:
            if self._stuck + holding >= self.held:
                raise ServerBusy(
                    f"the proxy's budget for whole provider answers ({_SETTING}, "
                    f"{self.limit} bytes) is held by answers that wait for each other's "
                    "room; this one was closed unread so they go on: retry shortly, or stream"
                )
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServerBusy(
                    f"the proxy's budget for whole provider answers ({_SETTING}, "
                    f"{self.limit} bytes) stayed spent for {WAIT_SECONDS:g} s while this "
                    "answer arrived; it was closed unread: retry shortly, or stream"
                )
            if (freed := self._waiter(size)) is None:
                continue  # room came while the wait was set up
            self._stuck += holding
            try:
                await asyncio.wait_for(freed.wait(), left)
            except TimeoutError:
                continue
            except asyncio.CancelledError:
                if (seen := _watched.get()) is not None:
                    seen.cut = True
                raise
            finally:
                self._stuck -= holding
        with self._lock:
            self.held += size

    def give(self, size: int) -> None:
        """Give ``size`` bytes back, waking every answer that waits for room: on the waiters'
        loop, since a finalizer (``Lease.tie``) may run on whatever thread collects."""
        with self._lock:
            self.held = max(0, self.held - size)
            freed, self._freed = self._freed, None
        if freed is None or self._loop is None:
            return
        try:
            here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is self._loop:
            freed.set()
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(freed.set)


class Lease:
    """The bytes of ``budget`` one answer holds: taken as they arrive (``grow``), given
    back once (``release``), at the latest when the answer it is tied to is freed."""

    __slots__ = ("budget", "size", "__weakref__")

    def __init__(self, budget: AnswerBudget) -> None:
        self.budget = budget
        self.size = 0

    async def grow(self, size: int) -> None:
        if self.budget.limit > 0:  # no budget: nothing to count or give back
            await self.budget.take(size, self.size)
            self.size += size

    def release(self) -> None:
        size, self.size = self.size, 0
        if size:
            self.budget.give(size)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        """A read, or anything after it, that fails before the answer is the caller's (a
        cancelled close, a broken body) gives the bytes back: no answer holds them."""
        if kind is not None:
            self.release()

    def tie(self, owner: object) -> None:
        """Give the bytes back when ``owner`` (the answer holding them) is freed."""
        if self.size:
            weakref.finalize(owner, self.release)
