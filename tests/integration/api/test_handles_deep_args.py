"""A client's tool result whose handle marker holds arguments nested past Python's recursion
limit, on a request without tools (its handles are reworded as handles no tool reads): the
marker is no handle of the proxy's, sent as the client wrote it, not a 500.

The marker's arguments are read to see whether they name the result's own handle; the read
raised RecursionError, no ValueError."""

from __future__ import annotations

import httpx
import pytest

from tests.fakes.replies import reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.reconcile_helpers import MODEL, user

ARGS = '{"id": "c1", "x": ' + "[" * 10_000 + "]" * 10_000 + "}"
TEXTS = {
    "cut": f"head\n[... truncated 5 chars; read the rest with read_tool_output({ARGS}) ...]\ntail",
    "compacted": (
        f"[compacted losslessly from json; the exact original: read_tool_output({ARGS})]\nx"
    ),
}


@pytest.mark.parametrize("kind", list(TEXTS))
def test_a_handle_marker_with_deep_arguments_goes_as_written(
    http: httpx.Client, fake_upstream: FakeUpstream, kind: str
) -> None:
    messages = [
        user("look"),
        {"role": "assistant", "content": None, "tool_calls": [tool_call("f", {}, id="c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": TEXTS[kind]},
        user("and?"),
    ]
    fake_upstream.script(reply("fine"))
    asked = {"model": MODEL, "messages": messages}
    sid = f"deep-{kind}"
    answer = http.post("/v1/chat/completions", json=asked, headers={"X-Session-Id": sid})
    assert answer.status_code == 200, answer.text[:300]
    assert fake_upstream.bodies()[-1]["messages"][2]["content"] == TEXTS[kind]
