"""What the session race tests share (test_session_races.py,
test_session_races_compaction.py): calls on either replica, a streamed chat held mid-answer
on a thread, operations run at once on threads, and the checks every race ends with.

After each race: no 5xx, the stored rows as the client sent them (a branch a prefix of its
parent, a deleted session's rows all gone), compaction events paired and every valid
summary's boundary live, and the next request on every session answered (the lease free).
The suite runs a slice of each matrix (``matrix``); ``CASCADE_TEST_RACES=all``
(``scripts/races.sh``) runs all of it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import httpx

from proxy.session_id import tenant_from_bearer
from tests.fakes.replies import Pacer, RecordedRequest, Reply, reply
from tests.integration.api.compaction_stack import CLIENT_KEY, MAIN, Stack, compaction_events

H = {"authorization": f"Bearer {CLIENT_KEY}"}
TENANT = tenant_from_bearer(H["authorization"])
ALL = os.environ.get("CASCADE_TEST_RACES") == "all"
OWNED = ("messages", "summaries", "tool_raw_outputs", "tool_raw_output_versions", "events")


def matrix(cases: list[Any], slice_: list[Any]) -> list[Any]:
    return cases if ALL else slice_


def u(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def a(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def call(origin: str, method: str, path: str, **kw: Any) -> httpx.Response:
    headers = {**H, **kw.pop("headers", {})}
    return httpx.request(method, origin + path, headers=headers, timeout=30, **kw)


def chat(origin: str, sid: str, messages: list[Any], **body: Any) -> httpx.Response:
    return call(
        origin,
        "POST",
        "/v1/chat/completions",
        headers={"x-session-id": sid},
        json={"model": MAIN, "messages": messages, **body},
    )


def op_call(origin: str, op: str, sid: str, target: str | None = "copy") -> httpx.Response:
    path = f"/v1/sessions/{sid}"
    if op == "delete":
        return call(origin, "DELETE", path)
    body = ({"id": target} if target else {}) if op == "branch" else None
    return call(origin, "POST", f"{path}/{op}", json=body)


class Held:
    """The fake's main model: a turn whose last message is ``slow`` streams ``slow answer``
    as :attr:`pacer` allows; every other turn answers ``ok``."""

    def __init__(self) -> None:
        self.pacer = Pacer(patience=15)

    def __call__(self, req: RecordedRequest) -> Reply:
        if req.json["messages"][-1].get("content") == "slow":
            return reply("slow answer", chunks=5, pacer=self.pacer)
        return reply("ok")


def stream_in(
    origin: str, sid: str, messages: list[Any], hang_up: threading.Event | None, **body: Any
) -> tuple[threading.Thread, threading.Event]:
    """Stream a chat on a thread: ``first`` is set at its first data frame; with
    ``hang_up``, the client leaves once that is set too."""
    first = threading.Event()

    def run() -> None:
        with (
            httpx.Client(timeout=20) as c,
            c.stream(
                "POST",
                f"{origin}/v1/chat/completions",
                headers={**H, "x-session-id": sid},
                json={"model": MAIN, "messages": messages, "stream": True, **body},
            ) as resp,
        ):
            for line in resp.iter_lines():
                if line.startswith("data:"):
                    first.set()
                    if hang_up is not None and hang_up.wait(10):
                        break
        first.set()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, first


def in_threads(*fns: Callable[[], Any]) -> tuple[list[threading.Thread], dict[int, Any]]:
    results: dict[int, Any] = {}

    def run(i: int, fn: Callable[[], Any]) -> None:
        try:
            results[i] = fn()
        except Exception as exc:  # noqa: BLE001 - reported by check_answers
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    return threads, results


def joined(threads: list[threading.Thread]) -> None:
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)


def check_answers(results: dict[int, Any]) -> None:
    for value in results.values():
        assert not isinstance(value, Exception), value
        if isinstance(value, httpx.Response):
            assert value.status_code < 500, value.text


def live(s: Stack, sid: str) -> list[str]:
    rows = s.query(
        "SELECT hash FROM messages WHERE session_id = $1 AND superseded_at IS NULL ORDER BY pos",
        sid,
    )
    return [r["hash"] for r in rows]


def check_store(s: Stack, origin: str, parent: str, *, deleted: bool = False) -> None:
    """Branches are prefixes of ``parent``, compaction events pair, valid summaries' bounds
    are live, a deleted session owns nothing, and each session takes its next request."""
    ids = [r["id"] for r in s.query("SELECT id FROM sessions ORDER BY id")]
    if deleted or parent not in ids:
        counts = [
            s.query(f"SELECT count(*) AS n FROM {t} WHERE session_id = $1", parent) for t in OWNED
        ]
        assert [c[0]["n"] for c in counts] == [0] * len(OWNED)
    for sid in ids:
        if sid != parent and parent in ids:
            copy = live(s, sid)
            assert copy == live(s, parent)[: len(copy)]
        names = [e["name"].rsplit(".", 1)[1] for e in compaction_events(s, sid)]
        assert "".join("(" if n == "started" else ")" for n in names) == "()" * (len(names) // 2)
        for summary in s.summaries(sid):
            if summary["invalidated_at"] is None:
                assert summary["boundary_hash"] in live(s, sid), summary
        sent = call(origin, "GET", f"/v1/sessions/{sid}/messages?form=sent").json()["data"]
        answer = chat(origin, sid, [m["message"] for m in sent] + [u("next")])
        assert answer.status_code == 200, answer.text
