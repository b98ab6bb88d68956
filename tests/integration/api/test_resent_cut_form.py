"""A client that continues from the stored history (``GET …/messages``, not ``?form=sent``)
resends a cut, compacted or evicted tool result as the proxy rewrote it, marker and all.
That text is what the client sent now, so it supersedes the row and is stored as sent; the
handle its marker names (``<id>@<position>``) still reads back the result the text was made
from, never the text itself (a cut one's marker would send the model to the same offsets
again), and an evicted one's placeholder reads back the body kept in the superseded row."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.settings import Settings
from tests.fakes.replies import reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.reconcile_helpers import post, settled, user
from tests.integration.api.test_reconcile_evictions import evicting_settings, tool_rounds
from tests.integration.transcripts import api, read_all

BIG = "".join(f"line {i} of the file with text\n" for i in range(1500))
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
RECORDS = json.dumps([{"name": f"item{i}", "value": i} for i in range(300)], indent=2)


@pytest.mark.parametrize(("kind", "result"), [("cut", BIG), ("compacted", RECORDS)])
def test_a_resent_cut_result_keeps_its_handle_on_the_original(
    http: httpx.Client, fake_upstream: FakeUpstream, kind: str, result: str
) -> None:
    fake_upstream.script(
        reply(None, tool_calls=[tool_call("cat", {"f": "x"}, id="c1")]), reply("done"), reply("ok")
    )
    messages: list[Any] = [user("read x")]
    first = post(http, "resent", messages)
    messages += [
        first["choices"][0]["message"],
        {"role": "tool", "tool_call_id": "c1", "content": result},
    ]
    post(http, "resent", messages)
    settled(http, "resent", 4)  # the reply is stored after the response went out
    rows = [r["message"] for r in http.get("/v1/sessions/resent/messages").json()["data"]]
    cut = rows[2]["content"]
    assert len(cut) < len(result) and (kind == "compacted") == cut.startswith("[compacted")
    found = re.search(r"read_tool_output\((\{.*?\})\)", cut)
    assert found is not None
    handle = json.loads(found[1])["id"]
    assert read_all(http, "resent", handle) == result
    post(http, "resent", [*rows, user("and now?")])  # the stored form, resent
    assert settled(http, "resent", 6)["superseded_count"] == 2  # the cut result and the reply
    assert read_all(http, "resent", handle) == result
    before, after = (body["messages"][:3] for body in fake_upstream.bodies()[1:])
    assert after == before  # the provider is sent the same prefix as before the resend


def cutting_first(db_dsn: str, tmp_path: Path, fake_upstream: FakeUpstream) -> Settings:
    """``evicting_settings`` with results over 1000 characters cut at ingestion too."""
    config = json.loads(evicting_settings(db_dsn, tmp_path, fake_upstream).config.read_text())
    config["context"]["toolOutput"] = {"maxChars": 1000}
    path = tmp_path / "cut-then-evict.json"
    path.write_text(json.dumps(config))
    return Settings(database_url=db_dsn, config=path, watch_config=False)


@pytest.mark.parametrize("cut_first", [False, True])
def test_a_resent_placeholder_keeps_its_handle_on_the_evicted_body(
    db_dsn: str, tmp_path: Path, fake_upstream: FakeUpstream, cut_first: bool
) -> None:
    make = cutting_first if cut_first else evicting_settings
    server = ProxyServer(make(db_dsn, tmp_path, fake_upstream)).start()
    try:
        with api(server) as http:
            post(http, "evicted", tool_rounds(3), tools=TOOLS)
            settled(http, "evicted", 8)
            data = http.get("/v1/sessions/evicted/messages").json()["data"]
            assert data[2]["evicted"] and data[2]["truncated"] is cut_first
            rows = [r["message"] for r in data]
            cleared = rows[2]["content"]
            assert cleared.startswith("[context-cleared]")
            found = re.search(r"read_tool_output\((\{.*?\})\)", cleared)
            assert found is not None
            handle = json.loads(found[1])["id"]
            body = tool_rounds(3)[2]["content"]
            assert read_all(http, "evicted", handle) == body
            post(http, "evicted", [*rows, user("and now?")], tools=TOOLS)  # as stored
            assert settled(http, "evicted", 10)["superseded_count"] > 0
            assert read_all(http, "evicted", handle) == body
    finally:
        server.stop()


def test_a_resent_cut_observation_keeps_its_handle_on_the_original(http: httpx.Client) -> None:
    observation = "Observation:\n" + BIG
    messages: list[Any] = [
        user("count the lines"),
        {"role": "assistant", "content": "Action: cat x"},
        user(observation),
        {"role": "assistant", "content": "Action: cat y"},
        user("Observation:\nsmall"),
    ]
    post(http, "observed", messages, tools=TOOLS)
    settled(http, "observed", 6)
    rows = [r["message"] for r in http.get("/v1/sessions/observed/messages").json()["data"]]
    cut = rows[2]["content"]
    found = re.search(r"read_tool_output\((\{.*?\})\)", cut)
    assert found is not None and len(cut) < len(observation)
    handle = json.loads(found[1])["id"]
    assert handle.startswith("obs_") and read_all(http, "observed", handle) == observation
    post(http, "observed", [*rows, user("Observation:\nmore")], tools=TOOLS)  # as stored
    assert settled(http, "observed", 8)["superseded_count"] > 0
    assert read_all(http, "observed", handle) == observation
