"""/readyz's shared check (proxy.store.readiness): one in flight, its answer reused a while."""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.store.readiness import REUSE_SECONDS, SharedCheck, database_failure


class Probe:
    """A check that counts its calls and answers only when ``go`` is set."""

    def __init__(self) -> None:
        self.calls = 0
        self.go = asyncio.Event()
        self.answer: str | None = None

    async def __call__(self) -> str | None:
        self.calls += 1
        await self.go.wait()
        return self.answer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_concurrent_callers_share_one_check_in_flight() -> None:
    async def run() -> tuple[int, list[str | None]]:
        probe = Probe()
        shared = SharedCheck(probe)
        waiters = [asyncio.create_task(shared.result()) for _ in range(50)]
        await asyncio.sleep(0)
        probe.answer = "PoolExhausted"
        probe.go.set()
        answers = await asyncio.gather(*waiters)
        return probe.calls, answers

    calls, answers = asyncio.run(run())
    assert calls == 1
    assert answers == ["PoolExhausted"] * 50


def test_an_answer_is_reused_for_the_window_from_the_checks_start() -> None:
    async def run() -> list[int]:
        probe, clock = Probe(), Clock()
        probe.go.set()
        shared = SharedCheck(probe, clock=clock)
        seen = []
        for step in (0.0, 0.5, REUSE_SECONDS - 0.5 - 0.01, 0.01, 0.2):
            clock.now += step
            await shared.result()
            seen.append(probe.calls)
        return seen

    # a check at 0, reused at 0.5 and 0.99; a new one at 1.0, reused at 1.2
    assert asyncio.run(run()) == [1, 1, 1, 2, 2]


def test_forget_makes_the_next_caller_check_again() -> None:
    async def run() -> tuple[str | None, str | None, int]:
        probe = Probe()
        probe.go.set()
        shared = SharedCheck(probe, clock=Clock())
        first = await shared.result()
        shared.forget(object())  # as a connection's termination listener calls it
        probe.answer = "ConnectionRefusedError"
        return first, await shared.result(), probe.calls

    assert asyncio.run(run()) == (None, "ConnectionRefusedError", 2)


def test_forget_during_a_check_still_answers_its_waiters_then_checks_again() -> None:
    async def run() -> tuple[str | None, int, int]:
        probe = Probe()
        shared = SharedCheck(probe, clock=Clock())
        waiting = asyncio.create_task(shared.result())
        await asyncio.sleep(0)
        joined = asyncio.create_task(shared.result())
        await asyncio.sleep(0)
        shared.forget()
        probe.go.set()
        await waiting
        during = probe.calls
        answer = await joined
        await shared.result()
        return answer, during, probe.calls

    assert asyncio.run(run()) == (None, 1, 2)


def test_a_cancelled_caller_leaves_the_check_to_the_others() -> None:
    async def run() -> tuple[str | None, int]:
        probe = Probe()
        shared = SharedCheck(probe)
        gone = asyncio.create_task(shared.result())
        stays = asyncio.create_task(shared.result())
        await asyncio.sleep(0)
        gone.cancel()
        await asyncio.sleep(0)
        probe.answer = "TimeoutError"
        probe.go.set()
        return await stays, probe.calls

    assert asyncio.run(run()) == ("TimeoutError", 1)


class FakeConn:
    def __init__(self, fail: Exception | None) -> None:
        self.fail = fail
        self.listeners: list[Any] = []

    def add_termination_listener(self, callback: Any) -> None:
        self.listeners.append(callback)

    async def fetchval(self, sql: str, timeout: float) -> int:
        if self.fail is not None:
            raise self.fail
        return 1


class FakePool:
    def __init__(self, conn: FakeConn) -> None:
        self.conn = conn

    def acquire(self, timeout: float) -> Any:
        conn = self.conn

        class Borrowed:
            async def __aenter__(self) -> FakeConn:
                return conn

            async def __aexit__(self, *exc: object) -> None:
                return None

        return Borrowed()


def test_the_database_check_names_the_failure_class_and_watches_its_connection() -> None:
    def lost(conn: Any) -> None:
        return None

    ok, failed = FakeConn(None), FakeConn(OSError("db.internal:5432 refused"))
    assert asyncio.run(database_failure(FakePool(ok), lost)) is None
    assert asyncio.run(database_failure(FakePool(failed), lost)) == "OSError"
    assert ok.listeners == [lost] and failed.listeners == [lost]
