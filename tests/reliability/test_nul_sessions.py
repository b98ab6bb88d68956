"""Issue 21, item 1, at volume: many sessions whose every turn carries NULs (in tool
results long enough to be cut and spilled, in short ones, in tool_call_ids), streamed and
not, each turn resent once: every request answers 200, the provider receives the NULs the
client sent, and each session stores every message once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from proxy.settings import Settings
from tests.fakes.replies import RecordedRequest, reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.test_nul_characters import binary_output
from tests.integration.conftest import column
from tests.reliability.conftest import Figures, ProxyServer, write_config

SESSIONS, TURNS = 12, 4


def _calls(n: int) -> list[dict[str, Any]]:
    """The tool calls the fake answers to a prompt of ``n`` messages."""
    return [
        tool_call("cat", {"path": f"bin{n}"}, id=f"call\x00{n}"),
        tool_call("cat", {"path": f"small{n}"}, id=f"call_s{n}"),
    ]


def _answer(req: RecordedRequest) -> Any:
    return reply(None, tool_calls=_calls(len(req.json["messages"])))


def _session(origin: str, k: int) -> tuple[int, list[dict[str, Any]]]:
    sid = f"nul-{k}"
    history: list[dict[str, Any]] = [{"role": "user", "content": f"cat binaries \x00 {k}"}]
    sent = 0
    with httpx.Client(
        base_url=origin,
        timeout=30,
        headers={"authorization": "Bearer sk-test-client", "x-session-id": sid},
    ) as http:
        for t in range(TURNS):
            for _ in range(2):  # the turn, then the same history resent
                r = http.post(
                    "/v1/chat/completions",
                    json={"model": "gpt-4o", "messages": history, "stream": bool(t % 2)},
                )
                sent += 1
                assert r.status_code == 200, (sid, t, r.text[:300])
            calls = _calls(len(history))  # what the fake answered
            history.append({"role": "assistant", "content": None, "tool_calls": calls})
            for c in calls:
                text = (
                    binary_output(6000, f"{sid}-{t}")
                    if "\x00" in c["id"]
                    else f"ELF\x00\x01 {sid} {t}\x00"
                )
                history.append({"role": "tool", "tool_call_id": c["id"], "content": text})
    return sent, history


def test_sessions_full_of_nul_characters_answer_200_and_store_each_message_once(
    db_dsn: str, fake_upstream: FakeUpstream, tmp_path: Path, figures: Figures
) -> None:
    """NULs in tool results and tool_call_ids, across sessions and resends: all 200."""
    fake_upstream.default = _answer
    config = write_config(
        tmp_path / "agents.json",
        fake_upstream.url,
        context={
            "toolOutput": {"maxChars": 2000, "persistRaw": True},
            "summarize": {"enabled": False},
        },
    )
    proxy = ProxyServer(
        Settings(database_url=db_dsn, config=config, keepalive_seconds=1, watch_config=False)
    ).start()
    try:
        with ThreadPoolExecutor(6) as pool:
            results = list(pool.map(lambda k: _session(proxy.origin, k), range(SESSIONS)))
    finally:
        proxy.stop()
    ids_seen = nul_ids = 0
    for body in fake_upstream.bodies():
        for m in body["messages"]:
            if m.get("role") == "tool":
                ids_seen += 1
                nul_ids += "\x00" in m["tool_call_id"]
                if m["tool_call_id"].startswith("call_s"):
                    assert "\x00" in m["content"]  # short results reach the provider intact
    stored = 0
    for k, (_, history) in enumerate(results):
        rows = column(
            db_dsn,
            "SELECT count(*) FROM messages WHERE session_id = $1 AND superseded_at IS NULL",
            f"nul-{k}",
        )[0]
        # the last turn's tool results were never sent; its reply was stored
        assert rows == len(history) - 2, (k, rows, len(history))
        stored += rows
    requests = sum(sent for sent, _ in results)
    figures.add(
        tried=requests,
        sessions=SESSIONS,
        tool_results_with_nul_ids=nul_ids,
        tool_results_sent_upstream=ids_seen,
        rows_stored=stored,
    )
    assert nul_ids > 0
