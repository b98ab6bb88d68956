"""Issue 21, fault 1: a NUL character (``\\u0000``) in what a client sends poisons nothing.

PostgreSQL refuses 0x00 in a text value and ``\\u0000`` in a jsonb string. A tool result
holding NULs (``cat`` of a binary file) long enough to be cut and spilled, a tool_call_id
holding one, and the events and summaries that carry them are stored escaped: every turn
answers 200, the provider gets exactly what the client sent, and read_tool_output (the
internal tool and the tool-outputs API) pages back the original with the same offsets.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from proxy.store.nul import decode, encode
from tests.fakes.replies import reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.api.read_tool_output_helpers import CLIENT_TOOLS
from tests.integration.conftest import column
from tests.integration.transcripts import api, blob, page_slice, read_all, replay_events, sdk

MAX_CHARS = 2000
NUL_ID = "call\x00nul"


def binary_output(n: int, tag: str) -> str:
    """``n`` chars of lines with NULs in them, as ``cat`` of a binary file prints."""
    return blob(n, tag).replace("0", "\x00")


def history() -> tuple[list[dict[str, Any]], dict[str, str]]:
    outputs = {
        "call_long": binary_output(9000, "long"),
        NUL_ID: binary_output(6000, "nulid"),
        "call_short": "ELF\x00\x00\x01 short\x00",
    }
    calls = [tool_call("cat", {"path": f"f{i}"}, id=cid) for i, cid in enumerate(outputs)]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "cat the binaries"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        *({"role": "tool", "tool_call_id": cid, "content": text} for cid, text in outputs.items()),
    ]
    return messages, outputs


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    """This module's config, under the name the shared ``settings``/``proxy`` fixtures read."""
    return write_config(
        tmp_path / "agents.json",
        fake_upstream.url,
        context={
            "toolOutput": {"maxChars": MAX_CHARS, "persistRaw": True},
            "eviction": {"enabled": False},
            "summarize": {"enabled": False},
        },
    )


def test_the_escape_round_trips_and_leaves_ordinary_text_alone() -> None:
    for text in ["", "plain", "a\x00b", "\x00", "\uffff", "\uffffx", "\uffff0\x00", "x\uffff"]:
        stored = encode(text)
        assert "\x00" not in stored and decode(stored) == text
    assert encode("plain") == "plain" and encode("x\uffff") == "x\uffff"
    assert len({encode(t) for t in ["\x00", "\uffff0", "\uffff\uffff0", "\uffff\x00"]}) == 4


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_nul_in_tool_results_and_ids_over_several_turns(
    proxy: ProxyServer, fake_upstream: FakeUpstream, db_dsn: str, stream: bool
) -> None:
    messages, outputs = history()
    long = outputs["call_long"]
    fake_upstream.script(
        reply(
            "looking",
            tool_calls=[
                tool_call(
                    "read_tool_output",
                    {"id": "call_long", "offset": 1500, "limit": 1200},
                    id="int_1",
                )
            ],
        ),
        reply("first"),
        reply(None, tool_calls=[tool_call("read_tool_output", {"id": NUL_ID}, id="int_2")]),
        reply("second"),
        reply("third"),
    )
    client = sdk(proxy, "nul")
    for turn, answer in enumerate(["lookingfirst", "second", "third"]):
        out = client.chat.completions.create(
            model="gpt-4o", messages=messages, tools=CLIENT_TOOLS, stream=stream
        )
        text = (
            "".join(c.choices[0].delta.content or "" for c in out if c.choices)
            if stream
            else out.choices[0].message.content
        )
        assert text == answer, turn
        messages = [
            *messages,
            {"role": "assistant", "content": answer},
            {"role": "user", "content": f"turn {turn} done\x00"},
        ]

    bodies = fake_upstream.bodies()
    assert len(bodies) == 5
    for body in bodies:
        sent = {
            m["tool_call_id"]: m["content"]
            for m in body["messages"]
            if m["role"] == "tool" and not m["tool_call_id"].startswith("int_")
        }
        assert set(sent) == set(outputs)
        assert sent["call_short"] == outputs["call_short"]  # not cut: exactly what was sent
        for cid in ("call_long", NUL_ID):  # cut: the original's head, a marker, its tail
            head, tail = sent[cid][:500], sent[cid][-100:]
            assert outputs[cid].startswith(head) and outputs[cid].endswith(tail)
            assert "read_tool_output" in sent[cid]
    assert bodies[-1]["messages"][-1]["content"] == "turn 1 done\x00"

    # The internal tool's pages: the original, at the same offsets as text without NULs.
    page = bodies[1]["messages"][-1]["content"]
    assert page_slice(page) == (1500, 2700, 9000, long[1500:2700])
    whole = bodies[3]["messages"][-1]["content"]
    assert page_slice(whole)[2:] == (6000, outputs[NUL_ID][: page_slice(whole)[1]])

    # The tool-outputs API: the same pages, and the whole text reassembled exactly.
    with api(proxy) as http:
        r = http.get(
            "/v1/sessions/nul/tool-outputs/call_long", params={"offset": 1500, "limit": 1200}
        )
        assert r.status_code == 200 and r.json()["page"] == page
        assert r.json()["total_chars"] == 9000
        assert r.json()["original_bytes"] == len(long.encode())
        assert read_all(http, "nul", "call_long") == long
        assert read_all(http, "nul", quote(NUL_ID, safe="")) == outputs[NUL_ID]
        grep = http.get(
            "/v1/sessions/nul/tool-outputs/call_long", params={"grep": "LONG:\x00\x00\x00\x001"}
        )
        assert grep.status_code == 200 and "long:\x00\x00\x00\x001" in grep.json()["page"]
        listed = http.get("/v1/sessions/nul/messages").json()["data"]
        assert NUL_ID in [m["message"].get("tool_call_id") for m in listed]
        events = replay_events(http, "nul")
    truncated = [json.loads(d) for name, d in events if name == "context.truncated"]
    assert {e["tool_call_id"] for e in truncated} == {"call_long", NUL_ID}

    # Stored escaped, never lossy: the ids are the client's after decoding.
    stored = column(db_dsn, "SELECT tool_call_id FROM tool_raw_outputs ORDER BY 1")
    assert sorted(decode(s) for s in stored) == sorted(["call_long", NUL_ID])
