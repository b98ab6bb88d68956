"""``cascade-proxy serve`` killed with SIGKILL while the memory promotion that follows a stored
summary asks the fast model: the session owes the span's promotion (migration 0032), and its
next request, in the restarted process, takes it over once due, so the facts are stored."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import words
from tests.integration.api.test_promotion_off_the_path import HeldFacts
from tests.integration.conftest import column
from tests.reliability.conftest import Figures
from tests.reliability.test_sigkill import SHORT_LEASE, _post, compacting_config

pytestmark = pytest.mark.timeout(120)

SID = "owed"
OWED = "SELECT promotion_from::text FROM sessions WHERE id = 'owed'"
FACTS = "SELECT fact FROM memory WHERE source_session = 'owed'"


def _config(tmp_path: Path, upstream_url: str) -> Path:
    """``test_sigkill.compacting_config`` with ``auto`` promotion: a session's fifth turn
    starts a background compaction, then its promotion."""
    return compacting_config(tmp_path, upstream_url, promotion="auto")


def _until(what: str, predicate: Any, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := predicate()):
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
    return got


def test_sigkill_during_a_promotion_leaves_it_to_the_next_request(
    proxy_process: Any, fake_upstream: FakeUpstream, db_dsn: str, tmp_path: Path, figures: Figures
) -> None:
    held = HeldFacts()  # the facts never come before the kill (3 s of patience)
    fake_upstream.default = held
    config = _config(tmp_path, fake_upstream.url)
    p = proxy_process(config, **SHORT_LEASE)
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for i in range(5):
        history.append({"role": "user", "content": words(450, f"t{i}")})
        history.append(_post(p, SID, history))
    _until("the promotion never asked", lambda: held.extractions == 1)
    p.kill()
    assert column(db_dsn, OWED) == ["1"]  # stored in the summary's insert transaction
    assert column(db_dsn, FACTS) == []
    # A killed process's promotion is due OWED_SECONDS after the insert (it may still run
    # elsewhere): the test lets that time pass.
    column(db_dsn, "UPDATE sessions SET promotion_due = now() WHERE id = 'owed' RETURNING 1")
    model = HeldFacts()
    model.held.allow(10)
    fake_upstream.default = model
    p = proxy_process(config, **SHORT_LEASE)
    history.append({"role": "user", "content": "go on"})
    history.append(_post(p, SID, history))  # once the killed process's lease expired
    facts = _until("the owed promotion was never taken over", lambda: column(db_dsn, FACTS))
    assert facts == ["The parser is src/parse.py"]
    assert column(db_dsn, OWED) == [None]
    assert model.extractions == 1
    figures.add(tried=1)
