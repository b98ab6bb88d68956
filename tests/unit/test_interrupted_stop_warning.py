"""A stop that cancels a running compaction says so in one WARNING naming the session: the
summary it was making is not stored, and an operator reading the log should not have to wait
for the next start's sweep to learn it. The line names the session only (no tenant: in
pass-through mode that is the client's credential)."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.services import interrupted


@pytest.mark.parametrize("closed", [1, RuntimeError("no database")])
async def test_each_compaction_the_stop_cut_is_one_warning_naming_its_session(
    caplog: pytest.LogCaptureFixture, closed: Any
) -> None:
    async def scripted(only: Any, quiet: bool = False) -> Any:
        if isinstance(closed, Exception):
            raise closed
        return closed, set()

    closer = interrupted.Closer(None, None, SimpleNamespace(ttl=1.0), 1.0)  # type: ignore[arg-type]
    closer._pass = scripted  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger=interrupted.log.name):
        await closer.after_stop({("sk-tenant-secret", "sess-a"), ("sk-tenant-secret", "sess-b")})
    said = [r for r in caplog.records if r.levelno == logging.WARNING and "cancel" in r.message]
    assert sorted(r.message.split("session ")[1].split()[0] for r in said) == [
        "sess-a",
        "sess-b",
    ]
    assert "sk-tenant-secret" not in caplog.text


async def test_a_stop_that_cut_nothing_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    closer = interrupted.Closer(None, None, SimpleNamespace(ttl=1.0), 1.0)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger=interrupted.log.name):
        await closer.after_stop(set())
    assert not caplog.records
