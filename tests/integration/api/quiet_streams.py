"""Stand-ins for driving ``events._stream`` straight against the database: a bus that
announces nothing, so only the catch-up reads bring events, and a request whose client
leaves when the test says so."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

from proxy.config import Config
from proxy.stopping import StopClock


class QuietBus:
    @contextlib.asynccontextmanager
    async def subscribe(self, tenant: str, session_id: str) -> AsyncIterator[asyncio.Queue[Any]]:
        yield asyncio.Queue()  # nothing announced: only the catch-up reads bring events


class LeavingRequest:
    """A stream's request; ``gone`` set, every stream made with it sees its client leave."""

    scope: dict[str, Any] = {}  # pass-through
    state = SimpleNamespace(config=SimpleNamespace(current=Config()), stop=StopClock())

    def __init__(self) -> None:
        self.gone = False

    async def is_disconnected(self) -> bool:
        return self.gone
