"""Pinned handles (``cascade.pins``): every handle written for a tool result names it by id and
history position, so an id that comes back later (``call_0`` every turn) cannot lead the
model to another result; the code that rewords or links markers knows them."""

from __future__ import annotations

import json
import re
from typing import Any

from proxy.cascade.eviction import PLACEHOLDER_PREFIX, drop_placeholder_handle, evict
from proxy.cascade.handles import drop_handles
from proxy.cascade.observations import observation_id
from proxy.cascade.pins import names, pin
from proxy.cascade.truncation import (
    cap_utf8,
    drop_cut_handle,
    is_cut_from,
    is_cut_from_capped,
    truncate_tool_result,
)
from proxy.cascade.types import Budget
from proxy.config_context import EvictionConfig, RedactionConfig, ToolOutputConfig
from tests.unit.cascade.builders import assistant, assistant_calls, conversation, count, tool, user

NO_REDACTION = RedactionConfig(enabled=False)
CUT = ToolOutputConfig(max_chars=1000, compact=False)
TEXT = "".join(f"line {i:05d} of the build log\n" for i in range(300))
LISTING = "".join(f"src/pkg/module_{i:03d}.py  {i * 97} bytes\n" for i in range(50))


def _handle(text: str) -> Any:
    m = re.search(r"read_tool_output\((\{[^\n]*?\})\)", text)
    assert m is not None, text
    return json.loads(m[1])["id"]


def test_names_is_the_id_itself_or_a_pin_of_it() -> None:
    assert names("call_0", "call_0") and names("call_0@7", "call_0")
    assert names("a@b@3", "a@b") and names("a@b", "a@b")
    assert names("call_0@2147483647", "call_0")  # the last position a history holds
    for other in ("call_1@7", "call_0@x", "call_01", "call_0@2147483648", "", None, 7):
        assert not names(other, "call_0"), other
    assert not names("call_0", "")


def test_a_cut_marker_names_the_result_at_its_position() -> None:
    got = truncate_tool_result(tool("call_0", TEXT), cfg=CUT, redaction=NO_REDACTION, pos=4)
    text = str(got.message["content"])
    assert _handle(text) == "call_0@4"
    assert got.spill is not None and got.spill.tool_call_id == "call_0"  # keyed by the id
    assert got.events[0].data["tool_call_id"] == "call_0"
    assert got.events[0].data["handle"] == "call_0@4"  # as the marker names it
    assert len(text) <= CUT.max_chars and is_cut_from(text, TEXT)
    # Without a position (an observation: its handle is a hash of its text) the id alone.
    bare = truncate_tool_result(tool("obs_1", TEXT), cfg=CUT, redaction=NO_REDACTION)
    assert _handle(str(bare.message["content"])) == "obs_1"
    assert bare.events[0].data["handle"] == "obs_1"


def test_a_compacted_results_own_handle_is_pinned_too() -> None:
    cfg = ToolOutputConfig(max_chars=100_000)
    got = truncate_tool_result(
        tool("call_0", "WARN retry\n" * 300), cfg=cfg, redaction=NO_REDACTION, pos=9
    )
    text = str(got.message["content"])
    assert text.startswith("[compacted losslessly from ") and _handle(text) == "call_0@9"
    assert got.spill is not None and got.spill.tool_call_id == "call_0"
    assert got.events[0].data["tool_call_id"] == "call_0"
    assert got.events[0].data["handle"] == "call_0@9"


def test_truncation_events_name_each_result_under_a_reused_id_apart() -> None:
    # A client that numbers its call call_0 every turn: two cut results, one id.
    cuts = [
        truncate_tool_result(tool("call_0", TEXT), cfg=CUT, redaction=NO_REDACTION, pos=pos)
        for pos in (3, 7)
    ]
    assert [c.events[0].data["tool_call_id"] for c in cuts] == ["call_0", "call_0"]
    assert [c.events[0].data["handle"] for c in cuts] == ["call_0@3", "call_0@7"]
    assert [c.events[0].data["handle"] for c in cuts] == [
        _handle(str(c.message["content"])) for c in cuts
    ]


def test_an_evicted_results_placeholder_names_it_at_its_position() -> None:
    msgs = conversation([4000, 4000, 4000])
    budget = Budget(limit=10_000, reserved_output=0, occupancy=6_000)
    cfg = EvictionConfig(
        at_fraction=0.5, keep_recent_rounds=1, clear_at_least=500, min_result_tokens=100
    )
    positions = tuple(range(10, 10 + len(msgs)))
    out = evict(msgs, count=count, budget=budget, cfg=cfg, persist_raw=True, positions=positions)
    cleared = [i for i, m in enumerate(out.messages) if m is not msgs[i]]
    assert cleared == [3, 5]
    for i in cleared:
        cid = msgs[i]["tool_call_id"]
        assert _handle(out.messages[i]["content"]) == pin(cid, 10 + i)
    assert out.events[0].data["tool_call_ids"] == ["c0", "c1"]  # the ids, as before
    assert out.events[0].data["handles"] == ["c0@13", "c1@15"]  # as the placeholders name them
    # Positions that do not match the window: the id alone, never another result's place.
    short = evict(msgs, count=count, budget=budget, cfg=cfg, persist_raw=True, positions=(1,))
    assert _handle(short.messages[3]["content"]) == "c0"


def test_an_eviction_event_names_each_result_under_a_reused_id_apart() -> None:
    # A client that numbers its call call_0 every turn: one pass clears two results under it.
    msgs = conversation([4000, 4000, 4000])
    for m in msgs:
        if m.get("tool_call_id"):
            m["tool_call_id"] = "call_0"
        for call in m.get("tool_calls") or ():
            call["id"] = "call_0"
    budget = Budget(limit=10_000, reserved_output=0, occupancy=6_000)
    cfg = EvictionConfig(
        at_fraction=0.5, keep_recent_rounds=1, clear_at_least=500, min_result_tokens=100
    )
    positions = tuple(range(10, 10 + len(msgs)))
    out = evict(msgs, count=count, budget=budget, cfg=cfg, persist_raw=True, positions=positions)
    (event,) = out.events
    assert event.data["count"] == 2
    assert event.data["tool_call_ids"] == ["call_0", "call_0"]  # one per result, as sent
    assert event.data["handles"] == ["call_0@13", "call_0@15"]  # each names its result alone
    assert event.data["handles"] == [_handle(out.messages[i]["content"]) for i in (3, 5)]


def test_an_evicted_observation_keeps_its_own_handle() -> None:
    big = "Observation:\n" + TEXT * 3
    msgs = [user("task"), assistant("Action: 1"), user(big)]
    msgs += [assistant("Action: 2"), user("Observation: short"), assistant("Action: 3")]
    msgs += [user("go on")]
    budget = Budget(limit=10_000, reserved_output=0, occupancy=9_000)
    cfg = EvictionConfig(
        at_fraction=0.5, keep_recent_rounds=1, clear_at_least=100, min_result_tokens=100
    )
    out = evict(
        msgs,
        count=count,
        budget=budget,
        cfg=cfg,
        persist_raw=True,
        prefixes=("Observation:",),
        positions=tuple(range(len(msgs))),
    )
    assert str(out.messages[2]["content"]).startswith(PLACEHOLDER_PREFIX)
    assert _handle(out.messages[2]["content"]) == observation_id(msgs[2])
    assert out.events[0].data["handles"] == [observation_id(msgs[2])]


def test_a_prompt_without_the_tool_rewords_pinned_handles_of_its_own_result_only() -> None:
    mine = truncate_tool_result(tool("call_0", TEXT), cfg=CUT, redaction=NO_REDACTION, pos=3)
    cut = str(mine.message["content"])
    other = truncate_tool_result(tool("call_1", TEXT), cfg=CUT, redaction=NO_REDACTION, pos=3)
    quoted = str(other.message["content"])
    assert "read_tool_output" not in drop_cut_handle(cut, "call_0")
    assert drop_cut_handle(quoted, "call_0") == quoted  # another id's marker, pinned
    placeholder = (
        f"{PLACEHOLDER_PREFIX} Result of read_file (9000 chars) was cleared to save context. "
        'Recover it with read_tool_output({"id": "call_0@5"})'
    )
    reworded = drop_placeholder_handle(placeholder, "call_0")
    assert reworded.endswith("; re-run the tool if you need it.") and "@5" not in reworded
    assert drop_placeholder_handle(placeholder, "call_1") == placeholder
    compacted = truncate_tool_result(
        tool("call_0", "WARN retry\n" * 300),
        cfg=ToolOutputConfig(max_chars=100_000),
        redaction=NO_REDACTION,
        pos=3,
    )
    msgs = (
        user("go"),
        assistant_calls(("call_0", "read_file", {})),
        tool("call_0", cut),
        assistant_calls(("call_0", "read_file", {})),
        tool("call_0", placeholder),
        assistant_calls(("call_0", "read_file", {})),
        compacted.message,
        user("next"),
    )
    out = drop_handles(msgs, ())
    assert not any("read_tool_output" in str(m.get("content")) for m in out)
    assert str(out[6]["content"]).startswith("[compacted losslessly from 3300 chars (")


def test_a_capped_spill_is_linked_to_the_cut_it_agrees_with() -> None:
    cfg = ToolOutputConfig(max_chars=1000, compact=False)
    text = TEXT * 4
    cut = str(
        truncate_tool_result(tool("c", text), cfg=cfg, redaction=NO_REDACTION).message["content"]
    )
    for cap in (10, 500, 700, 5000, len(text) - 10):  # before, at, past the marker's offset
        assert is_cut_from_capped(cut, cap_utf8(text, cap)), cap
    assert is_cut_from_capped(cut, text)  # a cap past the end: the whole text
    other = TEXT.replace("line", "lime") * 4
    for cap in (10, 5000):
        assert not is_cut_from_capped(cut, cap_utf8(other, cap)), cap
    tail_differs = text[: len(text) - 50] + "x" * 50
    assert not is_cut_from_capped(cut, tail_differs)
    assert not is_cut_from_capped(LISTING, LISTING)  # no marker: no cut
