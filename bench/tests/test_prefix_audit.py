"""``bench.prefix_audit``: what breaks a forwarded prompt's cached prefix, as the audit reads it."""

from __future__ import annotations

import json
from typing import Any

from bench.prefix_audit import audit, classify, filler_facts
from proxy.cascade.memory import sanitize_facts
from proxy.cascade.memory_block import MEMORY_MAX_TOKENS, render_memory

TOOL = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
READ = {"type": "function", "function": {"name": "read_tool_output"}}


def body(*messages: dict[str, Any], tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"model": "m", "tools": tools or [TOOL], "messages": list(messages)}


SYS = {"role": "system", "content": "sys"}
ASK = {"role": "user", "content": "go"}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "x" * 400}
CLEARED = {"role": "tool", "tool_call_id": "c1", "content": "[context-cleared] 400 chars"}


def test_a_prompt_that_extends_the_last_one_is_no_break() -> None:
    assert classify(body(SYS, ASK), body(SYS, ASK, RESULT)) == ("extends", 3)


def test_a_tool_added_breaks_at_the_head() -> None:
    cause, at = classify(body(SYS, ASK), body(SYS, ASK, tools=[TOOL, READ]))
    assert at == 0 and "read_tool_output" in cause


def test_deliberate_steps_are_named() -> None:
    assert classify(body(SYS, ASK, RESULT), body(SYS, ASK, CLEARED))[0] == "evicted"
    again = {**CLEARED, "content": "[context-cleared] 401 chars"}
    assert classify(body(SYS, ASK, CLEARED), body(SYS, ASK, again))[0].startswith("DEFECT")
    summary = {"role": "user", "content": "<conversation_summary>\nS\n</conversation_summary>"}
    assert classify(body(SYS, ASK, RESULT), body(SYS, summary))[0] == "summary changed"
    plan = {"role": "user", "content": "go\n\n<plan>\n- a\n</plan>"}
    assert classify(body(SYS, plan), body(SYS, ASK, RESULT))[0] == "tail block moved on"


def test_audit_pairs_each_sessions_main_requests_and_skips_the_fast_model() -> None:
    raw = [
        ("s", 0, False, json.dumps(body(SYS, ASK)).encode()),
        ("s", None, True, json.dumps(body(SYS)).encode()),
        ("t", 0, False, json.dumps(body(SYS)).encode()),
        ("s", 1, False, json.dumps(body(SYS, ASK, RESULT)).encode()),
        ("s", 2, False, json.dumps(body(SYS, ASK, CLEARED)).encode()),
    ]
    stats = audit(raw)
    assert stats.pairs == 2 and stats.extends == 1
    assert stats.causes == {"extends": 1, "evicted": 1}
    assert 0 < stats.shared < stats.total


def test_rounds_dropped_from_the_middle_are_named() -> None:
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]}
    later = {"role": "assistant", "content": "next"}
    cause, at = classify(body(SYS, ASK, call, RESULT, later), body(SYS, ASK, later))
    assert (cause, at) == ("messages dropped (guard/compaction)", 3)


def test_every_older_round_dropped_is_named_too() -> None:
    old = {"role": "assistant", "content": "old"}
    new = {"role": "assistant", "content": "new"}
    cause, _ = classify(body(SYS, ASK, old, RESULT, old, RESULT), body(SYS, ASK, new, RESULT))
    assert cause == "messages dropped (guard/compaction)"


def test_the_plan_moving_on_from_a_turn_message_with_its_related_context_is_named() -> None:
    related = "go\n\n<related_context>\nq\n</related_context>"
    prev = {"role": "user", "content": related + "\n\n<plan>\n- a\n</plan>"}
    cur = {"role": "user", "content": related}
    assert classify(body(SYS, prev), body(SYS, cur, RESULT))[0] == "tail block moved on"


def test_the_facts_to_fill_the_memory_block_are_each_stored() -> None:
    """``--facts N`` stores N facts first so the ``<memory>`` block is full (its cut's
    steady state): each must pass the memory API's check, none a duplicate of another."""
    texts = filler_facts(200)
    verdicts = sanitize_facts(texts)
    assert len(texts) == 200 and all(v.text is not None for v in verdicts)
    block = render_memory(texts, max_tokens=MEMORY_MAX_TOKENS)
    assert block is not None and texts[0] in block and texts[-1] not in block  # full: cut


def test_a_block_the_guard_leaves_out_of_an_earlier_message_is_named() -> None:
    """The guard leaves an optional block (retrieval's, the plan) out of the turn's user
    message once the prompt cannot fit it, and the turn's later steps leave it out too: a
    deliberate step, not an unexplained break, though the message is no longer the last."""
    related = "go\n\n<related_context>\nq\n</related_context>"
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]}
    prev = body(SYS, {"role": "user", "content": related}, call, RESULT)
    cur = body(SYS, ASK, call, RESULT, call, RESULT)
    assert classify(prev, cur)[0] == "optional block left out (guard)"


def test_a_new_turn_alone_after_the_guard_dropped_every_older_round_is_named() -> None:
    """A small window where only the new turn's message fits after the system prompt: the
    guard dropped every older round, user messages too, a deliberate step."""
    old = {"role": "assistant", "content": "old"}
    new = {"role": "user", "content": "next"}
    cause, at = classify(body(SYS, ASK, old, RESULT, old), body(SYS, new))
    assert (cause, at) == ("messages dropped (guard/compaction)", 2)
