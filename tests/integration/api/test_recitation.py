"""Recitation through the real proxy (issue 22 item 2).

The fake fast model writes a briefing with ``## Open Tasks`` and ``## Next Step``; after a
forced compaction, with ``context.recitation.enabled`` on, the upstream prompt's last message
ends with the ``<plan>`` block (also when it is a tool result), the block is the same bytes on
every step, the stored history never holds it, and a hot reload that turns it off removes it
on the next request. It is off by default.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.cascade.recitation import PLAN_OPEN
from proxy.cascade.types import CONFIG_RELOADED, USAGE
from tests.fakes.replies import reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import FAST, Model
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.api.test_config_reload import named, save
from tests.integration.api.test_events import chat, open_events, user

PLAN = "<plan>\n## Open Tasks\n- finish the fix\n\n## Next Step\nrun the tests\n</plan>"
HEADERS = {"authorization": "Bearer sk-test-client"}


def plan_config(path: Path, url: str, **context: Any) -> str:
    """The text of a config for the plan's tests (a compaction keeps the last two messages,
    eviction is off, the fast model has its own window) with ``context``'s sections added;
    written beside ``path``, so ``save`` can swap it in whole."""
    tmp = write_config(
        path.with_name("next.json"),
        url,
        context={"summarize": {"keepRecent": 2}, "eviction": {"enabled": False}, **context},
        models={"default": {"contextLimit": 128000}, FAST: {"contextLimit": 32000}},
    )
    return tmp.read_text()


def _config(path: Path, url: str, *, recitation: bool) -> str:
    return plan_config(path, url, recitation={"enabled": recitation})


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    path = tmp_path / "agents.json"
    path.write_text(plan_config(path, fake_upstream.url))  # recitation left to its default
    return path


def _last_text(fake: FakeUpstream) -> tuple[str, str]:
    body = [b for b in fake.bodies() if b.get("model") != FAST][-1]
    last = body["messages"][-1]
    return str(last["role"]), str(last.get("content") or "")


def _compact(proxy: ProxyServer, sid: str) -> None:
    resp = httpx.post(f"{proxy.origin}/v1/sessions/{sid}/compact", headers=HEADERS, timeout=10)
    assert resp.status_code == 200, resp.text
    assert resp.json()["version"] == 1


def test_the_plan_rides_at_the_tail_when_on_and_a_reload_removes_it(
    proxy: ProxyServer, config_path: Path, fake_upstream: FakeUpstream
) -> None:
    model = Model()
    fake_upstream.default = model
    history: list[Any] = []
    for i in range(4):
        history += [user(f"task part {i} " + "x" * 400)]
        history.append(chat(proxy.origin, "rec", history))
    _compact(proxy, "rec")

    history.append(user("continue"))
    history.append(chat(proxy.origin, "rec", history))
    assert PLAN_OPEN not in _last_text(fake_upstream)[1], "off by default"

    with open_events(proxy.origin, "rec") as stream:
        stream.until(named(USAGE))
        save(config_path, _config(config_path, fake_upstream.url, recitation=True))
        stream.until(named(CONFIG_RELOADED))

        history.append(user("next please"))
        model.main = lambda req: reply(None, tool_calls=[tool_call("cat", {"p": "a"}, id="c1")])
        history.append(chat(proxy.origin, "rec", history))
        role, text = _last_text(fake_upstream)
        assert role == "user" and text == "next please\n\n" + PLAN

        model.main = lambda req: reply("done")
        history.append({"role": "tool", "tool_call_id": "c1", "content": "file body"})
        history.append(chat(proxy.origin, "rec", history))
        role, text = _last_text(fake_upstream)
        assert role == "tool" and text == "file body\n\n" + PLAN  # the same bytes, moved on
        step = [b for b in fake_upstream.bodies() if b.get("model") != FAST][-1]
        assert (
            sum(PLAN in json.dumps(m) or PLAN in str(m.get("content")) for m in step["messages"])
            == 1
        )

        stored = httpx.get(f"{proxy.origin}/v1/sessions/rec/messages", headers=HEADERS, timeout=5)
        assert stored.status_code == 200 and PLAN_OPEN not in stored.text

        save(config_path, _config(config_path, fake_upstream.url, recitation=False))
        stream.until(named(CONFIG_RELOADED))
    history.append(user("and now?"))
    chat(proxy.origin, "rec", history)
    assert _last_text(fake_upstream) == ("user", "and now?")
