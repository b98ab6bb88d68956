"""A fast model whose error echoes the credential it was sent (``Incorrect API key provided:
sk-…``, as some OpenAI-compatible servers answer) leaves no credential in the persisted
``context.compaction.failed`` event, whose ``error`` quotes that answer (the event is
replayed to every stream on the session and kept in the events table), nor in the log. (The
provider's own key is scrubbed so too: tests/unit/test_credential_scrub.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
from tests.integration.api.conftest import Records


def _echo(req: RecordedRequest) -> Any:
    sent = req.headers.get("authorization", "").removeprefix("Bearer ")
    body = {"error": {"message": f"Incorrect API key provided: {sent}.", "code": "bad_key"}}
    return error(401, body)


def test_the_failed_event_names_no_credential(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, records: Records
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
    logged = [r.getMessage() for r in records.records]
    assert any("Incorrect API key provided: [REDACTED]" in line for line in logged)
    assert not [line for line in logged if CLIENT_KEY in line]


def _failed(s: Stack) -> list[dict[str, Any]]:
    return s.events("echo", "context.compaction.failed")
