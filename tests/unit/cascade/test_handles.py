"""``drop_handles``: a prompt that goes without ``read_tool_output`` names no handle, and
``holds_handle`` finds every handle a message names for itself."""

from __future__ import annotations

import json
from typing import Any

from proxy.cascade.eviction import evict, placeholder_text
from proxy.cascade.handles import drop_handles, holds_handle
from proxy.cascade.lossless import compacted_marker
from proxy.cascade.observations import observation_ids
from proxy.cascade.pins import pin, unpin
from proxy.cascade.pipeline import assemble
from proxy.cascade.step import StepInput
from proxy.cascade.truncation import truncate_tool_result
from proxy.cascade.types import Budget
from proxy.config_context import ContextConfig, EvictionConfig, RedactionConfig, ToolOutputConfig
from tests.unit.cascade.builders import assistant, assistant_calls, count, system, tool, user

PREFIXES = ("Observation:",)
NO_REDACTION = RedactionConfig(enabled=False)
TEXT = "".join(f"line {i:05d} of the build log\n" for i in range(400))


def cut(cid: str, text: str = TEXT, *, persist_raw: bool = True) -> str:
    cfg = ToolOutputConfig(max_chars=2000, persist_raw=persist_raw, compact=False)
    msg = truncate_tool_result(tool(cid, text), cfg=cfg, redaction=NO_REDACTION).message
    return str(msg["content"])


def rounds(*results: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    msgs: list[dict[str, Any]] = [system("sys"), user("go")]
    for r in results:
        msgs += [assistant_calls((r["tool_call_id"], "read_file", {})), r]
    return (*msgs, user("next"))


def test_a_cut_marker_says_re_run_and_keeps_head_tail_and_count() -> None:
    handled = cut("call_1")
    assert 'read_tool_output({"id": "call_1", "offset"' in handled
    msgs = rounds(tool("call_1", handled))
    (_, _, _, out, _) = drop_handles(msgs, PREFIXES)
    text = out["content"]
    assert "read_tool_output" not in text
    head, _, rest = handled.partition("\n[... truncated ")
    omitted = rest.split(" ", 1)[0]
    tail = rest.split(" ...]\n", 1)[1]
    marker = f"\n[... truncated {omitted} chars; re-run the tool if you need the rest ...]\n"
    assert text == head + marker + tail
    # The wording is the one a result gets when no copy is kept.
    assert "re-run the tool if you need the rest ...]" in cut("call_1", persist_raw=False)


def test_a_placeholder_is_the_one_without_a_handle() -> None:
    handled = placeholder_text("read_file", "call_7", 9000, handle=True)
    (*_, out, _) = drop_handles(rounds(tool("call_7", handled)), PREFIXES)
    assert out["content"] == placeholder_text("read_file", "call_7", 9000, handle=False)


def test_a_compacted_result_keeps_its_text_and_says_what_was_done() -> None:
    body = '{"a":1}'
    handled = compacted_marker("call_j", 120, "JSON minified") + body
    (*_, out, _) = drop_handles(rounds(tool("call_j", handled)), PREFIXES)
    assert out["content"] == "[compacted losslessly from 120 chars (JSON minified)]\n" + body


def test_observations_cut_and_evicted_lose_their_handles() -> None:
    big = "Observation:\n" + TEXT
    msgs = [system("sys"), user("task"), assistant("Action: 1"), user(big)]
    msgs += [assistant("Action: 2"), user(big.replace("line", "row")), assistant("Action: 3")]
    msgs.append(user("Observation: ok"))
    oid = observation_ids(msgs, PREFIXES)[5]
    cfg = ToolOutputConfig(max_chars=2000, compact=False)
    got = truncate_tool_result(
        tool(oid, msgs[5]["content"]), cfg=cfg, redaction=NO_REDACTION
    ).message["content"]
    msgs[5] = user(str(got))
    cleared = evict(
        msgs,
        count=count,
        budget=Budget(limit=10_000, reserved_output=0, occupancy=9_000),
        cfg=EvictionConfig(keep_recent_rounds=2, clear_at_least=10, min_result_tokens=10),
        persist_raw=True,
        prefixes=PREFIXES,
    ).messages
    assert cleared[3]["content"].startswith("[context-cleared]")
    assert "read_tool_output" in cleared[3]["content"] and "read_tool_output" in got
    out = drop_handles(tuple(cleared), PREFIXES)
    assert not any("read_tool_output" in str(m["content"]) for m in out)
    assert out[3]["content"].endswith("; re-run the tool if you need it.")
    assert "re-run the tool if you need the rest" in out[5]["content"]


def test_an_evicted_observation_is_a_handle_the_tool_is_offered_for() -> None:
    msgs = [system("sys"), user("task"), assistant("Action: 1"), user("Observation: " + TEXT)]
    msgs += [assistant("Action: 2"), user("Observation: ok")]
    oid = observation_ids(msgs, PREFIXES)[3]
    msgs[3] = user(placeholder_text("run", oid, len(TEXT), handle=True))
    assert holds_handle(msgs, PREFIXES)
    ctx = ContextConfig.model_validate({"eviction": {"enabled": False}})
    budget = Budget(limit=1_000_000, reserved_output=0, occupancy=0)
    inp = StepInput(
        window=tuple(msgs), system_count=1, summary=None, count=count, budget=budget, ctx=ctx
    )
    assert assemble(inp).offer_read_tool


def test_text_the_proxy_did_not_write_goes_as_sent() -> None:
    quoted = cut("call_other")  # another result's marker, quoted by this tool's output
    plain = user(cut("call_u"))  # a user message that is no observation
    msgs = (system("sys"), plain, assistant_calls(("call_q", "cat", {})), tool("call_q", quoted))
    assert drop_handles(msgs, PREFIXES) is msgs
    short = rounds(tool("call_s", "short"))
    assert drop_handles(short, PREFIXES) is short


def test_the_same_prompt_gives_the_same_bytes_and_rewording_twice_changes_nothing() -> None:
    msgs = rounds(tool("call_1", cut("call_1")), tool("call_2", cut("call_2", TEXT[::-1])))
    once = drop_handles(msgs, PREFIXES)
    assert json.dumps(once) == json.dumps(drop_handles(msgs, PREFIXES))
    assert drop_handles(once, PREFIXES) is once
    assert msgs[3]["content"] == cut("call_1")  # the input is never changed


def test_only_the_results_own_marker_is_reworded() -> None:
    # Another result's cut text (its marker quoted) ahead of this result's own marker.
    own = cut("call_other") + cut("call_me")
    (*_, out, _) = drop_handles(rounds(tool("call_me", own)), PREFIXES)
    assert 'read_tool_output({"id": "call_other"' in out["content"]
    assert '"id": "call_me"' not in out["content"]
    phrase = " chars; read the rest with read_tool_output( no marker"
    assert drop_handles(rounds(tool("c", phrase * 3)), PREFIXES)[3]["content"] == phrase * 3


def test_a_pinned_handle_reads_back_its_id_and_position_and_no_other_id_does() -> None:
    assert pin("call_0", 12) == "call_0@12"
    assert unpin(pin("call_0", 12)) == ("call_0", 12)
    assert unpin(pin("a@b", 0)) == ("a@b", 0)  # the last @ splits
    for other in ("call_0", "call_0@", "@3", "call_0@01", "call_0@3x", "call_0@ 3"):
        assert unpin(other) is None, other


def test_the_tool_stays_offered_once_a_summary_folds_the_last_handle() -> None:
    """A compaction that folds the last cut or cleared result keeps the tool: dropping it
    there and adding it back with the next cut result changes the tools, the head of the
    provider's cached prefix, twice."""
    msgs = [system("sys"), user("go"), assistant_calls(("call_1", "run", {})), tool("call_1", "ok")]
    assert not holds_handle(msgs, PREFIXES)
    budget = Budget(limit=1_000_000, reserved_output=0, occupancy=0)
    ctx = ContextConfig.model_validate({"eviction": {"enabled": False}})

    def offered(summary: str | None, c: ContextConfig = ctx) -> bool:
        inp = StepInput(
            window=tuple(msgs), system_count=1, summary=summary, count=count, budget=budget, ctx=c
        )
        return assemble(inp).offer_read_tool

    assert offered("## Objective\nShip it.")
    assert not offered(None)
    assert not offered("  ")
    no_copy = ContextConfig.model_validate(
        {"eviction": {"enabled": False}, "toolOutput": {"persistRaw": False}}
    )
    assert not offered("## Objective\nShip it.", no_copy)
