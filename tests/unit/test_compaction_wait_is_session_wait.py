"""A request that waits for another's compaction of its session (the background one running
here) waits for its session: ``session_wait_ms`` and ``cascade_session_wait_seconds`` say so,
where the wait read as the proxy's own time (``cascade_overhead_seconds``) and nothing else."""

from __future__ import annotations

import asyncio

from proxy import requestlog
from proxy.services.compaction import DurableSummarizer


async def test_the_wait_for_the_compaction_running_on_the_session_is_a_session_wait() -> None:
    summarizer = DurableSummarizer(
        pool=None,  # type: ignore[arg-type]  # never reached
        upstream=None,  # type: ignore[arg-type]
        bus=None,  # type: ignore[arg-type]
        count=len,  # type: ignore[arg-type]
    )
    record = requestlog.RequestRecord("r")
    token = requestlog.begin(record)
    summarizer._tasks[("t", "s")] = asyncio.create_task(asyncio.sleep(0.2))
    try:
        await summarizer.wait_inflight("t", "s")
        await summarizer.wait_inflight("t", "other")  # none running: no wait
    finally:
        requestlog.end(token)
    assert record.session_waited is not None and record.session_waited >= 0.19
