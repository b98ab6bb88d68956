"""A background compaction nobody awaits that fails on something its own handling does not
take (a statement's error, a bug) says so as it ends, one ERROR with its traceback, in the
context of the request that started it (its ids, as its other lines have). Unsaid, asyncio
wrote "Task exception was never retrieved" only once the task was collected: in whatever
ran then, another request's task too, whose ids the line carried (proxy/tasks.py)."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
from types import SimpleNamespace
from typing import Any

from proxy import requestlog
from proxy.logs import JsonFormatter
from proxy.services.compaction import DurableSummarizer


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


def test_a_background_compaction_that_raised_is_one_error_line_of_its_request() -> None:
    summarizer = object.__new__(DurableSummarizer)
    summarizer._tasks, summarizer.rooms = {}, {}

    async def broken(job: Any) -> None:
        raise RuntimeError("a statement failed")

    summarizer._run_background = broken  # type: ignore[method-assign]

    async def run() -> None:
        token = requestlog.begin(requestlog.RequestRecord("req-1", "s1"))
        try:
            assert summarizer.start_background(SimpleNamespace(tenant="t", session_id="s1"))
        finally:
            requestlog.end(token)
        other = requestlog.begin(requestlog.RequestRecord("req-2", "s2"))
        try:  # another request runs as the task ends, and is collected
            await asyncio.sleep(0.05)
            gc.collect()
        finally:
            requestlog.end(other)

    handler = _Lines()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        asyncio.run(run())
        gc.collect()
    finally:
        root.removeHandler(handler)
    said = [x for x in handler.lines if x["level"] == "ERROR"]
    assert len(said) == 1, said
    (line,) = said
    assert line["message"] == "background compaction of s1 failed: RuntimeError: a statement failed"
    assert line["request_id"] == "req-1" and "exc" in line
