"""How a compaction reports its start and its result on its session's event stream, and
counts them for the metrics and its span (``note_compaction_event``).

``DurableSummarizer`` (``compaction.py``) reports through these; ``compaction_failed.py``
reports a failure through ``publish`` too (its ``Publish``).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import asyncpg

from proxy.bus import EventBus
from proxy.bus_payloads import stamp_now
from proxy.cascade.types import COMPACTION_STARTED
from proxy.observe import note_compaction_event
from proxy.services.compaction_job import CompactionJob
from proxy.store import events

__all__ = ["publish", "report_started"]

log = logging.getLogger("cascade.compaction")


async def publish(
    bus: EventBus, conn: Any, job: CompactionJob, name: str, data: dict[str, Any]
) -> None:
    """Report ``name``; a session deleted meanwhile has no stream to report to (an event
    belongs to its session), so the event is dropped, not raised."""
    try:
        await bus.publish(
            conn,
            tenant=job.tenant,
            session_id=job.session_id,
            name=name,
            data={"trigger": job.trigger, **data},
        )
    except asyncpg.ForeignKeyViolationError:
        log.info("compaction of %s: the session was deleted; %s dropped", job.session_id, name)
    note_compaction_event(name, data)  # the metrics' count of its result


async def report_started(
    conn: Any, job: CompactionJob, owner: uuid.UUID, data: dict[str, Any]
) -> bool:
    """Report ``context.compaction.started`` while ``owner`` still holds the claim
    (``events.insert_claimed_event``); False, nothing reported, once it does not."""
    body = {"trigger": job.trigger, **data, "session_id": job.session_id, "ts": stamp_now()}
    t, s = job.tenant, job.session_id
    row_id = await events.insert_claimed_event(
        conn, tenant=t, session_id=s, owner=owner, name=COMPACTION_STARTED, data=body
    )
    if row_id is None:
        return False
    note_compaction_event(COMPACTION_STARTED, data)
    return True
