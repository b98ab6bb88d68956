"""What the ``read_tool_output`` tests share (test_read_tool_output_answers.py and
test_read_tool_output_rounds.py): a history whose tool output is big enough to be cut, the
model's call to the tool, the config that cuts it, and a check that every tool call in a
history is answered."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tests.fakes.replies import tool_call
from tests.integration.api.conftest import ProxyServer
from tests.integration.transcripts import sdk

MAX_CHARS = 2000
CLIENT_TOOLS = [
    {
        "type": "function",
        "function": {"name": "run_tests", "parameters": {"type": "object", "properties": {}}},
    }
]


def history(cid: str, output: str, *, tag: str = "log") -> list[dict[str, Any]]:
    call = tool_call("read_file", {"path": f"{tag}.txt"}, id=cid)
    return [
        {"role": "user", "content": f"look at {tag}"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": cid, "content": output},
    ]


def read_call(call_id: str = "int_1", **args: Any) -> dict[str, Any]:
    return tool_call("read_tool_output", args, id=call_id)


def context(persist_raw: bool = True) -> dict[str, Any]:
    return {
        "toolOutput": {"maxChars": MAX_CHARS, "persistRaw": persist_raw},
        "eviction": {"enabled": False},
        "summarize": {"enabled": False},
    }


def chat(proxy: ProxyServer, sid: str, messages: list[Any], **kw: Any) -> Any:
    """One request through the SDK, with the client's ``tools`` (``CLIENT_TOOLS`` unless
    given; None sends none): ``read_tool_output`` is offered only beside a client's own."""
    key = kw.pop("key", "sk-test-client")
    tools = kw.pop("tools", CLIENT_TOOLS)
    if tools is not None:
        kw["tools"] = tools
    return sdk(proxy, sid, key).chat.completions.create(model="gpt-4o", messages=messages, **kw)


def assert_valid_history(messages: Sequence[dict[str, Any]]) -> None:
    """Every tool call is answered right after its assistant message, and nothing else is."""
    i = 0
    while i < len(messages):
        ids = [c["id"] for c in messages[i].get("tool_calls") or []]
        results = []
        j = i + 1
        while j < len(messages) and messages[j]["role"] == "tool":
            results.append(messages[j]["tool_call_id"])
            j += 1
        assert sorted(results) == sorted(ids), (i, ids, results)
        i = j
