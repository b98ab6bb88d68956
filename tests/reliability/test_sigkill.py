"""``cascade-proxy serve`` killed with SIGKILL during a stream and during a compaction, then
restarted on the same database: each session is consistent (contiguous rows, no reply of
the killed stream, the compaction closed with ``failed``/``interrupted``) and goes on."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.replies import Pacer, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import FAST, Model, words
from tests.integration.conftest import column
from tests.reliability.conftest import Figures, ProxyProcess, write_config

# Each test starts the proxy as a process several times and waits out a lease each time: a
# fixed amount of work that a loaded machine took past the suite's 60 s timeout (a guard
# against hangs, not a bar).
pytestmark = pytest.mark.timeout(180)

KILLS = 3
AUTH = {"authorization": "Bearer sk-test-client"}
# A killed process's lease and compaction claim stay until they expire, so each restart here
# waits one time to live: a short one keeps the test short. test_lease_expiry.py proves the
# default's bound.
TTL = 3.0
SHORT_LEASE = {"CASCADE_LEASE_TTL_SECONDS": str(TTL)}


def _post(p: ProxyProcess, sid: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    r = httpx.post(
        f"{p.origin}/v1/chat/completions",
        timeout=30,
        headers={**AUTH, "x-session-id": sid},
        json={"model": "gpt-4o", "messages": messages},
    )
    assert r.status_code == 200, r.text
    return dict(r.json()["choices"][0]["message"])


COMPACTION_EVENTS = (
    "SELECT name FROM events WHERE session_id = 'compacting' AND name LIKE "
    "'context.compaction.%' ORDER BY id"
)
"""The compaction events of the session ``start_a_background_compaction`` drives."""


def compacting_config(tmp_path: Path, upstream_url: str, promotion: str | None = None) -> Path:
    """A config whose small window makes a session's fifth turn start a background compaction
    (over ``softFraction``, nowhere near ``hardFraction``), nothing evicted before it; with
    ``promotion``, the memory promotion's mode (then the compaction's promotion follows it)."""
    context: dict[str, object] = {
        "summarize": {"softFraction": 0.5, "hardFraction": 0.95, "keepRecent": 4},
        "eviction": {"enabled": False},
    }
    if promotion is not None:
        context["memoryPromotion"] = {"mode": promotion}
    return write_config(
        tmp_path / "agents.json",
        upstream_url,
        models={
            "default": {"contextLimit": 4000, "reservedOutput": 500},
            FAST: {"contextLimit": 32000},
        },
        context=context,
    )


def start_a_background_compaction(p: ProxyProcess, model: Model) -> list[dict[str, Any]]:
    """Five turns on session ``compacting`` under :func:`compacting_config`, then a wait for
    the fast model's call: the history so far, its compaction in flight."""
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for i in range(5):  # the 5th crosses softFraction: a background compaction starts
        history.append({"role": "user", "content": words(450, f"t{i}")})
        history.append(_post(p, "compacting", history))
    deadline = time.monotonic() + 10
    while not model.fast_times:
        assert time.monotonic() < deadline, "no compaction started"
        time.sleep(0.05)
    return history


def _rows(dsn: str, sid: str) -> list[tuple[int, str, Any]]:
    got = column(
        dsn,
        "SELECT json_build_array(pos, role, message->>'content')::text"
        " FROM messages WHERE session_id = $1 AND superseded_at IS NULL"
        " ORDER BY pos",
        sid,
    )
    return [tuple(json.loads(g)) for g in got]


def _consistent(dsn: str, sid: str) -> list[tuple[int, str, Any]]:
    rows = _rows(dsn, sid)
    assert [pos for pos, *_ in rows] == list(range(len(rows))), rows  # no gap, no half step
    return rows


def test_sigkill_during_a_stream_leaves_a_consistent_session(
    proxy_process: Any,
    fake_upstream: FakeUpstream,
    db_dsn: str,
    tmp_path: Path,
    figures: Figures,
) -> None:
    """SIGKILL during a stream: no reply stored for it, the session goes on after restart."""
    config = write_config(tmp_path / "agents.json", fake_upstream.url)
    history: list[dict[str, Any]] = []
    for k in range(KILLS):
        p = proxy_process(config, **SHORT_LEASE)
        fake_upstream.default = reply(f"answer {k}")
        history += [{"role": "user", "content": f"question {k}"}]
        history.append(_post(p, "killed", history))
        history.append({"role": "user", "content": f"the turn killed {k}"})
        # The answer stops after its first words (its Pacer lets no more go): the kill
        # always lands mid-answer.
        pacer = Pacer()
        pacer.allow(1)
        fake_upstream.default = reply("never stored " * 50, chunks=50, pacer=pacer)
        p.kill_mid_stream(
            {"model": "gpt-4o", "messages": history},
            {**AUTH, "x-session-id": "killed"},
            at="never stored",
        )
        rows = _consistent(db_dsn, "killed")
        assert not [c for _, role, c in rows if role == "assistant" and "never" in (c or "")]
        history.pop()  # the client gives up on the killed turn
    p = proxy_process(config, **SHORT_LEASE)
    fake_upstream.default = reply("after the kills")
    history.append({"role": "user", "content": "and now?"})
    history.append(_post(p, "killed", history))
    want = [(m["role"], m["content"]) for m in history]
    deadline = time.monotonic() + 10  # the reply is stored just after it is sent
    while (got := [(role, c) for _, role, c in _consistent(db_dsn, "killed")]) != want:
        assert time.monotonic() < deadline, got
        time.sleep(0.05)
    figures.add(tried=KILLS, rows=len(got), restarts=KILLS)


def test_sigkill_during_a_compaction_closes_it_as_interrupted_on_restart(
    proxy_process: Any,
    fake_upstream: FakeUpstream,
    db_dsn: str,
    tmp_path: Path,
    figures: Figures,
) -> None:
    """SIGKILL during a compaction: context.compaction.failed (interrupted) after restart."""
    model = Model(fast_delay=30.0)  # the summary never comes before the kill
    fake_upstream.default = model
    config = compacting_config(tmp_path, fake_upstream.url)
    p = proxy_process(config, **SHORT_LEASE)
    history = start_a_background_compaction(p, model)
    names = COMPACTION_EVENTS
    assert column(db_dsn, names) == ["context.compaction.started"]
    p.kill()
    rows_before = _consistent(db_dsn, "compacting")
    killed = time.monotonic()
    p = proxy_process(config, **SHORT_LEASE)  # start-up closes what no process runs any more:
    # once the killed process's compaction claim has expired (the lease's time to live)
    deadline = killed + TTL + TTL / 3 + 10  # the claim, a third of it between tries, start-up
    while len(column(db_dsn, names)) < 2:
        assert time.monotonic() < deadline, "the interrupted compaction was never closed"
        time.sleep(0.2)
    assert column(db_dsn, names) == ["context.compaction.started", "context.compaction.failed"]
    reason = column(
        db_dsn,
        "SELECT data->>'reason' FROM events WHERE session_id = 'compacting'"
        " AND name = 'context.compaction.failed'",
    )
    assert reason == ["interrupted"]
    assert _rows(db_dsn, "compacting") == rows_before
    model.fast_delay = 0.0
    history.append({"role": "user", "content": "go on"})
    history.append(_post(p, "compacting", history))
    figures.add(tried=1, rows=len(rows_before), events=len(column(db_dsn, names)))
