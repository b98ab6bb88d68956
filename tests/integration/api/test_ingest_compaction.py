"""Issue #23, the lossless ingest stage end to end: a pretty-printed JSON result and a
repetitive log go upstream compacted, and ``read_tool_output`` (the model's call and the
tool-outputs API) gives back the client's bytes exactly."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.settings import Settings
from tests.fakes.replies import reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.api.read_tool_output_helpers import CLIENT_TOOLS
from tests.integration.transcripts import api, page_slice, read_all, sdk

JSON_RESULT = json.dumps(
    {
        "items": [
            {"id": i, "price": 1.10, "big": 10**25, "tags": ["a  b", "c"]} for i in range(60)
        ],
        "total": 60,
    },
    indent=2,
)
LOG = "".join(
    ["build started\r\n"]
    + ["WARN retrying connection to db:5432 (attempt failed)\r\n"] * 200
    + [f"step {i} ok\r\n" for i in range(20)]
    + ["done"]
)


def context(compact: bool = True) -> dict[str, Any]:
    return {
        "toolOutput": {"maxChars": 24_000, "compact": compact},
        "eviction": {"enabled": False},
        "summarize": {"enabled": False},
    }


def make_proxy(db_dsn: str, tmp_path: Path, upstream: FakeUpstream, **ctx: Any) -> ProxyServer:
    path = write_config(tmp_path / "agents.json", upstream.url, context=context(**ctx))
    return ProxyServer(Settings(database_url=db_dsn, config=path, keepalive_seconds=0.3)).start()


@pytest.fixture
def proxy(db_dsn: str, tmp_path: Path, fake_upstream: FakeUpstream) -> Iterator[ProxyServer]:
    server = make_proxy(db_dsn, tmp_path, fake_upstream)
    yield server
    server.stop()


def history() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "fetch the items and build"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                tool_call("get_items", {}, id="call_json"),
                tool_call("build", {}, id="call_log"),
            ],
        },
        {"role": "tool", "tool_call_id": "call_json", "content": JSON_RESULT},
        {"role": "tool", "tool_call_id": "call_log", "content": LOG},
    ]


def sent_results(body: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}


def test_upstream_gets_compacted_results_and_originals_read_back_exactly(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    client = sdk(proxy, "ing1")
    client.chat.completions.create(model="gpt-4o", messages=history(), tools=CLIENT_TOOLS)
    sent = sent_results(fake_upstream.bodies()[-1])
    js, log = sent["call_json"], sent["call_log"]
    assert js.startswith("[compacted losslessly from")
    assert 'read_tool_output({"id": "call_json@2"})' in js
    body = js.split("\n", 1)[1]  # the records as a table: keys once, a row per item
    assert body.startswith('{"items":[#table ["id","price","big","tags"] (one row per object')
    assert '\n[0,1.1,10000000000000000000000000,["a  b","c"]]\n' in body
    assert body.endswith('\n[59,1.1,10000000000000000000000000,["a  b","c"]]\n],"total":60}')
    assert len(js) < 0.7 * len(JSON_RESULT)
    assert "[previous line repeated 199 more times]" in log and len(log) < len(LOG) // 5
    tools = fake_upstream.bodies()[-1]["tools"]
    assert "read_tool_output" in [t["function"]["name"] for t in tools]
    with api(proxy) as http:
        assert read_all(http, "ing1", "call_json") == JSON_RESULT
        assert read_all(http, "ing1", "call_log") == LOG

    # The model pages the log back through its own tool call, answered by the proxy.
    fake_upstream.script(
        reply(
            None,
            tool_calls=[
                tool_call("read_tool_output", {"id": "call_log", "limit": 200}, id="int_1")
            ],
        ),
        reply("done"),
    )
    messages = [
        *history(),
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "again"},
    ]
    out = client.chat.completions.create(model="gpt-4o", messages=messages, tools=CLIENT_TOOLS)
    assert out.choices[0].message.content == "done"
    page = fake_upstream.bodies()[-1]["messages"][-1]["content"]
    assert page_slice(page)[3] == LOG[:200]
    # Frozen at ingestion: the later request sends the same compacted text.
    assert sent_results(fake_upstream.bodies()[-1]) == {**sent, "int_1": page}


def test_repeated_lines_of_an_earlier_result_become_a_pointer(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    listing = "".join(f"src/pkg/module_{i:03d}.py  {i * 97} bytes\n" for i in range(80))
    first = [
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": None, "tool_calls": [tool_call("ls", {}, id="call_a")]},
        {"role": "tool", "tool_call_id": "call_a", "content": listing},
    ]
    client = sdk(proxy, "ing2")
    client.chat.completions.create(model="gpt-4o", messages=first, tools=CLIENT_TOOLS)
    again = "total 80\n" + listing
    second = [
        *first,
        {"role": "assistant", "content": None, "tool_calls": [tool_call("ls", {}, id="call_b")]},
        {"role": "tool", "tool_call_id": "call_b", "content": again},
    ]
    client.chat.completions.create(model="gpt-4o", messages=second, tools=CLIENT_TOOLS)
    sent = sent_results(fake_upstream.bodies()[-1])
    assert sent["call_a"] == listing
    assert re.search(r"\[80 lines: same as lines 1-80 of tool result call_a@2\]", sent["call_b"])
    with api(proxy) as http:
        assert read_all(http, "ing2", "call_b") == again


def test_compact_false_sends_results_unchanged(
    db_dsn: str, tmp_path: Path, fake_upstream: FakeUpstream
) -> None:
    server = make_proxy(db_dsn, tmp_path, fake_upstream, compact=False)
    try:
        sdk(server, "ing3").chat.completions.create(
            model="gpt-4o", messages=history(), tools=CLIENT_TOOLS
        )
    finally:
        server.stop()
    sent = sent_results(fake_upstream.bodies()[-1])
    assert sent == {"call_json": JSON_RESULT, "call_log": LOG}


@pytest.mark.parametrize("separator", ["\f", "\x1e", "\x85", "\u2028"], ids=repr)
def test_a_pointer_counts_lines_by_newlines_and_the_rest_is_sent_as_written(
    proxy: ProxyServer, fake_upstream: FakeUpstream, separator: str
) -> None:
    # Python's str.splitlines also breaks at a form feed (a page break in C and Python
    # sources), \x1c-\x1e, NEL and U+2028/9: the pointer's line numbers were off by one per
    # such character from the lines a reader counts, and the compacted text the model read
    # had a newline where the tool wrote it.
    listing = "".join(f"src/pkg/module_{i:03d}.py  {i * 97} bytes\n" for i in range(40))
    first = f"page one\n{separator}\n{listing}"
    messages = [
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": None, "tool_calls": [tool_call("ls", {}, id="call_a")]},
        {"role": "tool", "tool_call_id": "call_a", "content": first},
    ]
    client = sdk(proxy, f"lines-{ord(separator)}")
    client.chat.completions.create(model="gpt-4o", messages=messages, tools=CLIENT_TOOLS)
    again = f"total 40 {separator} files\n{listing}"
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [tool_call("ls", {}, id="call_b")]},
        {"role": "tool", "tool_call_id": "call_b", "content": again},
    ]
    client.chat.completions.create(model="gpt-4o", messages=messages, tools=CLIENT_TOOLS)
    sent = sent_results(fake_upstream.bodies()[-1])["call_b"]
    pointer = re.search(r"\[40 lines: same as lines (\d+)-(\d+) of tool result call_a@2\]", sent)
    assert pointer is not None, sent
    a, b = int(pointer[1]), int(pointer[2])
    assert "\n".join(first.split("\n")[a - 1 : b]) == listing.rstrip("\n")
    assert f"\ntotal 40 {separator} files\n" in sent
