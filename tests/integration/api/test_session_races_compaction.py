"""The session API's operations raced against a background compaction and each other.

Branch, reset (alone, and with the history resent at once), compact, DELETE (alone, and
with the id reused at once by a chat resending the history) and a chat, issued while a
background compaction waits on the fast model, from either replica; two compactions at
once; an event stream open across a DELETE and the id's reuse. Every wait is on a gate or
a condition; what each race ends with is checked by ``session_races.check_store``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.replies import Pacer
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import Agent, Model, stack, wait_until
from tests.integration.api.session_races import (
    TENANT,
    H,
    a,
    chat,
    check_answers,
    check_store,
    in_threads,
    joined,
    matrix,
    op_call,
    u,
)

COMPACTION_OPS = "branch reset reset-resend compact delete delete-reuse chat"


@pytest.mark.parametrize(
    ("op", "replica"),
    matrix([(op, r) for op in COMPACTION_OPS.split() for r in (0, 1)], [("reset-resend", 1)]),
)
def test_operations_mid_compaction(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, op: str, replica: int
) -> None:
    """Races: branch, reset, DELETE, compact, a chat during a background compaction."""
    held = Pacer(first=True)  # the briefing, until the operation is answered
    model = Model(fast_pacer=held)
    with stack(tmp_path, db_dsn, fake_upstream, model, replicas=2) as s:
        here, there = s.servers[replica].origin, s.servers[1 - replica].origin
        agent = Agent(s.client("race"))
        agent.fill()
        wait_until(lambda: model.fast_times, 20, "the fast model's call")

        def resend(origin: str, text: str) -> httpx.Response:
            return chat(origin, "race", [*agent.messages, u(text)])

        ops: dict[str, list[Callable[[], Any]]] = {
            "reset-resend": [
                lambda: op_call(here, "reset", "race"),
                lambda: resend(there, "resent"),
            ],
            "delete-reuse": [
                lambda: op_call(here, "delete", "race"),
                lambda: resend(there, "the same id again"),
            ],
            "chat": [lambda: resend(here, "meanwhile")],
        }
        steps = ops.get(op, [lambda: op_call(here, op, "race")])
        answers: list[Any] = []
        if op != "compact":  # the others never wait for a compaction
            answers = [step() for step in steps]
        threads, results = in_threads(*steps[len(answers) :])
        held.allow(30)
        joined(threads)
        check_answers(results | dict(enumerate(answers, len(results))))
        wait_until(lambda: not any(p.compacting(TENANT, "race") for p in s.servers), 30, "end")
        check_store(s, there, "race", deleted=op == "delete")


@pytest.mark.parametrize("replicas", matrix([(0, 0), (0, 1), (1, 1)], [(0, 1)]))
def test_two_compactions_at_once(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, replicas: tuple[int, int]
) -> None:
    """Races: two compactions of one session at once: one compacts, the store stays consistent."""
    held = Pacer(first=True)
    model = Model(fast_pacer=held)
    quiet = {"softFraction": 0.99, "hardFraction": 0.995}  # only the API compacts
    with stack(tmp_path, db_dsn, fake_upstream, model, replicas=2, summarize=quiet) as s:
        Agent(s.client("race")).fill(4)
        threads, results = in_threads(
            *(lambda r=r: op_call(s.servers[r].origin, "compact", "race") for r in replicas)
        )
        wait_until(lambda: model.fast_times, 20, "the fast model's call")
        held.allow(60)
        joined(threads)
        check_answers(results)
        assert sorted(r.json()["compacted"] for r in results.values()) == [False, True]
        check_store(s, s.servers[1].origin, "race")


def test_an_event_stream_ends_at_a_delete_before_the_id_is_reused(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """Races: an event stream ends at a DELETE before the session id is used again."""
    with stack(tmp_path, db_dsn, fake_upstream, Model(), replicas=2) as s:
        assert chat(s.proxy.origin, "race", [u("one")]).status_code == 200
        s.settle("race", 1)
        ids: list[str] = []

        def listen() -> None:
            with (
                httpx.Client(timeout=20) as c,
                c.stream(
                    "GET",
                    f"{s.servers[1].origin}/v1/sessions/race/events",
                    headers={**H, "Last-Event-ID": "0"},
                ) as resp,
            ):
                for line in resp.iter_lines():
                    if line.startswith("id:"):
                        ids.append(line[3:].strip())

        threads, _ = in_threads(listen)
        wait_until(lambda: ids, 10, "the replay (the stream subscribes before it)")
        assert op_call(s.proxy.origin, "delete", "race").status_code == 200
        assert chat(s.proxy.origin, "race", [u("one"), a("ok"), u("two")]).status_code == 200
        joined(threads)
        new = {str(r["id"]) for r in s.query("SELECT id FROM events WHERE session_id = 'race'")}
        assert ids and not set(ids) & new
