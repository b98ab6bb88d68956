"""What retrieval costs in statements (issue 22 item 3): a new turn with retrieval on is the
common case's two statements, the search, and the step's write (``PERSIST_STEP``) that
stores its ``context.retrieval`` event before the provider call; the answer the turn keeps
rides in the statement that stores the reply. A later step of the turn searches nothing and
writes no event: the common two.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.cascade.types import RETRIEVAL
from proxy.settings import Settings
from proxy.store import embeddings, steps, writes
from tests.fakes.replies import reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import write_config
from tests.integration.api.reconcile_helpers import QueryLog, statements
from tests.integration.api.test_events import user
from tests.integration.conftest import column


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    ctx = {"retrieval": {"enabled": True, "minScore": 0.0, "timeoutMs": 10_000}}
    return write_config(tmp_path / "agents.json", fake_upstream.url, context=ctx)


@pytest.fixture
def app_client(db_dsn: str, config_path: Path) -> Iterator[TestClient]:
    settings = Settings(database_url=db_dsn, config=config_path, watch_config=False)
    with TestClient(create_app(settings), headers={"authorization": "Bearer sk-test-client"}) as c:
        yield c


def _post(client: TestClient, sid: str, history: list[Any]) -> dict[str, Any]:
    resp = client.post(
        "/v1/chat/completions",
        json={"model": "gpt-4o", "messages": history},
        headers={"x-session-id": sid},
    )
    assert resp.status_code == 200, resp.text
    return resp.json()["choices"][0]["message"]  # type: ignore[no-any-return]


def test_a_new_turn_costs_the_search_and_its_event_rides_with_the_reply(
    app_client: TestClient, fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    history: list[Any] = [{"role": "system", "content": "S"}, user("the server uses port 8443")]
    history.append(_post(app_client, "st", history))
    log = QueryLog(app_client.app_state["chat"].pool)
    app_client.app_state["chat"].pool = log
    history.append(user("which port does the server use?"))
    fake_upstream.default = reply(None, tool_calls=[tool_call("sh", {}, id="t1")])
    history.append(_post(app_client, "st", history))
    assert statements(log) == [
        steps.BEGIN_STEP,
        embeddings.SEARCH,
        writes.PERSIST_STEP,  # the event alone: nothing evicted or trimmed on this step
        steps.RECORD_STEP,
    ]
    persist = [q for q in log.queries if q.query == writes.PERSIST_STEP][0]
    assert RETRIEVAL in persist.args[7]  # the events' names
    record = [q for q in log.queries if q.query == steps.RECORD_STEP][0]
    assert "retrieval" in json.loads(record.args[13])  # the kept answer goes with the reply
    events = column(
        db_dsn, "SELECT count(*) FROM events WHERE session_id = 'st' AND name = $1", RETRIEVAL
    )
    assert events == [2]  # one a turn, the first turn's too
    # a step inside the turn: the common two statements, no search, no event
    log.queries.clear()
    history.append({"role": "tool", "tool_call_id": "t1", "content": "ok"})
    fake_upstream.default = reply("done")
    _post(app_client, "st", history)
    assert statements(log) == [steps.BEGIN_STEP, steps.RECORD_STEP]
