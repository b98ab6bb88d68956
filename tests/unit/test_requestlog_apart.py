"""requestlog.apart gives its work a record of its own and leaves the caller's in place,
whether it runs as a task's body or is awaited directly."""

from __future__ import annotations

import asyncio

import pytest

from proxy import requestlog
from proxy.requestlog import RequestRecord


async def _noted() -> RequestRecord | None:
    requestlog.note_upstream(5.0)
    return requestlog.current()


async def _fails() -> None:
    requestlog.note_upstream(5.0)
    raise RuntimeError("boom")


def test_apart_awaited_directly_leaves_the_callers_record_current() -> None:
    async def main() -> tuple[RequestRecord | None, RequestRecord | None, RequestRecord]:
        record = RequestRecord("req-1", "s-1")
        token = requestlog.begin(record)
        try:
            inner = await requestlog.apart(_noted())
            return inner, requestlog.current(), record
        finally:
            requestlog.end(token)

    inner, after, record = asyncio.run(main())
    assert inner is not record and inner is not None and inner.request_id == "req-1"
    assert after is record  # the caller's record again, not the work's
    assert record.upstream_seconds == 0.0


def test_apart_that_raises_still_leaves_the_callers_record_current() -> None:
    async def main() -> tuple[RequestRecord | None, RequestRecord]:
        record = RequestRecord("req-2")
        token = requestlog.begin(record)
        try:
            with pytest.raises(RuntimeError):
                await requestlog.apart(_fails())
            requestlog.note_upstream(1.0)
            return requestlog.current(), record
        finally:
            requestlog.end(token)

    after, record = asyncio.run(main())
    assert after is record
    assert record.upstream_seconds == 1.0


def test_apart_with_no_record_runs_the_work_under_none() -> None:
    assert asyncio.run(requestlog.apart(_noted())) is None
