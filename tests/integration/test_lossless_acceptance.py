"""Issue #3 acceptance: 60 steps of a real web agent (6 kB browser dumps every other step)
replayed through the openai SDK against the real proxy, the fake upstream answering each step
with the recorded assistant message and recording every prompt.

Window 16000 tokens, eviction at 50% in passes of >= 2000 tokens, the last 3 rounds protected,
results cut at 4000 chars, and a configured secret pattern planted in tool output (mid-dump and
in a short result) and in the user's instruction.

(a) once over atFraction the provider gets placeholders instead of old results, every
    tool_call id stays paired, the last rounds arrive intact;
(b) consecutive prompts are prefix-identical except where a pass swapped results for
    placeholders in place;
(c) every cleared or truncated byte pages back exactly (tool-outputs API, and the model's own
    read_tool_output calls, answered by the proxy);
(d) the secret reaches no path: upstream requests, the messages API, the tool-outputs API,
    events, or any table.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from proxy.settings import Settings
from tests.fakes.rendering import count_prompt_tokens
from tests.fakes.replies import reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.api.read_tool_output_helpers import CLIENT_TOOLS
from tests.integration.conftest import run_sync
from tests.integration.transcripts import (
    api,
    load_transcript,
    marker_args,
    page_slice,
    read_all,
    replay_events,
    sdk,
    wait_event,
)

STEPS = 60
LIMIT = 16_000
THRESHOLD = 0.5 * LIMIT
KEEP_ROUNDS = 3
CLEAR_AT_LEAST = 2000
MIN_RESULT_TOKENS = 200
MAX_CHARS = 4000
SID = "replay"
PLACEHOLDER = "[context-cleared]"
SECRET = "CANARY-"
CONTEXT = {
    # Compaction off: the browser dumps would fit after it, and this replay checks the cut
    # (issue #23's ingest stage has its own end-to-end test, test_ingest_compaction.py).
    "toolOutput": {"maxChars": MAX_CHARS, "persistRaw": True, "compact": False},
    "redaction": {"patterns": ["CANARY-[0-9a-f]{16}"]},
    "eviction": {
        "atFraction": THRESHOLD / LIMIT,
        "keepRecentRounds": KEEP_ROUNDS,
        "clearAtLeast": CLEAR_AT_LEAST,
        "minResultTokens": MIN_RESULT_TOKENS,
    },
    "summarize": {"enabled": False},
}

Messages = list[dict[str, Any]]


@pytest.fixture
def proxy(tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream) -> Iterator[ProxyServer]:
    models = {"default": {"contextLimit": LIMIT, "reservedOutput": 1000}}
    path = write_config(tmp_path / "agents.json", fake_upstream.url, models=models, context=CONTEXT)
    server = ProxyServer(Settings(database_url=db_dsn, config=path)).start()
    yield server
    server.stop()


def plant_secrets(messages: Messages) -> Messages:
    """Secrets in the middle of three big dumps, in one short result, and in the instruction."""
    out = [dict(m) for m in messages]
    tools = [m for m in out if m["role"] == "tool"]
    big = [m for m in tools if len(m["content"]) > MAX_CHARS]
    small = [m for m in tools if len(m["content"]) < 100]
    for n, m in enumerate([*big[2:30:10], small[3]]):
        text, mid = m["content"], len(m["content"]) // 2
        m["content"] = f"{text[:mid]} {SECRET}{n:016x} {text[mid:]}"
    first_user = next(m for m in out if m["role"] == "user")
    first_user["content"] += f"\nDeploy key: {SECRET}{'f' * 16}"
    return out


def replay(proxy: ProxyServer, fake: FakeUpstream, transcript: Messages) -> Messages:
    """Drive every recorded step; the client resends what the SDK returned, like a real agent."""
    client = sdk(proxy, SID)
    history: Messages = []
    for msg in transcript:
        if msg["role"] != "assistant" or not history:
            history.append(msg)
            continue
        fake.script(reply(msg.get("content"), tool_calls=msg.get("tool_calls")))
        out = client.chat.completions.create(model="gpt-4o", messages=history, tools=CLIENT_TOOLS)
        history.append(out.choices[0].message.model_dump(exclude_none=True))
    return history


def assert_paired(messages: Sequence[dict[str, Any]]) -> None:
    i = 0
    while i < len(messages):
        ids = [c["id"] for c in messages[i].get("tool_calls") or []]
        j = i + 1
        while j < len(messages) and messages[j]["role"] == "tool":
            j += 1
        assert sorted(m["tool_call_id"] for m in messages[i + 1 : j]) == sorted(ids), i
        i = j


def is_placeholder(m: dict[str, Any]) -> bool:
    return m["role"] == "tool" and str(m["content"]).startswith(PLACEHOLDER)


def shape(messages: Sequence[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(m["role"], m.get("tool_call_id") or m.get("tool_calls")) for m in messages]


def rounds_of(messages: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The tool results of each assistant step, oldest first."""
    out: list[list[dict[str, Any]]] = []
    for m in messages:
        if m.get("tool_calls"):
            out.append([])
        elif m["role"] == "tool":
            out[-1].append(m)
    return out


def check_arrives_intact(m: dict[str, Any], original: str, pos: int) -> None:
    """A result as ingested: verbatim, or cut to head + marker + tail (its handle pinned to
    its position ``pos``), or redacted."""
    content = m["content"]
    assert not is_placeholder(m), m["tool_call_id"]
    if SECRET in original:  # mid-dump secrets fall in the cut; a short result shows the mask
        assert SECRET not in content and marker_args(content) is None
        assert ("contained secrets" if len(original) > MAX_CHARS else "[REDACTED]") in content
    elif len(original) <= MAX_CHARS:
        assert content == original
    else:
        args = marker_args(content)
        assert args is not None and args["id"] == f"{m['tool_call_id']}@{pos}"
        head, tail = content[: args["offset"]], original[args["offset"] + args["limit"] :]
        assert original.startswith(head) and content.endswith(tail)


def eligible_tokens(prompt: Messages) -> int:
    """Tokens a pass could clearly reclaim: large non-placeholder results outside the tail."""
    old = [m for r in rounds_of(prompt)[:-KEEP_ROUNDS] for m in r if not is_placeholder(m)]
    sizes = [len(m["content"]) // 4 for m in old]
    return sum(s - 60 for s in sizes if s >= 1.2 * MIN_RESULT_TOKENS)


def check_pass(i: int, prev: Messages, prompt: Messages, originals: dict[str, str]) -> bool:
    """(a) eviction fires once the window would cross atFraction, and clears everything then;
    (b) otherwise the prompt extends the previous one byte for byte. True for a pass."""
    would_be = count_prompt_tokens(prev) + count_prompt_tokens(prompt[len(prev) :])
    if would_be >= 1.05 * THRESHOLD:
        assert eligible_tokens(prompt) < 2 * CLEAR_AT_LEAST, f"step {i} did not evict"
    changed = [j for j, (a, b) in enumerate(zip(prev, prompt, strict=False)) if a != b]
    if changed:
        assert would_be >= 0.95 * THRESHOLD, f"step {i} evicted below atFraction"
    for j in changed:  # only in-place swaps of a result for its placeholder
        assert not is_placeholder(prev[j]) and is_placeholder(prompt[j]), (i, j)
        assert prev[j]["tool_call_id"] == prompt[j]["tool_call_id"]
        cid = prompt[j]["tool_call_id"]
        args = marker_args(prompt[j]["content"])
        assert args == (None if SECRET in originals[cid] else {"id": f"{cid}@{j}"}), (i, cid)
    return bool(changed)


def check_prompts(prompts: list[Messages], history: Messages, originals: dict[str, str]) -> int:
    """(a) and (b) over every upstream prompt; returns the number of eviction passes."""
    passes = 0
    for i, prompt in enumerate(prompts):
        assert_paired(prompt)
        assert shape(prompt) == shape(history[: len(prompt)]), f"step {i} lost messages"
        at = {id(m): j for j, m in enumerate(prompt)}
        for r in rounds_of(prompt)[-KEEP_ROUNDS:]:
            for m in r:
                check_arrives_intact(m, originals[m["tool_call_id"]], at[id(m)])
        assert count_prompt_tokens(prompt) < THRESHOLD + 2 * MAX_CHARS // 4
        if i:
            passes += check_pass(i, prompts[i - 1], prompt, originals)
    return passes


def check_recoverable(http: httpx.Client, prompt: Messages, originals: dict[str, str]) -> int:
    """(c) every cleared or cut result pages back exactly, unless it held a secret."""
    rows = http.get(f"/v1/sessions/{SID}/messages").json()["data"]
    redacted = {r["message"].get("tool_call_id") for r in rows if r["redacted"]}
    recovered = 0
    for m in prompt:
        cid = m.get("tool_call_id")
        if not cid or not (is_placeholder(m) or marker_args(m["content"])):
            continue
        if SECRET in originals[cid]:
            assert cid in redacted
            r = http.get(f"/v1/sessions/{SID}/tool-outputs/{cid}")
            assert r.status_code == 404, cid
            continue
        assert cid not in redacted
        assert read_all(http, SID, cid, limit=1500) == originals[cid], cid
        recovered += 1
    return recovered


def check_internal_reads(
    proxy: ProxyServer, fake: FakeUpstream, history: Messages, originals: dict[str, str]
) -> None:
    """(c) the model's own read_tool_output calls: one cleared, one cut result, exact bytes."""
    last = fake.bodies()[-1]["messages"]
    cleared = next(m for m in last if is_placeholder(m) and marker_args(m["content"]))
    marked = [m for m in last if m["role"] == "tool" and marker_args(m["content"])]
    cut = next(m for m in reversed(marked) if "offset" in (marker_args(m["content"]) or {}))
    cut_args = marker_args(cut["content"])
    assert cut_args is not None and not is_placeholder(cut)
    calls = [
        tool_call("read_tool_output", {"id": cleared["tool_call_id"], "limit": 1500}, id="r0"),
        tool_call("read_tool_output", cut_args, id="r1"),
    ]
    fake.script(reply(None, tool_calls=calls), reply("done"))
    n = len(fake.bodies())
    out = sdk(proxy, SID).chat.completions.create(
        model="gpt-4o", messages=history, tools=CLIENT_TOOLS
    )
    assert out.choices[0].message.content == "done" and not out.choices[0].message.tool_calls
    assert len(fake.bodies()) == n + 2
    pages = fake.bodies()[-1]["messages"][-2:]
    a0, b0, _, text0 = page_slice(pages[0]["content"])
    assert (a0, b0) == (0, 1500) and text0 == originals[cleared["tool_call_id"]][:1500]
    original = originals[cut["tool_call_id"]]
    a1, b1, total, text1 = page_slice(pages[1]["content"])
    offset, limit = cut_args["offset"], cut_args["limit"]
    assert (a1, b1, total) == (offset, offset + limit, len(original))
    head, tail = cut["content"][:offset], original[b1:]
    assert head + text1 + tail == original and cut["content"].endswith(tail)
    with api(proxy) as http:
        for page, call in zip(pages, calls, strict=True):
            params = json.loads(call["function"]["arguments"])
            cid = params.pop("id")
            r = http.get(f"/v1/sessions/{SID}/tool-outputs/{cid}", params=params)
            assert r.json()["page"] == page["content"]


async def _leaks_in_tables(dsn: str) -> list[str]:
    conn = await asyncpg.connect(dsn)
    try:
        return [
            table
            for table, column in [
                ("messages", "message::text"),
                ("tool_raw_outputs", "content"),
                ("events", "data::text"),
                ("summaries", "content"),
            ]
            if await conn.fetchval(
                f"SELECT count(*) FROM {table} WHERE {column} LIKE '%' || $1 || '%'", SECRET
            )
        ]
    finally:
        await conn.close()


def check_no_leak(http: httpx.Client, fake: FakeUpstream, dsn: str) -> None:
    """(d) the planted secrets reach no path."""
    assert SECRET.encode() not in b"".join(r.content for r in fake.requests)
    rows = http.get(f"/v1/sessions/{SID}/messages", params={"include_superseded": True})
    assert rows.status_code == 200 and SECRET not in rows.text
    events = replay_events(http, SID)
    assert events and SECRET not in json.dumps(events)
    for m in rows.json()["data"]:
        cid = m["message"].get("tool_call_id")
        if cid and http.get(f"/v1/sessions/{SID}/tool-outputs/{cid}").status_code == 200:
            assert SECRET not in read_all(http, SID, cid, limit=4000)
            grep = http.get(f"/v1/sessions/{SID}/tool-outputs/{cid}", params={"grep": "CANARY"})
            assert "0 matching lines" in grep.json()["page"]
    assert run_sync(_leaks_in_tables(dsn)) == []


def test_sixty_step_agent_transcript_through_the_lossless_stage(
    proxy: ProxyServer, fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    transcript = plant_secrets(load_transcript(STEPS))
    originals = {m["tool_call_id"]: m["content"] for m in transcript if m["role"] == "tool"}
    history = replay(proxy, fake_upstream, transcript)
    prompts = [b["messages"] for b in fake_upstream.bodies()]
    assert len(prompts) == STEPS

    passes = check_prompts(prompts, history, originals)
    assert passes >= 2, "the replay should cross atFraction several times"
    assert sum(map(is_placeholder, prompts[-1])) >= 20
    with api(proxy) as http:
        assert check_recoverable(http, prompts[-1], originals) >= 20
        reclaimed = http.get(f"/v1/sessions/{SID}").json()["reclaimed_tokens"]
        assert reclaimed >= passes * CLEAR_AT_LEAST
        wait_event(http, SID, "context.usage", lambda d: d["reclaimed_tokens"] == reclaimed)

    check_internal_reads(proxy, fake_upstream, history, originals)
    with api(proxy) as http:
        check_no_leak(http, fake_upstream, db_dsn)
