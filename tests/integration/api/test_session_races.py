"""The session API's operations raced against a streamed chat (black-box, two replicas).

Branch, reset, DELETE and compact issued while a streamed answer is held mid-stream and
while a ``read_tool_output`` internal round is held, from the replica serving the session
and from the other one, with and without the chat's client hanging up; two branches at
once, a branch of a session being deleted, a reset or a DELETE beside a chat that resends
the history; an operation whose own client leaves while it waits. Every wait is on a gate
(a :class:`~tests.fakes.replies.Pacer`) or a condition, never a sleep; what each race ends
with is checked by ``session_races.check_store``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.replies import Pacer, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import Model, stack, wait_until
from tests.integration.api.read_tool_output_helpers import (
    CLIENT_TOOLS,
    context,
    history,
    read_call,
)
from tests.integration.api.session_races import (
    TENANT,
    H,
    Held,
    a,
    chat,
    check_answers,
    check_store,
    in_threads,
    joined,
    live,
    matrix,
    op_call,
    stream_in,
    u,
)
from tests.integration.transcripts import blob

STREAM_OPS = "branch reset delete compact two-branches branch-delete reset-chat delete-chat"


@pytest.mark.parametrize(
    ("op", "replica", "hang_up"),
    matrix(
        [(op, r, h) for op in STREAM_OPS.split() for r in (0, 1) for h in (False, True)],
        [("two-branches", 1, False), ("delete-chat", 1, True)],
    ),
)
def test_operations_mid_stream(
    tmp_path: Path,
    db_dsn: str,
    fake_upstream: FakeUpstream,
    op: str,
    replica: int,
    hang_up: bool,
) -> None:
    """Races: branch, reset, DELETE, compact mid-stream, on either replica, with hang-ups."""
    held = Held()
    with stack(tmp_path, db_dsn, fake_upstream, Model(main=held), replicas=2) as s:
        here, there = s.servers[replica].origin, s.servers[1 - replica].origin
        assert chat(s.proxy.origin, "race", [u("one")]).status_code == 200
        s.settle("race", 1)
        sent = [u("one"), a("ok"), u("slow")]
        leave = threading.Event()
        streaming, first = stream_in(s.proxy.origin, "race", sent, leave if hang_up else None)
        assert first.wait(10)
        resend = [*sent, a("slow answer"), u("again")]
        ops: dict[str, list[Callable[[], Any]]] = {
            "two-branches": [
                lambda: op_call(here, "branch", "race", None),
                lambda: op_call(there, "branch", "race", None),
            ],
            "branch-delete": [
                lambda: op_call(here, "branch", "race"),
                lambda: op_call(there, "delete", "race"),
            ],
            "reset-chat": [
                lambda: op_call(here, "reset", "race"),
                lambda: chat(there, "race", resend),
            ],
            "delete-chat": [
                lambda: op_call(here, "delete", "race"),
                lambda: chat(there, "race", resend),
            ],
        }
        threads, results = in_threads(*ops.get(op, [lambda: op_call(here, op, "race")]))
        leave.set()
        held.pacer.allow(20)
        joined([streaming, *threads])
        check_answers(results)
        check_store(s, there, "race", deleted=op == "delete")


@pytest.mark.parametrize(
    ("op", "replica", "hang_up"),
    matrix(
        [
            (op, r, h)
            for op in ("branch", "reset", "delete", "compact")
            for r in (0, 1)
            for h in (False, True)
        ],
        [("branch", 1, True)],
    ),
)
def test_operations_mid_internal_round(
    tmp_path: Path,
    db_dsn: str,
    fake_upstream: FakeUpstream,
    op: str,
    replica: int,
    hang_up: bool,
) -> None:
    """Races: branch, reset, DELETE, compact during a read_tool_output internal round."""
    cut = {"toolOutput": context()["toolOutput"]}  # a result cut, its raw output kept
    with stack(tmp_path, db_dsn, fake_upstream, Model(), replicas=2, context=cut) as s:
        round1 = Pacer(patience=15)
        fake_upstream.script(
            reply(None, tool_calls=[read_call(id="call_big", offset=0)]),
            reply("done reading", chunks=4, pacer=round1),
        )
        round_held = threading.Event()
        sent = history("call_big", blob(9000, "big"))
        streaming, first = stream_in(
            s.proxy.origin, "race", sent, round_held if hang_up else None, tools=CLIENT_TOOLS
        )
        fake_upstream.wait_for_requests(2, timeout=10)  # the internal round, held
        round_held.set()
        assert first.wait(10)
        threads, results = in_threads(lambda: op_call(s.servers[replica].origin, op, "race"))
        round1.allow(10)
        joined([streaming, *threads])
        check_answers(results)
        check_store(s, s.servers[1].origin, "race", deleted=op == "delete")


@pytest.mark.parametrize(
    ("op", "replica"),
    matrix([(op, r) for op in ("branch", "reset", "delete") for r in (0, 1)], [("delete", 1)]),
)
def test_an_operation_whose_client_leaves_changes_nothing(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, op: str, replica: int
) -> None:
    """Races: an operation whose own client leaves while it waits changes nothing."""
    held = Held()
    with stack(tmp_path, db_dsn, fake_upstream, Model(main=held), replicas=2) as s:
        assert chat(s.proxy.origin, "race", [u("one")]).status_code == 200
        s.settle("race", 1)
        sent = [u("one"), a("ok"), u("slow")]
        streaming, first = stream_in(s.proxy.origin, "race", sent, None)
        assert first.wait(10)
        with pytest.raises(httpx.ReadTimeout):  # its client gives up while it waits
            httpx.request(
                "DELETE" if op == "delete" else "POST",
                f"{s.servers[replica].origin}/v1/sessions/race"
                + ("" if op == "delete" else f"/{op}"),
                headers=H,
                json={"id": "copy"} if op == "branch" else None,
                timeout=httpx.Timeout(10, read=0.5),
            )
        wait_until(lambda: s.servers[replica].queued(TENANT, "race") == 1 - replica, 10, "left")
        held.pacer.allow(20)
        joined([streaming])
        assert [r["id"] for r in s.query("SELECT id FROM sessions")] == ["race"]
        assert len(live(s, "race")) == 4
        check_store(s, s.servers[1].origin, "race")
