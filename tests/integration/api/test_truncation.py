"""Issue #3, stage 0 end to end: a huge tool result is cut at ingestion, its full text is
spilled per (tenant, session, tool_call_id), and the spill follows the session through
branch, reset and delete. Driven through the openai SDK against the real proxy; the fake
upstream records exactly what the provider would have seen."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.settings import Settings
from tests.fakes.replies import reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.api.read_tool_output_helpers import CLIENT_TOOLS
from tests.integration.transcripts import (
    api,
    blob,
    marker_args,
    page_slice,
    read_all,
    sdk,
    wait_event,
)

MAX_CHARS = 2000


def history(cid: str, output: str) -> list[dict[str, Any]]:
    call = tool_call("read_file", {"path": "big.log"}, id=cid)
    return [
        {"role": "user", "content": "look at the log"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": cid, "content": output},
    ]


Boot = Callable[..., ProxyServer]


@pytest.fixture
def boot(tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream) -> Iterator[Boot]:
    servers: list[ProxyServer] = []

    def start(**tool_output: Any) -> ProxyServer:
        context = {
            "toolOutput": {"maxChars": MAX_CHARS, "persistRaw": True, **tool_output},
            "eviction": {"enabled": False},
            "summarize": {"enabled": False},
        }
        path = write_config(tmp_path / "agents.json", fake_upstream.url, context=context)
        settings = Settings(database_url=db_dsn, config=path, keepalive_seconds=0.3)
        servers.append(ProxyServer(settings).start())
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def send(proxy: ProxyServer, sid: str, messages: list[dict[str, Any]], **kw: Any) -> Any:
    """One request with the agent's tools (``read_tool_output`` goes only beside them)."""
    return sdk(proxy, sid, kw.pop("key", "sk-test-client")).chat.completions.create(
        model="gpt-4o", messages=messages, tools=CLIENT_TOOLS, **kw
    )


def upstream_tools(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or []]


# --------------------------------------------------------------------------- truncation


def test_large_result_keeps_head_and_tail_with_a_paging_marker(
    boot: Boot, fake_upstream: FakeUpstream
) -> None:
    proxy = boot()
    original = blob(10_000, "big")
    send(proxy, "s1", history("call_big", original))

    sent = fake_upstream.bodies()[-1]["messages"]
    assert sent[:2] == history("call_big", original)[:2]
    content = sent[2]["content"]
    assert len(content) <= MAX_CHARS
    args = marker_args(content)
    assert args is not None
    head, omitted = args["offset"], args["limit"]
    assert args["id"] == "call_big@2"  # the result at position 2 alone (``cascade.pins``)
    tail = len(original) - head - omitted
    assert content.startswith(original[:head])
    assert content.endswith(original[head + omitted :])
    assert original[head : head + omitted][:50] not in content
    assert head == int((head + tail) * 0.7)
    assert "read_tool_output" in upstream_tools(fake_upstream.bodies()[-1])

    with api(proxy) as http:
        stored = http.get("/v1/sessions/s1/messages").json()["data"][2]
        assert stored["message"]["content"] == content
        assert read_all(http, "s1", "call_big") == original
        meta = http.get("/v1/sessions/s1/tool-outputs/call_big").json()
        assert (meta["total_chars"], meta["capped"]) == (10_000, False)
        event = wait_event(http, "s1", "context.truncated")
    assert event["tool_call_id"] == "call_big"
    assert event["handle"] == "call_big@2"  # as its marker names it
    assert event["original_chars"] == 10_000
    assert event["kept_chars"] == head + tail
    assert event["spilled"] is True


def test_result_under_max_chars_is_forwarded_untouched_and_not_spilled(
    boot: Boot, fake_upstream: FakeUpstream
) -> None:
    proxy = boot()
    original = blob(MAX_CHARS, "small")
    send(proxy, "s1", history("call_small", original))
    body = fake_upstream.bodies()[-1]
    assert body["messages"][2]["content"] == original
    assert upstream_tools(body) == ["run_tests"]
    with api(proxy) as http:  # never cut: the tool-outputs API serves its stored message
        assert read_all(http, "s1", "call_small") == original
        found = http.get("/v1/sessions/s1/tool-outputs/call_small", params={"grep": "small"})
        assert found.status_code == 200 and found.json()["total_chars"] == len(original)
        assert "small" in found.json()["page"]
        missing = http.get("/v1/sessions/s1/tool-outputs/call_never")
        assert missing.status_code == 404 and "/v1/sessions/s1/messages" in missing.text


def test_truncation_switched_off_forwards_a_large_result_whole(
    boot: Boot, fake_upstream: FakeUpstream
) -> None:
    """``toolOutput.enabled`` false: the result goes upstream and into the store as sent,
    with no marker, no handle offered and nothing spilled."""
    proxy = boot(enabled=False, compact=False)
    original = blob(10_000, "big")
    send(proxy, "s1", history("call_big", original))
    body = fake_upstream.bodies()[-1]
    assert body["messages"][2]["content"] == original
    assert upstream_tools(body) == ["run_tests"]
    with api(proxy) as http:
        assert http.get("/v1/sessions/s1/messages").json()["data"][2]["truncated"] is False
        assert read_all(http, "s1", "call_big") == original


def test_streaming_request_is_truncated_the_same_way(
    boot: Boot, fake_upstream: FakeUpstream
) -> None:
    proxy = boot()
    original = blob(10_000, "streamed")
    chunks = list(send(proxy, "s1", history("call_s", original), stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "ok"
    content = fake_upstream.bodies()[-1]["messages"][2]["content"]
    assert len(content) <= MAX_CHARS and marker_args(content) is not None
    with api(proxy) as http:
        assert read_all(http, "s1", "call_s") == original


def test_persist_raw_off_marker_advertises_no_handle_and_nothing_is_stored(
    boot: Boot, fake_upstream: FakeUpstream
) -> None:
    proxy = boot(persistRaw=False)
    original = blob(10_000, "nohandle")
    send(proxy, "s1", history("call_big", original))
    body = fake_upstream.bodies()[-1]
    content = body["messages"][2]["content"]
    assert len(content) <= MAX_CHARS
    assert "read_tool_output" not in content and "re-run the tool" in content
    assert upstream_tools(body) == ["run_tests"]
    with api(proxy) as http:
        assert http.get("/v1/sessions/s1/tool-outputs/call_big").status_code == 404
        assert wait_event(http, "s1", "context.truncated")["spilled"] is False


def test_raw_output_is_capped_at_raw_cap_bytes_on_a_character_boundary(
    boot: Boot, fake_upstream: FakeUpstream
) -> None:
    proxy = boot(rawCapBytes=4001)
    original = "ü" * 5000  # 2 bytes each: the cap falls inside a character
    send(proxy, "s1", history("call_u", original))
    with api(proxy) as http:
        assert read_all(http, "s1", "call_u") == "ü" * 2000


def test_capped_raw_output_reports_the_original_size(
    boot: Boot, fake_upstream: FakeUpstream
) -> None:
    proxy = boot(rawCapBytes=4001)
    send(proxy, "s1", history("call_u", "ü" * 5000))
    with api(proxy) as http:
        meta = http.get("/v1/sessions/s1/tool-outputs/call_u").json()
    assert (meta["capped"], meta["original_bytes"]) == (True, 10_000)


def test_spill_is_keyed_by_tenant_session_and_tool_call_id(
    boot: Boot, fake_upstream: FakeUpstream
) -> None:
    proxy = boot()
    texts = {
        ("sk-test-client", "s1"): blob(6000, "a-s1"),
        ("sk-test-client", "s2"): blob(6000, "a-s2"),
        ("sk-other-tenant", "s1"): blob(6000, "b-s1"),
    }
    for (key, sid), text in texts.items():
        send(proxy, sid, history("call_same", text), key=key)
    for (key, sid), text in texts.items():
        with api(proxy, key) as http:
            assert read_all(http, sid, "call_same") == text
    with api(proxy, "sk-other-tenant") as http:
        assert http.get("/v1/sessions/s2/tool-outputs/call_same").status_code == 404


# --------------------------------------------------------------------------- lifecycle


def test_branch_copies_spilled_outputs_independently(
    boot: Boot, fake_upstream: FakeUpstream
) -> None:
    proxy = boot()
    original = blob(8000, "branch")
    send(proxy, "src", history("call_big", original))
    with api(proxy) as http:
        r = http.post("/v1/sessions/src/branch", json={"id": "dst"})
        assert r.status_code == 200, r.text
        assert read_all(http, "dst", "call_big") == original
        assert http.post("/v1/sessions/src/reset").status_code == 200
        assert http.get("/v1/sessions/src/tool-outputs/call_big").status_code == 404
        assert read_all(http, "dst", "call_big") == original

    # The branch's copy also serves the model's own read_tool_output calls.
    fake_upstream.script(
        reply(None, tool_calls=[tool_call("read_tool_output", {"id": "call_big"}, id="r1")]),
        reply("done"),
    )
    answer = {"role": "assistant", "content": "ok"}  # what the source session replied
    messages = [*history("call_big", original), answer, {"role": "user", "content": "again"}]
    assert send(proxy, "dst", messages).choices[0].message.content == "done"
    start, end, total, text = page_slice(fake_upstream.bodies()[-1]["messages"][-1]["content"])
    assert (start, total) == (0, len(original)) and text == original[:end]


def test_reset_and_delete_remove_spilled_outputs(boot: Boot, fake_upstream: FakeUpstream) -> None:
    proxy = boot()
    with api(proxy) as http:
        for sid in ("reset-me", "delete-me"):
            send(proxy, sid, history("call_big", blob(8000, sid)))
            assert http.get(f"/v1/sessions/{sid}/tool-outputs/call_big").status_code == 200
        assert http.post("/v1/sessions/reset-me/reset").status_code == 200
        assert http.delete("/v1/sessions/delete-me").status_code == 200
        # Re-create both sessions with a short history: no raw output survived either.
        for sid in ("reset-me", "delete-me"):
            send(proxy, sid, history("call_other", "short"))
            r = http.get(f"/v1/sessions/{sid}/tool-outputs/call_big")
            assert r.status_code == 404, r.text
