"""A compaction the answer budget put off (``server_busy``) leaves the session's backoff as
it found it: a hard, overflow or forced compaction claims a session inside the backoff of a
failed one, and the claim's release cleared that backoff, so the next turn over
``softFraction`` started a background compaction the backoff should have held off."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from proxy.services.compaction import DurableSummarizer
from proxy.services.compaction_job import CompactionJob
from proxy.services.compaction_span import CompactionResult
from proxy.store import leases
from tests.integration.store.helpers import A, B, T, make_session

LEFT = (
    "SELECT extract(epoch FROM compaction_expires - clock_timestamp()) FROM sessions WHERE id = $1"
)


async def test_a_claim_says_which_backoff_it_took_over_and_the_release_can_keep_it(
    pool: asyncpg.Pool,
) -> None:
    await make_session(pool, "k")
    claim = {"tenant": T, "session_id": "k", "ttl": 1.0}
    first = await leases.claim_compaction(pool, owner=A, **claim, background=True)
    assert first is not None and first.backoff_until is None
    await leases.release_compaction(pool, tenant=T, session_id="k", owner=A, backoff=60)
    hard = await leases.claim_compaction(pool, owner=B, **claim)
    assert hard is not None and hard.backoff_until is not None
    await leases.release_compaction(
        pool, tenant=T, session_id="k", owner=B, until=hard.backoff_until
    )
    assert not await leases.claim_compaction(pool, owner=A, **claim, background=True)
    assert 55 < await pool.fetchval(LEFT, "k") <= 60


@pytest.mark.parametrize(("busy", "backing_off"), [(True, True), (False, False)])
async def test_a_compaction_put_off_as_server_busy_leaves_the_backoff_as_it_was(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch, busy: bool, backing_off: bool
) -> None:
    """Put off (``busy``), the backoff stays; ended otherwise with no backoff of its own (a
    success, nothing to fold), the compaction clears it as before."""
    await make_session(pool, "s")
    assert await leases.claim_compaction(pool, owner=A, tenant=T, session_id="s", ttl=1.0)
    await leases.release_compaction(pool, tenant=T, session_id="s", owner=A, backoff=60)

    async def compact(self: DurableSummarizer, job: CompactionJob, owner: Any) -> CompactionResult:
        return CompactionResult(None, 0, 0, 10, 10, "put off", failed=busy, busy=busy)

    monkeypatch.setattr(DurableSummarizer, "_compact", compact)
    summarizer = DurableSummarizer(
        pool=pool,
        upstream=None,  # type: ignore[arg-type]  # never reached
        bus=None,  # type: ignore[arg-type]
        count=len,  # type: ignore[arg-type]
    )
    job = CompactionJob(
        tenant=T, session_id="s", provider=None, fast_model="fast", fast_limits=None,
        cfg=None, headers={}, trigger="hard",
    )  # type: ignore[arg-type]  # fmt: skip
    result = await summarizer.compact_now(job)
    assert result is not None and result.busy is busy
    claimed = await leases.claim_compaction(
        pool, owner=B, tenant=T, session_id="s", ttl=1.0, background=True
    )
    assert (claimed is None) is backing_off
