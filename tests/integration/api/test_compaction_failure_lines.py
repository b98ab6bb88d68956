"""README On call's "compaction failing" row for a background compaction, through the proxy:
its fast model failing every attempt is one WARNING naming the session, its attempts and
its backoff, each attempt an INFO line, and every one of those lines carries the id of the
request that started it (README Decisions: the work a request set off keeps its id), as
the JSON formatter writes them when written."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.logs import JsonFormatter
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import Agent, Model, stack, wait_until


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


@pytest.fixture
def lines() -> Iterator[_Lines]:
    handler = _Lines()
    logging.getLogger().addHandler(handler)
    yield handler
    logging.getLogger().removeHandler(handler)


def test_a_background_compaction_failing_is_one_warning_with_its_requests_id(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, lines: _Lines
) -> None:
    model = Model(fast_failures=100)  # every fast-model call a 500
    with stack(tmp_path, db_dsn, fake_upstream, model) as s:
        Agent(s.client("bg-fails")).fill()
        wait_until(lambda: s.events("bg-fails", "context.compaction.failed"), what="the failure")
        (event,) = s.events("bg-fails", "context.compaction.failed")
    mine = [x for x in lines.lines if x["logger"] == "cascade.compaction"]
    mine = [x for x in mine if "bg-fails" in x["message"]]
    (warning,) = [x for x in mine if x["level"] != "INFO"]
    assert warning["level"] == "WARNING"
    attempts = event["attempts"]
    assert warning["message"].startswith(
        f"compaction of bg-fails failed after {attempts} attempt(s), the next in "
    )
    assert "fast model answered 500" in warning["message"]
    tried = [x for x in mine if " attempt " in x["message"]]
    assert len(tried) == attempts and all(x["level"] == "INFO" for x in tried)
    (started_by,) = {x.get("request_id") for x in [warning, *tried]}
    assert started_by is not None
