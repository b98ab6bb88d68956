from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings, strategies as st

from proxy.cascade.truncation import cap_utf8, has_cut_marker, is_cut_from, truncate_tool_result
from proxy.cascade.types import TRUNCATED
from proxy.config_context import RedactionConfig, ToolOutputConfig
from tests.unit.cascade.builders import tool, user

CFG = ToolOutputConfig(max_chars=1000)
RED = RedactionConfig()
SECRET = "sk-" + "Z9" * 20


def _marker_args(text: str) -> dict[str, object]:
    m = re.search(r"read_tool_output\((\{.*?\})\)", text)
    assert m is not None, text
    return json.loads(m.group(1))


def test_short_result_passes_through_as_same_object() -> None:
    msg = tool("c1", "ok")
    out = truncate_tool_result(msg, cfg=CFG, redaction=RED)
    assert out.message is msg
    assert (out.events, out.spill, out.redacted) == ((), None, 0)


def test_long_result_keeps_head_and_tail_with_marker_and_spills() -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(5000))
    out = truncate_tool_result(tool("c1", text), cfg=CFG, redaction=RED)
    new = out.message["content"]
    assert len(new) <= CFG.max_chars
    args = _marker_args(new)
    head_len, omitted = args["offset"], args["limit"]
    assert args["id"] == "c1"
    assert new.startswith(text[:head_len])
    tail_len = 5000 - head_len - omitted
    assert new.endswith(text[5000 - tail_len :])
    assert head_len == int((head_len + tail_len) * 0.7)
    assert f"truncated {omitted} chars" in new
    # the advertised slice is exactly what is missing
    assert (
        text[:head_len] + text[head_len : head_len + omitted] + text[head_len + omitted :] == text
    )
    assert out.spill is not None and out.spill.text == text and out.spill.tool_call_id == "c1"
    (event,) = out.events
    assert event.name == TRUNCATED
    assert event.data == {
        "tool_call_id": "c1",
        "handle": "c1",  # no position: the marker names the bare id
        "original_chars": 5000,
        "kept_chars": head_len + tail_len,
        "spilled": True,
    }
    assert out.message["role"] == "tool" and out.message["tool_call_id"] == "c1"


def test_redaction_runs_before_truncation_and_disables_spill() -> None:
    text = "x" * 3000 + f" {SECRET} " + "y" * 3000
    out = truncate_tool_result(tool("c1", text), cfg=CFG, redaction=RED)
    assert out.redacted == 1
    assert out.spill is None
    assert "read_tool_output" not in out.message["content"]
    assert "contained secrets" in out.message["content"]
    assert out.events[0].data["spilled"] is False
    assert len(out.message["content"]) <= CFG.max_chars


@pytest.mark.parametrize(
    ("persist_raw", "text"),
    [(True, "x" * 5000), (False, "x" * 5000), (True, "x" * 3000 + f" {SECRET} " + "y" * 3000)],
    ids=["copy", "no-copy", "secret"],
)
def test_every_cut_has_a_marker_to_find(persist_raw: bool, text: str) -> None:
    """``/messages`` marks a cut by its marker, with a copy kept or not (the store also
    checks the body is not the message sent)."""
    cfg = ToolOutputConfig(max_chars=1000, persist_raw=persist_raw)
    out = truncate_tool_result(tool("c1", text), cfg=cfg, redaction=RED, pos=2)
    assert has_cut_marker(out.message["content"])
    assert not has_cut_marker(text) and not has_cut_marker("[... truncated 5 chars ...]")


def test_secret_in_kept_head_is_redacted() -> None:
    text = f"{SECRET} " + "y" * 5000
    out = truncate_tool_result(tool("c1", text), cfg=CFG, redaction=RED)
    assert SECRET not in out.message["content"]
    assert out.message["content"].startswith("[REDACTED] ")


def test_short_secret_result_is_redacted_but_not_truncated() -> None:
    out = truncate_tool_result(tool("c1", f"k={SECRET}"), cfg=CFG, redaction=RED)
    assert out.message["content"] == "k=[REDACTED]"
    assert out.redacted == 1 and out.events == () and out.spill is None


def test_redaction_disabled_keeps_secret_and_spills() -> None:
    text = f"{SECRET} " + "y" * 5000
    red = RedactionConfig(enabled=False)
    out = truncate_tool_result(tool("c1", text), cfg=CFG, redaction=red)
    assert out.message["content"].startswith(SECRET)
    assert out.spill is not None and out.redacted == 0


def test_without_persist_raw_marker_has_no_handle() -> None:
    cfg = ToolOutputConfig(max_chars=1000, persist_raw=False)
    out = truncate_tool_result(tool("c1", "z" * 5000), cfg=cfg, redaction=RED)
    assert out.spill is None
    assert "read_tool_output" not in out.message["content"]
    assert "re-run the tool" in out.message["content"]


def test_spill_carries_the_full_text_for_the_store_to_cap() -> None:
    """The store caps at rawCapBytes and records the original size, so the spill is whole."""
    cfg = ToolOutputConfig(max_chars=1000, raw_cap_bytes=3001)
    text = "é" * 5000  # 2 bytes each
    out = truncate_tool_result(tool("c1", text), cfg=cfg, redaction=RED)
    assert out.spill is not None and out.spill.text == text


def test_cap_utf8() -> None:
    assert cap_utf8("abc", 10) == "abc"
    assert cap_utf8("a€b", 3) == "a"
    assert cap_utf8("a€b", 4) == "a€"
    assert cap_utf8("😀" * 10, 9) == "😀😀"


def test_text_parts_are_joined() -> None:
    msg = {
        "role": "tool",
        "tool_call_id": "c1",
        "content": [{"type": "text", "text": "a" * 3000}, {"type": "text", "text": "b" * 3000}],
    }
    out = truncate_tool_result(msg, cfg=CFG, redaction=RED)
    assert isinstance(out.message["content"], str)
    assert out.spill is not None and out.spill.text == "a" * 3000 + "\n" + "b" * 3000


def test_non_tool_message_is_redacted_not_truncated() -> None:
    long = "q" * 5000 + f" {SECRET}"
    out = truncate_tool_result(user(long), cfg=CFG, redaction=RED)
    assert out.message["content"] == "q" * 5000 + " [REDACTED]"
    assert out.events == () and out.spill is None and out.redacted == 1


@given(st.integers(min_value=200, max_value=3000), st.integers(min_value=0, max_value=20_000))
@settings(max_examples=60, deadline=None)
def test_truncated_result_never_exceeds_max_chars(max_chars: int, size: int) -> None:
    cfg = ToolOutputConfig(max_chars=max_chars)
    out = truncate_tool_result(tool("call_abc", "w" * size), cfg=cfg, redaction=RED)
    assert len(out.message["content"]) <= max_chars
    assert (out.spill is not None) == (size > max_chars)


@given(st.text(min_size=1001, max_size=3000), st.characters())
@settings(max_examples=50, deadline=None)
def test_a_cut_links_to_the_spill_it_was_made_from(text: str, extra: str) -> None:
    """The link the ``?form=sent`` messages use for a result sent as content parts: a cut
    is the head, marker and tail of its own spill, where its marker says; a text with
    another head, tail or length is not its spill."""
    out = truncate_tool_result(tool("call_0", text), cfg=CFG, redaction=RED)
    assert out.spill is not None
    cut = out.message["content"]
    assert is_cut_from(cut, text)
    assert not any(is_cut_from(cut, t) for t in (extra + text, text + extra, text[1:]))
    assert not is_cut_from(text, text)


def test_truncation_switched_off_keeps_a_long_result_whole() -> None:
    """``toolOutput.enabled`` false turns the cut off on its own (DESIGN §7: each stage can be
    disabled): the result goes on whole, nothing is spilled, and redaction still runs."""
    cfg = ToolOutputConfig(max_chars=1000, enabled=False, compact=False)
    text = "x" * 4000 + " " + SECRET
    out = truncate_tool_result(tool("c1", text), cfg=cfg, redaction=RED)
    new = out.message["content"]
    assert new.startswith("x" * 4000 + " ") and len(new) > cfg.max_chars
    assert SECRET not in new and "read_tool_output" not in new
    assert (out.events, out.spill, out.redacted) == ((), None, 1)


def test_lossless_compaction_applies_with_the_cut_switched_off() -> None:
    """With the cut off, ``maxChars`` no longer bounds a compacted result: the compaction is
    lossless, so it still applies to a result of any size."""
    cfg = ToolOutputConfig(max_chars=1000, enabled=False)
    text = json.dumps([{"k": i, "v": "y" * 20} for i in range(200)], indent=2)
    out = truncate_tool_result(tool("c1", text), cfg=cfg, redaction=RED)
    assert out.spill is not None and out.spill.text == text
    assert len(out.message["content"]) > cfg.max_chars
    assert [e.name for e in out.events] == [TRUNCATED]


def test_an_assistant_message_the_client_writes_has_its_tool_call_arguments_redacted() -> None:
    """Regression: ingestion redacted an assistant message's content but not the arguments
    of its tool calls (or legacy ``function_call``), which the model reads as much: a
    client that writes the turn itself (an agent framework rebuilding its history, a
    few-shot example) had a key in the arguments stored and sent upstream."""
    call = {"id": "t1", "type": "function", "function": {"name": "f", "arguments": ""}}
    call["function"]["arguments"] = json.dumps({"token": SECRET, "path": "/tmp"})
    msg = {"role": "assistant", "content": f"using {SECRET}", "tool_calls": [call]}
    out = truncate_tool_result(msg, cfg=CFG, redaction=RED)
    assert SECRET not in json.dumps(out.message) and out.redacted == 2
    args = json.loads(out.message["tool_calls"][0]["function"]["arguments"])
    assert args == {"token": "[REDACTED]", "path": "/tmp"}
    assert out.message["tool_calls"][0]["id"] == "t1"
    legacy = {
        "role": "assistant",
        "content": None,
        "function_call": {"name": "f", "arguments": SECRET},
    }
    assert truncate_tool_result(legacy, cfg=CFG, redaction=RED).message["function_call"] == {
        "name": "f",
        "arguments": "[REDACTED]",
    }
    off = truncate_tool_result(msg, cfg=CFG, redaction=RedactionConfig(enabled=False))
    assert off.message is msg and off.redacted == 0


def test_a_marker_whose_arguments_nest_past_the_recursion_limit_is_no_cut() -> None:
    """A client's text holding a marker with arguments nested 10,000 levels: reading them is
    a RecursionError, no ValueError; the text is no cut of anything, not a 500."""
    args = '{"id": "c1", "offset": ' + "[" * 10_000 + "]" * 10_000 + ', "limit": 5}'
    text = f"head\n[... truncated 5 chars; read the rest with read_tool_output({args}) ...]\ntail"
    assert not is_cut_from(text, "head12345tail")
