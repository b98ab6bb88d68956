"""The background sweep of interrupted compactions logs the first refused pass of each run
of refusals (then every 60th): a refusal after a pass the database answered is news."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.services import interrupted


async def test_a_refusal_after_an_answered_pass_is_logged_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    script: list[Any] = [
        RuntimeError("read-only transaction"),
        (0, {("t", "s")}),  # the database answers: the session's claim is held
        RuntimeError("statement cancelled"),
        (1, set()),
    ]

    async def scripted(held: Any, quiet: bool = False) -> Any:
        step = script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step

    closer = interrupted.Closer(None, None, SimpleNamespace(ttl=0.003), 1.0)  # type: ignore[arg-type]
    closer._pass = scripted  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger=interrupted.log.name):
        await closer._again({("t", "s")})
    assert not script
    assert "read-only transaction" in caplog.text
    assert "statement cancelled" in caplog.text, "a new run of refusals went unlogged"
