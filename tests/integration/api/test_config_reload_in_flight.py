"""A reload racing a request: the request runs on the config in force as its handler began,
to its last internal round, and the next request gets the new one (README, Decisions)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.cascade.types import CONFIG_RELOADED
from tests.fakes.replies import Pacer, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import (
    Agent,
    Model,
    compaction_events,
    stack,
    wait_until,
)
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.api.read_tool_output_helpers import chat, context, history, read_call
from tests.integration.api.test_config_reload import save
from tests.integration.api.test_config_reload_operator import _until
from tests.integration.api.test_events import user
from tests.integration.transcripts import blob


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    return write_config(tmp_path / "agents.json", fake_upstream.url, context=context())


@pytest.fixture
def second_upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as fake:
        yield fake


def test_a_request_keeps_its_config_through_its_internal_rounds(
    proxy: ProxyServer,
    config_path: Path,
    fake_upstream: FakeUpstream,
    second_upstream: FakeUpstream,
    tmp_path: Path,
) -> None:
    """The model's ``read_tool_output`` call is answered by the proxy and the model asked
    again: that second round goes to the provider of the first, though the file now names
    another."""
    held = Pacer(first=True)  # the first round's answer waits until the reload is applied
    fake_upstream.script(
        reply(None, tool_calls=[read_call("int_1", id="call_big")], pacer=held),
        reply("done"),
    )
    answer: list[Any] = []
    request = threading.Thread(
        target=lambda: answer.append(chat(proxy, "s", history("call_big", blob(9000, "big"))))
    )
    request.start()
    fake_upstream.wait_for_requests(1)
    save(config_path, write_config(tmp_path / "next.json", second_upstream.url).read_text())
    _until(proxy, 0, 1)  # reloaded while the first round waits for its answer
    held.allow(10)
    request.join(15)
    assert answer and answer[0].choices[0].message.content == "done"
    assert len(fake_upstream.bodies()) == 2
    assert second_upstream.bodies() == []

    chat(proxy, "s2", [{"role": "user", "content": "hi"}])
    assert len(second_upstream.bodies()) == 1


def test_a_background_compaction_keeps_its_config_through_a_reload(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, second_upstream: FakeUpstream
) -> None:
    """Started under one config, the compaction is of that config to its end (README,
    Decisions): a reload that moves the provider and turns summarize off while its fast
    model answers leaves its summary written, by the old provider; the next request gets the
    new config."""
    pacer = Pacer()
    second_upstream.default = Model()
    with stack(tmp_path, db_dsn, fake_upstream, Model(fast_pacer=pacer)) as s:
        agent = Agent(s.client("bg"))
        agent.fill(5)
        wait_until(s.fast_bodies, what="the background compaction's fast call")
        holder = s.proxy.state("config")
        moved = json.loads(holder.path.read_text())
        moved["providers"]["openai"]["baseUrl"] = second_upstream.url
        moved["context"]["summarize"]["enabled"] = False
        holder.path.write_text(json.dumps(moved))
        assert holder.reload()[0] == CONFIG_RELOADED
        pacer.allow(1000)
        wait_until(lambda: s.summaries("bg"), what="the summary")
        assert [e["name"] for e in compaction_events(s, "bg")][-1] == "context.compaction.completed"
        assert second_upstream.bodies() == []

        before = len(fake_upstream.bodies())
        agent.say("next")
    assert len(fake_upstream.bodies()) == before
    assert [b["messages"][-1] for b in second_upstream.bodies()] == [user("next")]
