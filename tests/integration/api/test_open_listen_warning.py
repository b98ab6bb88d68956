"""Regression: ``serve --allow-unauthenticated`` on a non-loopback address warned that anyone
who can reach it can use the providers before it tried to bind, so on a port another process
holds the operator read a security warning for a server that never started, beside the bind
error. The warning now comes from the start, once the address is the server's, after the
banner that says where it listens; a port taken is the one error line alone
(test_serve_port_taken.py)."""

from __future__ import annotations

from pathlib import Path

from tests.integration.api.conftest import Records, StartProxy

WARNING = (
    "with no proxy keys (allowed by --allow-unauthenticated or CASCADE_ALLOW_UNAUTHENTICATED=1)"
)


def test_the_warning_follows_the_banner(
    start_proxy: StartProxy, config_path: Path, records: Records
) -> None:
    start_proxy(config_path, host="0.0.0.0", allow_unauthenticated=True)
    said = [r.getMessage() for r in records.records if r.name.startswith("cascade")]
    banner = next(i for i, line in enumerate(said) if " listening on 0.0.0.0:" in line)
    warnings = [i for i, line in enumerate(said) if WARNING in line]
    assert len(warnings) == 1 and warnings[0] > banner, said


def test_metrics_open_beyond_loopback_are_warned_of_after_the_banner(
    start_proxy: StartProxy, config_path: Path, records: Records
) -> None:
    """No proxy keys and no metrics key on a non-loopback address: anyone reads every
    tenant's counts on ``/metrics``, one warning of its own, after the banner (README
    Decisions: on loopback it says nothing)."""
    start_proxy(config_path, host="0.0.0.0", allow_unauthenticated=True)
    said = [r.getMessage() for r in records.records if r.name.startswith("cascade")]
    banner = next(i for i, line in enumerate(said) if " listening on 0.0.0.0:" in line)
    warnings = [i for i, line in enumerate(said) if line.startswith("/metrics on 0.0.0.0 ")]
    assert len(warnings) == 1 and warnings[0] > banner, said
    assert "answers anyone who can reach it" in said[warnings[0]]
