"""A fast model whose error echoes the credential it was sent (``Incorrect API key provided:
sk-…``, as some OpenAI-compatible servers answer) leaves no credential in the persisted
``context.compaction.failed`` event, whose ``error`` quotes that answer: the event is
replayed to every stream on the session and kept in the events table."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.services.fastmodel import read_fast_answer
from tests.fakes.replies import RecordedRequest, error
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import (
    CLIENT_KEY,
    Agent,
    Model,
    Stack,
    stack,
    wait_until,
)


def _echo(req: RecordedRequest) -> Any:
    sent = req.headers.get("authorization", "").removeprefix("Bearer ")
    body = {"error": {"message": f"Incorrect API key provided: {sent}.", "code": "bad_key"}}
    return error(401, body)


def test_the_failed_event_names_no_credential(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model()
    with stack(tmp_path, db_dsn, fake_upstream, model) as s:
        fake_upstream.default = lambda req: (
            _echo(req) if req.json.get("model") in model.fast else model(req)
        )
        Agent(s.client("echo")).fill()  # the fifth turn starts a compaction, which fails
        wait_until(lambda: _failed(s), what="the failure")
        (failed,) = _failed(s)
        stored = s.query("SELECT data::text AS data FROM events WHERE session_id = 'echo'")
    assert "Incorrect API key provided" in failed["error"], failed
    assert CLIENT_KEY not in json.dumps(failed), failed
    assert not [r for r in stored if CLIENT_KEY in r["data"]]


def _failed(s: Stack) -> list[dict[str, Any]]:
    return s.events("echo", "context.compaction.failed")


def test_the_providers_own_key_is_scrubbed_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASCADE_TEST_FAST_KEY", "sk-provider-0123456789\n")
    job = SimpleNamespace(provider=SimpleNamespace(api_key_env="CASCADE_TEST_FAST_KEY"), headers={})
    answer = SimpleNamespace(
        status_code=401, text='{"error": {"message": "bad key sk-provider-0123456789"}}'
    )
    status, text = read_fast_answer(job, answer)
    assert status == 401 and text == '{"error": {"message": "bad key [REDACTED]"}}'
