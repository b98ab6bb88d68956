"""Ingestion under hostile tool output, end to end through the openai SDK: every result the
proxy cuts or compacts pages back byte for byte (astral and multi-byte characters at page
edges, CRLF, NUL, base64 on one line, results at ``maxChars`` and one either side), a resent
history sends an old result's bytes unchanged, the lossless step keeps a JSON text's
duplicate keys, number forms and escapes, and stands back where its rewrite would match a
redaction pattern or its copy would be capped; a config change (``maxChars``, ``compact``)
leaves the results already ingested as they were sent (README, Decisions, "A config change
and the results already ingested")."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from tests.fakes.replies import tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, StartProxy, write_config
from tests.integration.api.read_tool_output_helpers import CLIENT_TOOLS
from tests.integration.transcripts import api, blob, marker_args, read_all, sdk, wait_event

MAX_CHARS = 1000

PRETTY_ROW = (
    '    {\n      "a": 1.50,\n      "a": -0.0,\n      "b": 1E+2,\n'
    '      "c": "\\u00e9\\/\\ud83d\\ude00",\n      "d": 12345678901234567890123\n    }'
)
"""A JSON object a parser would change: a key twice, numbers a parser rewrites, escapes."""
MINIFIED_ROW = (
    '{"a":1.50,"a":-0.0,"b":1E+2,"c":"\\u00e9\\/\\ud83d\\ude00","d":12345678901234567890123}'
)

HOSTILE = {
    "astral": "😀" * 1200,  # one character each, four bytes in UTF-8
    "mixed": "aé中😀" * 300,  # 1, 2, 3 and 4 bytes: every page edge splits some
    "crlf": "line one\r\nline two\r\n" * 80,
    "nul": "a\x00b" * 400,
    "base64": base64.b64encode(bytes(range(256)) * 6).decode(),
    "empty": "",
    "at_max": "y" * MAX_CHARS,
    "over_by_one": "z" * (MAX_CHARS + 1),
    "under_by_one": "w" * (MAX_CHARS - 1),
    "crlf_repeats": "start\r\n" + "same line here\r\n" * 200 + "end\r\n",
    "json_forms": '{\n  "rows": [\n' + ",\n".join([PRETTY_ROW] * 8) + "\n  ]\n}\n",
}


def history(cid: str, output: str) -> list[dict[str, Any]]:
    call = tool_call("read_file", {"path": cid}, id=cid)
    return [
        {"role": "user", "content": "look"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": cid, "content": output},
    ]


def config(
    folder: Path, upstream: str, *, patterns: tuple[str, ...] = (), **tool_output: Any
) -> Path:
    context = {
        "toolOutput": {"maxChars": MAX_CHARS, "persistRaw": True, **tool_output},
        "redaction": {"patterns": list(patterns)},
        "eviction": {"enabled": False},
        "summarize": {"enabled": False},
    }
    folder.mkdir(exist_ok=True)
    return write_config(folder / "agents.json", upstream, context=context)


def send(proxy: ProxyServer, sid: str, messages: list[dict[str, Any]]) -> None:
    """One request with the agent's tools (``read_tool_output`` goes only beside them)."""
    sdk(proxy, sid).chat.completions.create(model="gpt-4o", messages=messages, tools=CLIENT_TOOLS)


def test_hostile_results_page_back_exactly_and_resend_the_same_bytes(
    tmp_path: Path, fake_upstream: FakeUpstream, start_proxy: StartProxy
) -> None:
    proxy = start_proxy(config(tmp_path, fake_upstream.url))
    sent: dict[str, str] = {}
    for name, output in HOSTILE.items():
        send(proxy, name, history("call_a", output))
        sent[name] = fake_upstream.bodies()[-1]["messages"][2]["content"]
        assert len(sent[name]) <= MAX_CHARS, name
    assert sent["at_max"] == HOSTILE["at_max"] and sent["under_by_one"] == HOSTILE["under_by_one"]
    cut = marker_args(sent["over_by_one"])  # the marker counts in maxChars: more is left out
    assert cut is not None and cut["id"] == "call_a@2"
    head, omitted = cut["offset"], cut["limit"]
    assert sent["over_by_one"].startswith(HOSTILE["over_by_one"][:head])
    assert sent["over_by_one"].endswith(HOSTILE["over_by_one"][head + omitted :])
    collapsed = sent["crlf_repeats"].partition("\n")[2]  # written with "\n" (README, Ingest)
    assert collapsed == "start\nsame line here\n[previous line repeated 199 more times]\nend"
    minified = sent["json_forms"].partition("\n")[2]  # after the compacted marker
    assert minified == '{"rows":[' + ",".join([MINIFIED_ROW] * 8) + "]}"
    with api(proxy) as http:
        for name, output in HOSTILE.items():
            # 331 is odd and prime: its page edges fall inside a CRLF and split the mixed
            # text at every one of its four character widths
            assert read_all(http, name, "call_a", 331) == output, name
            rows = http.get(f"/v1/sessions/{name}/messages").json()["data"]
            assert rows[2]["message"]["content"] == sent[name], name
            assert rows[2]["truncated"] is (sent[name] != output), name
        # kept_chars (docs/events.md): a cut's head and tail; a compaction's text as sent
        cut_event = wait_event(http, "over_by_one", "context.truncated")
        assert cut_event["kept_chars"] == len(HOSTILE["over_by_one"]) - omitted
        compacted_event = wait_event(http, "json_forms", "context.truncated")
        assert compacted_event["kept_chars"] == len(sent["json_forms"])
        assert compacted_event["compacted"] == "JSON minified"
    for name, output in HOSTILE.items():  # the history grows: the old result is sent as before
        more = [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "again"}]
        send(proxy, name, [*history("call_a", output), *more])
        assert fake_upstream.bodies()[-1]["messages"][2]["content"] == sent[name], name


def test_a_config_change_leaves_results_already_ingested_as_sent(
    tmp_path: Path, fake_upstream: FakeUpstream, start_proxy: StartProxy
) -> None:
    """``maxChars`` shrunk and the lossless step switched off mid-session: the cut and the
    compacted result go upstream as they went before (the provider's cached prefix holds),
    and only the result that arrives after the reload is ingested under the new config."""
    path = config(tmp_path, fake_upstream.url)
    proxy = start_proxy(path, watch_config=True)
    messages = [{"role": "user", "content": "look"}]
    outputs = {"c1": blob(3000, "big"), "c2": "hdr\n" + "same line again\n" * 100}
    for cid, output in outputs.items():
        messages += history(cid, output)[1:]
    send(proxy, "s1", messages)
    before = fake_upstream.bodies()[-1]["messages"]
    assert marker_args(before[2]["content"]) is not None
    assert before[4]["content"].startswith("[compacted losslessly")

    replay = {"Last-Event-ID": "0"}
    with api(proxy) as http, http.stream("GET", "/v1/sessions/s1/events", headers=replay) as r:
        lines = r.iter_lines()
        next(line for line in lines if line.startswith("event:"))  # subscribed
        tmp = config(tmp_path / "next", fake_upstream.url, maxChars=400, compact=False)
        tmp.replace(path)
        assert next(line for line in lines if "config." in line) == "event: config.reloaded"

    messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    messages += history("c3", "hdr\n" + "same line again\n" * 100)[1:]
    send(proxy, "s1", messages)
    after = fake_upstream.bodies()[-1]["messages"]
    assert after[: len(before)] == before
    assert after[-1]["content"].startswith("hdr\nsame line again\n")  # cut, not compacted
    assert len(after[-1]["content"]) <= 400 and marker_args(after[-1]["content"]) is not None


def test_a_pattern_the_minified_json_would_match_keeps_the_result_as_sent(
    tmp_path: Path, fake_upstream: FakeUpstream, start_proxy: StartProxy
) -> None:
    """A configured pattern written for compact JSON misses the pretty-printed original; the
    minified text would spell the secret exactly as the pattern names it, so the lossless
    step leaves the result alone rather than send what the pattern forbids."""
    pattern = '"ref":"[a-z0-9]+"'
    proxy = start_proxy(config(tmp_path, fake_upstream.url, patterns=(pattern,)))
    services = {f"svc{i}": {"port": 8000 + i, "ref": "abc123secret"} for i in range(12)}
    original = json.dumps({"services": services}, indent=2)  # no array: minified, not a table
    send(proxy, "s1", history("call_a", original))
    assert fake_upstream.bodies()[-1]["messages"][2]["content"] == original
    send(proxy, "s2", history("call_a", original.replace('"ref"', '"key"')))  # no match
    assert fake_upstream.bodies()[-1]["messages"][2]["content"].startswith("[compacted")


def test_a_result_its_copy_cannot_hold_whole_is_cut_not_compacted(
    tmp_path: Path, fake_upstream: FakeUpstream, start_proxy: StartProxy
) -> None:
    """A compacted result's first line promises the exact original through
    ``read_tool_output``; over ``rawCapBytes`` the copy holds only its head, so the result
    is cut as any over ``maxChars`` (its capped copy saying so), never compacted."""
    proxy = start_proxy(config(tmp_path, fake_upstream.url, rawCapBytes=1500))
    original = "hdr\n" + "same line again and again\n" * 200  # 5204 chars, collapses to ~200
    send(proxy, "s1", history("call_a", original))
    sent = fake_upstream.bodies()[-1]["messages"][2]["content"]
    assert not sent.startswith("[compacted") and marker_args(sent) is not None
    assert sent.startswith("hdr\nsame line again and again\n")
    send(proxy, "s2", history("call_a", original[:1400]))  # its copy holds it whole
    assert fake_upstream.bodies()[-1]["messages"][2]["content"].startswith("[compacted")
