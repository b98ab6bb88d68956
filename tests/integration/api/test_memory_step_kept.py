"""The memory block's step is held from the session's last turn (``memory_block.factor_step``):
the service hands each turn's first step what the session kept for its last turn, so a
ratio that slipped just under a step's edge keeps the step the last turn cut at."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.cascade.memory_block import FACTOR_STEP
from proxy.cascade.overflow import GUARD_MARGIN
from proxy.settings import Settings
from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.test_recitation import HEADERS
from tests.integration.api.test_two_phases import _config
from tests.integration.conftest import column, execute, run_sync

EDGE = FACTOR_STEP / GUARD_MARGIN  # the ratio whose guard factor is one step exactly


@pytest.fixture
def client(db_dsn: str, tmp_path: Path, fake_upstream: FakeUpstream) -> Iterator[TestClient]:
    path = tmp_path / "agents.json"
    path.write_text(_config(path, fake_upstream.url, recitation=False))
    settings = Settings(database_url=db_dsn, config=path, watch_config=False)
    fake_upstream.default = reply("ok")
    with TestClient(create_app(settings), headers=HEADERS) as c:
        yield c


def test_a_turn_holds_the_step_its_sessions_last_turn_cut_at(
    client: TestClient, db_dsn: str
) -> None:
    history: list[dict[str, str]] = [{"role": "system", "content": "S"}]
    steps = []
    for n, ratio in enumerate([None, EDGE * 1.02, EDGE * 0.98]):
        if ratio is not None:  # as the last reply's usage would have moved it
            run_sync(execute(db_dsn, f"UPDATE sessions SET calibration = {ratio!r}"))
        history.append({"role": "user", "content": f"turn {n}"})
        resp = client.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": history},
            headers={"x-session-id": "held"},
        )
        assert resp.status_code == 200, resp.text
        history.append(resp.json()["choices"][0]["message"])
        (kept,) = column(db_dsn, "SELECT turn_blocks FROM sessions")
        steps.append(json.loads(kept)["memory"]["step"])
    assert steps == [1, 2, 2]
