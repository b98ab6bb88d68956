"""Regression: a branch read a result cut with no copy kept (``persistRaw`` off) as whole.

A read by bare tool call id tells a cut result from a whole one by its ``context.truncated``
event; a branch copies rows but no events, so there the cut text (marker and all) came back
as the whole output, where its parent answers 404. A live row is whole only when its stored
body is the message the client sent (its chain hash), which a branch copies with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.api.read_tool_output_helpers import chat, context, history
from tests.integration.transcripts import api, blob, read_all


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    ctx = context(persist_raw=False)
    return write_config(tmp_path / "agents.json", fake_upstream.url, context=ctx)


def test_a_branch_reads_a_result_cut_without_a_copy_as_its_parent_does(
    proxy: ProxyServer,
) -> None:
    cut, whole = blob(9000, "cut"), "a short whole output"
    messages = history("call_cut", cut, tag="a")
    chat(proxy, "parent", messages)
    messages += [{"role": "assistant", "content": "ok"}, *history("call_whole", whole, tag="b")]
    chat(proxy, "parent", messages)
    with api(proxy) as http:
        branched = http.post("/v1/sessions/parent/branch", json={"id": "child"})
        assert branched.status_code == 200, branched.text
        for sid in ("parent", "child"):
            gone = http.get(f"/v1/sessions/{sid}/tool-outputs/call_cut")
            assert gone.status_code == 404, (sid, gone.text[:200])
            assert read_all(http, sid, "call_whole") == whole, sid
