"""A retired provider pool's close is the process's, not a request's: the last request
through it ends it (``PoolUse``'s release runs in that request's task), so the close's
task, made there, copied that request's context, and its warning carried the request's
ids, as if that request had failed (proxy/pool_use.py)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import httpx

from proxy import requestlog
from proxy.logs import JsonFormatter
from proxy.pool_use import PoolUse


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


class _Broken(httpx.AsyncBaseTransport):
    async def aclose(self) -> None:
        raise OSError("close failed")


def test_a_retired_pools_close_carries_no_requests_id() -> None:
    async def run() -> None:
        use, pool = PoolUse(), _Broken()
        token = requestlog.begin(requestlog.RequestRecord("req-1", "s1"))
        try:
            release = use.hold(pool)
            use.retire(pool)  # a reload retires it while the request still reads from it
            release()  # the request's answer is closed: the pool closes now
        finally:
            requestlog.end(token)
        await use.aclose()

    handler = _Lines()
    logger = logging.getLogger("cascade")
    logger.addHandler(handler)
    try:
        asyncio.run(run())
    finally:
        logger.removeHandler(handler)
    (line,) = handler.lines
    assert "closing a retired provider pool" in line["message"]
    assert "request_id" not in line and "session_id" not in line, line
