"""Regression: a tool call id reused within a session served its older spill. Some agents
number their calls afresh each turn (``call_0`` every time); when turn 1's ``call_0`` was cut
and spilled and turn 2's was short enough to keep whole, both
``GET /v1/sessions/{id}/tool-outputs/call_0`` and the model's ``read_tool_output`` served
turn 1's text. Both now serve the newest result under the id (the one the model saw last,
as DESIGN keys raw outputs by session and id), and a newest result with no copy kept is not
found rather than answered with an older one. A lossless-compaction pointer names an
earlier result by id and position (``call_0@2``), so it reads back the result it meant even
once the id comes back after the pointer was frozen."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.api.read_tool_output_helpers import chat, context, history, read_call
from tests.integration.transcripts import api, blob, read_all

USER = {"role": "user", "content": "read the listing again"}

SECRET = "ACME-12345678"


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    ctx = context() | {"redaction": {"enabled": True, "patterns": ["ACME-[0-9]{8}"]}}
    return write_config(tmp_path / "agents.json", fake_upstream.url, context=ctx)


def _two_turns(
    proxy: ProxyServer, fake: FakeUpstream, sid: str, first: str, second: str
) -> tuple[str, Any]:
    """Turn 1's ``call_0`` result is ``first``, turn 2's is ``second``; in turn 2 the model
    reads ``call_0``. What read_tool_output answered it, and what the API answers."""
    turn1 = history("call_0", first, tag="a")
    chat(proxy, sid, turn1)
    turn2 = [*turn1, {"role": "assistant", "content": "ok"}, *history("call_0", second, tag="b")]
    fake.script(reply(None, tool_calls=[read_call(id="call_0", limit=100)]), reply("done"))
    chat(proxy, sid, turn2)
    answered = fake.bodies()[-1]["messages"][-1]
    assert answered["role"] == "tool" and answered["tool_call_id"] == "int_1"
    with api(proxy) as http:
        served = http.get(f"/v1/sessions/{sid}/tool-outputs/call_0", params={"limit": 100})
    return str(answered["content"]), served


@pytest.mark.parametrize(
    ("second", "head"),
    [("turn two's short output", "turn two's short output"), (blob(9000, "new"), "new:00000")],
    ids=["kept-whole", "spilled"],
)
def test_a_reused_id_serves_its_newest_result(
    proxy: ProxyServer, fake_upstream: FakeUpstream, second: str, head: str
) -> None:
    tool, served = _two_turns(proxy, fake_upstream, "reused", blob(9000, "old"), second)
    assert served.status_code == 200, served.text
    page = served.json()["page"]
    assert head in page and "old:" not in page
    assert served.json()["total_chars"] == len(second)
    assert tool == page  # the model's read and the API agree


def test_a_reused_id_whose_newest_result_was_redacted_serves_no_older_one(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    second = f"token {SECRET} then more"
    tool, served = _two_turns(proxy, fake_upstream, "redacted", blob(9000, "old"), second)
    assert served.status_code == 404, served.text
    assert "no stored output" in tool and "old:" not in tool


LISTING = "".join(f"src/pkg/module_{i:03d}.py  {i * 97} bytes\n" for i in range(50))


@pytest.mark.parametrize("third_id", ["call_1", "call_0"], ids=["another-id", "its-own-id"])
def test_a_pointer_to_a_reused_id_reads_back_the_result_it_names(
    proxy: ProxyServer, fake_upstream: FakeUpstream, third_id: str
) -> None:
    # Turn 1's call_0 lists the files, turn 2's call_0 says something else; turn 3 lists
    # them again. "same as lines 1-50 of tool result call_0" would send the model to turn
    # 2's text (the newest under the id), or name the result itself: the pointer names turn
    # 1's result by its position too, and that reads back turn 1's text.
    messages = history("call_0", LISTING, tag="a")
    chat(proxy, "pointer", messages)
    messages += [{"role": "assistant", "content": "ok"}, *history("call_0", "nothing", tag="b")]
    chat(proxy, "pointer", messages)
    again = "total 50\n" + LISTING
    messages += [{"role": "assistant", "content": "ok"}, *history(third_id, again, tag="c")]
    chat(proxy, "pointer", messages)
    sent = fake_upstream.bodies()[-1]["messages"][-1]["content"]
    assert "\n[50 lines: same as lines 1-50 of tool result call_0@2]" in sent, sent
    with api(proxy) as http:
        assert read_all(http, "pointer", "call_0@2") == LISTING
        assert read_all(http, "pointer", "call_0") == (again if third_id == "call_0" else "nothing")


POINTER = re.compile(r"\[50 lines: same as lines 1-50 of tool result (\S+)\]")


@pytest.mark.parametrize(
    ("first", "third"),
    [(LISTING, "nothing"), (LISTING + blob(6000, "old"), blob(6000, "new"))],
    ids=["kept-whole", "both-spilled"],
)
def test_a_frozen_pointer_still_reaches_its_result_once_the_id_comes_back(
    proxy: ProxyServer, fake_upstream: FakeUpstream, first: str, third: str
) -> None:
    # Turn 2's result points at turn 1's call_0 (unique then) and is frozen; turn 3 reuses
    # call_0. read_tool_output("call_0") now serves turn 3's result (the newest), so the
    # pointer names a handle of turn 1's result alone, and it still reads that back (cut,
    # its spill is then one turn 3's replaced).
    messages = history("call_0", first, tag="a")
    chat(proxy, "frozen", messages)
    messages += [{"role": "assistant", "content": "ok"}, *history("call_1", "total 50\n" + LISTING)]
    chat(proxy, "frozen", messages)
    messages += [{"role": "assistant", "content": "ok"}, *history("call_0", third, tag="c")]
    chat(proxy, "frozen", messages)
    pointed = fake_upstream.bodies()[-1]["messages"][6]["content"]
    found = POINTER.search(pointed)
    assert found is not None, pointed
    handle = found[1]
    fake_upstream.script(reply(None, tool_calls=[read_call(id=handle, limit=5000)]), reply("done"))
    chat(proxy, "frozen", [*messages, {"role": "assistant", "content": "ok"}, USER])
    answered = fake_upstream.bodies()[-1]["messages"][-1]
    assert answered["tool_call_id"] == "int_1" and "module_049.py" in answered["content"]
    with api(proxy) as http:
        assert read_all(http, "frozen", handle) == first
        assert read_all(http, "frozen", "call_0") == third  # the id alone: the newest
