"""Many agent sessions at once, each a chain of streamed tool-call steps whose results are
large enough to be truncated and later evicted: no errors, every message stored exactly
once, and every tool call paired with its result in each prompt the provider received.

The issue's 64 sessions × 30 steps runs by default (about 30 s on two cores); ``soak`` runs
sessions three times as long.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.settings import Settings
from tests.fakes.replies import RecordedRequest, reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.conftest import column
from tests.reliability.conftest import Figures, ProxyServer, write_config

# Loads both cores or times the proxy: make test runs it alone, after the rest.
pytestmark = pytest.mark.heavy

RESULT_CHARS = 6000  # over toolOutput.maxChars: truncated on the way in


def _answer(req: RecordedRequest) -> Any:
    path = f"f{len(req.json['messages'])}"
    return reply(None, tool_calls=[tool_call("read_file", {"path": path})], chunks=4)


def _read_stream(r: httpx.Response) -> dict[str, Any]:
    """The assistant message a streamed answer carries; asserts it finished cleanly."""
    content, calls = "", {}
    done = False
    for line in r.iter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            done = True
            continue
        frame = json.loads(data)
        assert "error" not in frame, frame
        for choice in frame.get("choices", []):
            delta = choice.get("delta") or {}
            content += delta.get("content") or ""
            for tc in delta.get("tool_calls") or []:
                slot = calls.setdefault(
                    tc["index"],
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                slot["id"] += tc.get("id") or ""
                fn = tc.get("function") or {}
                slot["function"]["name"] += fn.get("name") or ""
                slot["function"]["arguments"] += fn.get("arguments") or ""
    assert done, "no [DONE]"
    msg: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        msg["tool_calls"] = [calls[i] for i in sorted(calls)]
    return msg


def pairing_errors(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """What breaks OpenAI's rule: each assistant tool call answered by one tool message
    right after it (before the next assistant or user turn), and no tool message unasked."""
    errors, open_ids = [], set()
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "tool":
            tid = m.get("tool_call_id")
            if tid not in open_ids:
                errors.append(f"messages[{i}]: tool result {tid!r} answers no open call")
            open_ids.discard(tid)
            continue
        if open_ids:
            errors.append(f"messages[{i}]: calls {sorted(open_ids)} unanswered")
            open_ids = set()
        if role == "assistant":
            open_ids = {tc["id"] for tc in m.get("tool_calls") or []}
    return errors


def _agent(origin: str, sid: str, steps: int) -> tuple[list[dict[str, Any]], int]:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": f"Session {sid}: read the files."},
    ]
    errors = 0
    with httpx.Client(
        base_url=origin,
        timeout=60,
        headers={"authorization": "Bearer sk-test-client", "x-session-id": sid},
    ) as http:
        for step in range(steps):
            with http.stream(
                "POST",
                "/v1/chat/completions",
                json={"model": "gpt-4o", "stream": True, "messages": history},
            ) as r:
                if r.status_code != 200:
                    errors += 1
                    r.read()
                    raise AssertionError(f"{sid} step {step}: {r.status_code} {r.text}")
                msg = _read_stream(r)
            history.append(msg)
            for tc in msg.get("tool_calls", []):
                body = f"{sid} {step} {tc['id']} " + "".join(
                    f"line {n:05d} of {tc['function']['arguments']}\n" for n in range(200)
                )
                history.append(
                    {"role": "tool", "tool_call_id": tc["id"], "content": body[:RESULT_CHARS]}
                )
    return history, errors


def run_load(
    tmp_path: Path,
    db_dsn: str,
    fake: FakeUpstream,
    figures: Figures,
    sessions: int,
    steps: int,
    workers: int = 16,
) -> None:
    fake.default = _answer
    config = write_config(
        tmp_path / "agents.json",
        fake.url,
        models={"default": {"contextLimit": 12000, "reservedOutput": 1000}},
        context={
            "toolOutput": {"maxChars": 2000},
            "eviction": {
                "atFraction": 0.25,
                "keepRecentRounds": 2,
                "clearAtLeast": 500,
                "minResultTokens": 100,
            },
            "summarize": {"enabled": False},
        },
    )
    proxy = ProxyServer(
        Settings(database_url=db_dsn, config=config, keepalive_seconds=1, watch_config=False)
    ).start()
    t0 = time.monotonic()
    try:
        with ThreadPoolExecutor(workers) as pool:
            results = list(
                pool.map(lambda k: _agent(proxy.origin, f"load-{k}", steps), range(sessions))
            )
        elapsed = time.monotonic() - t0
        time.sleep(0.5)  # the last replies are stored after they are sent
    finally:
        proxy.stop()
    # what the provider received: every prompt's tool calls paired
    bodies = fake.bodies()
    bad = [(i, e) for i, b in enumerate(bodies) for e in pairing_errors(b["messages"])]
    truncated = sum(
        1
        for b in bodies
        for m in b["messages"]
        if m.get("role") == "tool" and len(str(m.get("content"))) < RESULT_CHARS
    )
    evicted = column(db_dsn, "SELECT count(*) FROM messages WHERE evicted_at IS NOT NULL")[0]
    # what was stored: each session's live rows are exactly what its client sent and got
    lost = dup = 0
    for k, (history, _) in enumerate(results):
        # the last answer is stored too; the proxy stores what the client sent, then the reply
        stored = column(
            db_dsn,
            "SELECT json_build_array(role, message->>'tool_call_id')::text"
            " FROM messages WHERE session_id = $1 AND superseded_at IS NULL"
            " ORDER BY pos",
            f"load-{k}",
        )
        sent = [
            [m["role"], m.get("tool_call_id")]
            for m in history
            if not (m["role"] == "tool" and m is history[-1])
        ]
        stored_rows = [json.loads(s) for s in stored]
        expected = sent[: len(stored_rows)] if len(stored_rows) <= len(sent) else sent
        lost += max(0, len(sent) - len(stored_rows))
        dup += max(0, len(stored_rows) - len(sent))
        assert stored_rows == expected, f"load-{k}"
    requests = sessions * steps
    figures.add(
        tried=requests,
        sessions=sessions,
        steps=steps,
        errors=sum(e for _, e in results),
        requests_per_s=requests / elapsed,
        seconds=elapsed,
        tool_results_truncated=truncated,
        rows_evicted=evicted,
        lost=lost,
        duplicated=dup,
        pairing_errors=len(bad),
    )
    assert not bad, bad[:5]
    assert lost == dup == 0
    assert truncated > 0 and evicted > 0


@pytest.mark.timeout(300)
def test_sixty_four_sessions_of_thirty_streamed_tool_steps(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, figures: Figures
) -> None:
    """64 sessions × 30 streamed tool steps, truncating and evicting: no error, loss, bad pair."""
    run_load(tmp_path, db_dsn, fake_upstream, figures, sessions=64, steps=30)


@pytest.mark.soak
@pytest.mark.timeout(1800)
def test_sixty_four_sessions_of_ninety_streamed_tool_steps(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, figures: Figures
) -> None:
    """64 sessions × 90 streamed tool steps, truncating and evicting: no error, loss, bad pair."""
    run_load(tmp_path, db_dsn, fake_upstream, figures, sessions=64, steps=90)
