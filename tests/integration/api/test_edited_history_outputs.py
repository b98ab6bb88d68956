"""Regression: a client that edits its history before a cut tool result (a new system
prompt, a corrected user message) has that result stored again, in a new row, as it resends
it. Its spill is the same text, left as it was, older than the new row: the bare id's read
(``GET …/tool-outputs/{id}``, ``read_tool_output({"id": …})``) found no spill as new as the
row and no whole text in it, and answered 404 for a result whose marker the live prompt
still shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.replies import reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import write_config
from tests.integration.api.reconcile_helpers import post, settled, user

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
RESULT = "".join(f"line {i}\n" for i in range(600))


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    context = {"toolOutput": {"maxChars": 1000}}
    return write_config(tmp_path / "agents.json", fake_upstream.url, context=context)


def _page(http: httpx.Client, sid: str, handle: str) -> str:
    resp = http.get(f"/v1/sessions/{sid}/tool-outputs/{handle}", params={"limit": 40})
    assert resp.status_code == 200, resp.text
    return str(resp.json()["page"])


@pytest.mark.parametrize("edit", ["system", "user"])
def test_a_cut_result_resent_after_an_earlier_edit_reads_back_by_its_bare_id(
    http: httpx.Client, fake_upstream: FakeUpstream, edit: str
) -> None:
    sid = f"edited-{edit}"
    fake_upstream.script(reply(None, tool_calls=[tool_call("f", {}, id="c1")]))
    messages: list[Any] = [{"role": "system", "content": "S"}, user("q1")]
    called = post(http, sid, messages, tools=TOOLS)["choices"][0]["message"]
    messages += [called, {"role": "tool", "tool_call_id": "c1", "content": RESULT}]
    post(http, sid, messages, tools=TOOLS)
    settled(http, sid, 5)
    assert "line 0\nline 1\n" in _page(http, sid, "c1")

    edited = {"system": {"role": "system", "content": "S, edited"}, "user": user("q1, fixed")}
    at = 0 if edit == "system" else 1
    messages[at] = edited[edit]
    post(http, sid, [*messages, {"role": "assistant", "content": "ok"}, user("q2")], tools=TOOLS)
    settled(http, sid, 7)
    sent = fake_upstream.bodies()[-1]["messages"][3]["content"]
    assert "c1@3" in sent and len(sent) < len(RESULT)  # cut again, its marker pinned
    assert "line 0\nline 1\n" in _page(http, sid, "c1@3")
    assert "line 0\nline 1\n" in _page(http, sid, "c1")
