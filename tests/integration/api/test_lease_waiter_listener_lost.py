"""A waiter for a session another replica holds, whose replica's event listener is lost while
it waits (its backend ended): the release's ``cascade_lease`` notification reaches nobody
there, so the waiter takes the session at its next poll, within ``POLL_MAX_SECONDS`` as
README says; with the listener back, the next handoff goes through as before.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.fakes.replies import Pacer
from tests.integration.api.conftest import StartProxy, wait_for
from tests.integration.api.test_events_listener_lost import _end_listener, _listener_pid
from tests.integration.api.test_lease_handoff import (
    AUTH,
    PATIENCE,
    Pause,
    chat,
    held,
    pauses,
)

__all__ = ["held", "pauses"]  # the handoff test's fixtures


def test_a_waiter_whose_listener_was_lost_takes_the_session_at_its_poll(
    start_proxy: StartProxy,
    config_path: Path,
    db_dsn: str,
    held: dict[str, Pacer],
    pauses: list[Pause],
) -> None:
    a, b = (start_proxy(config_path) for _ in range(2))
    with (
        httpx.Client(base_url=a.origin, headers=AUTH, timeout=PATIENCE) as ca,
        httpx.Client(base_url=b.origin, headers=AUTH, timeout=PATIENCE) as cb,
        ThreadPoolExecutor(2) as pool,
    ):
        for i, lose in enumerate((True, False)):
            first = pool.submit(chat, ca, f"A {i}")
            assert wait_for(lambda i=i: f"A {i}" in held, PATIENCE), "A never asked"
            mark = len(pauses)
            second = pool.submit(chat, cb, f"B {i}")
            assert wait_for(lambda m=mark: len(pauses) > m + 2, PATIENCE), "B did not wait"
            if lose:
                lost = _end_listener(b, db_dsn)
                assert wait_for(lambda lost=lost: _listener_pid(b) != lost, PATIENCE)
            held[f"A {i}"].allow(100)
            assert first.result(PATIENCE).status_code == 200
            assert second.result(PATIENCE).status_code == 200, "B never took the session"
            assert wait_for(lambda: _listener_pid(b) is not None, PATIENCE), "not back"
