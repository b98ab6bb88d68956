"""What a compaction redacts with: the agent's patterns, none when its redaction is off.
The compaction's span and stored briefing go through them (the end-to-end test is
tests/integration/api/test_compaction_audit.py)."""

from __future__ import annotations

from proxy.cascade.redaction import redact
from proxy.config import parse_config
from proxy.services.compaction_job import CompactionJob, job_for

KEY = "sk-proj-" + "Zq7" * 12


def _job(agent: str) -> CompactionJob:
    cfg = parse_config(
        {
            "agents": {
                "open": {"context": {"redaction": {"enabled": False}}},
                "acme": {"context": {"redaction": {"patterns": ["ACME-[0-9]{4}"]}}},
            }
        },
        {},
    )
    return job_for(
        cfg,
        tenant="t",
        session_id="s",
        agent=agent,
        model="m",
        headers={},
        trigger="pressure",
    )


def test_a_compaction_redacts_with_the_agents_patterns() -> None:
    default, acme, off = _job("default"), _job("acme"), _job("open")
    assert redact(f"key {KEY}", default.redaction)[1] == 1
    assert redact(f"ACME-1234 {KEY}", acme.redaction)[1] == 2
    assert off.redaction == ()
