"""The database's outage lines are the process's, not a request's: the pool's connect that
fails (or succeeds again) may run in a request's task, whose ids every line written there
carries, so the request that happened to notice had two lines (the outage's and its 503's)
and a search by its id read the outage as its own (proxy/store/outage.py)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from proxy import requestlog
from proxy.logs import JsonFormatter
from proxy.store.outage import Outage


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


def test_the_outage_lines_carry_no_requests_id() -> None:
    down = True

    async def connect() -> str:
        if down:
            raise ConnectionRefusedError("connection refused")
        return "conn"

    async def run() -> None:
        nonlocal down
        outage = Outage(connect)
        outage.arm()
        token = requestlog.begin(requestlog.RequestRecord("req-1", "s1"))
        try:
            with pytest.raises(ConnectionRefusedError):
                await outage.connect()
            down = False
            assert await outage.connect() == "conn"
        finally:
            requestlog.end(token)

    handler = _Lines()
    logger = logging.getLogger("cascade")
    logger.addHandler(handler)
    before = logger.level
    logger.setLevel(logging.INFO)
    try:
        asyncio.run(run())
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before)
    messages = [line["message"] for line in handler.lines]
    assert [m.split(",")[0] for m in messages] == [
        "PostgreSQL is unreachable",
        "PostgreSQL is reachable again",
    ]
    for line in handler.lines:
        assert "request_id" not in line and "session_id" not in line, line
