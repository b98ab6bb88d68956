"""A reload racing a request: the request runs on the config in force as its handler began,
to its last internal round, and the next request gets the new one (README, Decisions)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.api.read_tool_output_helpers import chat, context, history, read_call
from tests.integration.api.test_config_reload import save
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
    fake_upstream.script(
        reply(None, tool_calls=[read_call("int_1", id="call_big")], first_byte_delay=3.0),
        reply("done"),
    )
    answer: list[Any] = []
    request = threading.Thread(
        target=lambda: answer.append(chat(proxy, "s", history("call_big", blob(9000, "big"))))
    )
    request.start()
    fake_upstream.wait_for_requests(1)
    save(config_path, write_config(tmp_path / "next.json", second_upstream.url).read_text())
    time.sleep(1.5)  # reloaded while the first round waits for its answer
    request.join(15)
    assert answer and answer[0].choices[0].message.content == "done"
    assert len(fake_upstream.bodies()) == 2
    assert second_upstream.bodies() == []

    chat(proxy, "s2", [{"role": "user", "content": "hi"}])
    assert len(second_upstream.bodies()) == 1
