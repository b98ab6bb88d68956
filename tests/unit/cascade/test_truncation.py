from __future__ import annotations

import json
import random
import re
import string
import time

from hypothesis import given, settings, strategies as st

from proxy.cascade.truncation import (
    cap_utf8,
    is_cut_from,
    page_raw_output,
    truncate_tool_result,
)
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


# --- page_raw_output -------------------------------------------------------------------


def _page_body(page: str) -> tuple[int, int, int, str]:
    header, _, rest = page.partition("\n")
    m = re.fullmatch(r"\[read_tool_output id=\S* chars (\d+)-(\d+) of (\d+)\]", header)
    assert m is not None, header
    a, b, n = (int(g) for g in m.groups())
    return a, b, n, rest[: b - a]


def test_page_returns_slice_with_header() -> None:
    text = "0123456789" * 10
    page = page_raw_output(text, id="c1", offset=5, limit=10, max_chars=1000)
    assert page.startswith("[read_tool_output id=c1 chars 5-15 of 100]\n5678901234\n")
    assert '"offset": 15' in page  # note naming the next offset


def test_last_page_has_no_next_note() -> None:
    page = page_raw_output("abc", id="c1", max_chars=1000)
    assert page == "[read_tool_output id=c1 chars 0-3 of 3]\nabc"


def test_page_is_capped_including_header() -> None:
    text = "x" * 10_000
    page = page_raw_output(text, id="c1", offset=0, limit=5000, max_chars=500)
    assert len(page) <= 500
    a, b, _, body = _page_body(page)
    assert a == 0 and body == text[a:b] and b < 5000
    assert f'"offset": {b}' in page


def test_offset_past_end_is_empty_page() -> None:
    page = page_raw_output("abc", id="c1", offset=99, max_chars=1000)
    assert _page_body(page) == (3, 3, 3, "")


@given(
    st.text(alphabet=st.characters(codec="utf-8"), max_size=3000),
    st.integers(min_value=200, max_value=700),
    st.one_of(st.none(), st.integers(min_value=1, max_value=900)),
)
@settings(max_examples=80, deadline=None)
def test_paging_by_offset_reproduces_text_exactly(
    text: str, max_chars: int, limit: int | None
) -> None:
    offset, pieces = 0, []
    while True:
        page = page_raw_output(text, id="c1", offset=offset, limit=limit, max_chars=max_chars)
        assert len(page) <= max_chars
        a, b, n, body = _page_body(page)
        assert (a, n) == (offset, len(text))
        pieces.append(body)
        if b >= n:
            break
        assert b > a
        offset = b
    assert "".join(pieces) == text


def test_grep_lists_matching_lines_with_offsets() -> None:
    text = "alpha\nbeta needle\ngamma\nneedle delta\n"
    page = page_raw_output(text, id="c1", grep="needle", max_chars=1000)
    lines = page.splitlines()
    assert "2 matching lines" in lines[0]
    assert lines[1:] == ["6: beta needle", "24: needle delta"]
    assert text[6:].startswith("beta needle") and text[24:].startswith("needle delta")


def test_grep_is_literal_in_any_case_with_alternatives() -> None:
    text = "a1\nB2\n(x\nd.\n"
    hits = page_raw_output(text, grep="b2|(X", max_chars=1000).splitlines()[1:]
    assert hits == ["3: B2", "6: (x"]
    assert page_raw_output(text, grep=".", max_chars=1000).splitlines()[1:] == ["9: d."]
    assert page_raw_output(text, grep="|", max_chars=1000).startswith("[read_tool_output")


def test_grep_takes_linear_time_whatever_the_pattern() -> None:
    # as a regex, (a*)*b backtracks exponentially: 2**40 steps on this one line
    text = "a" * 40 + "\n" + "(a*)*b here\n"
    assert page_raw_output(text, grep="(a*)*b", max_chars=1000).splitlines()[1:] == [
        "41: (a*)*b here"
    ]


def test_grep_time_does_not_grow_with_the_alternatives() -> None:
    # A regex of 300 escaped alternatives took 2 s on this 1 MB (18 s for 1,000 on 2 MB),
    # on the event loop every tenant shares; one automaton takes milliseconds.
    rng = random.Random(1)
    text = (
        "\n".join(
            "".join(rng.choice("abcdefghij klmnop") for _ in range(60)) for _ in range(16_000)
        )
        + "\nthe Needle line\n"
    )
    words = ["".join(rng.choice(string.ascii_lowercase) for _ in range(7)) for _ in range(300)]
    # The best of three runs: a loaded machine's preemption lengthens a run, never shortens
    # one, and the regex took seconds every time.
    took = []
    for _ in range(3):
        started = time.perf_counter()
        page = page_raw_output(text, grep="|".join([*words, "NEEDLE"]), max_chars=10_000)
        took.append(time.perf_counter() - started)
    assert min(took) < 1.0, took
    assert page.splitlines()[-1] == f"{len(text) - 16}: the Needle line"


def test_grep_output_is_capped() -> None:
    text = "hit line\n" * 5000
    page = page_raw_output(text, id="c1", grep="hit", max_chars=1000)
    assert len(page) <= 1000
    assert "5000 matching lines" in page
    assert "more matching lines not shown" in page


def test_grep_pages_by_the_offset_its_note_names_without_skipping_or_repeating() -> None:
    # the note said only "page with offset/limit"; the offset just past the last line shown
    # starts inside that line, whose rest is listed again when it still matches
    text = "".join(f"hit {i} of the log\n" for i in range(500))
    seen: list[str] = []
    offset = 0
    for _ in range(50):
        page = page_raw_output(text, id="c1", grep="hit", offset=offset, max_chars=1000)
        assert len(page) <= 1000
        seen += [row.split(": ", 1)[1] for row in page.splitlines()[1:] if ": hit " in row]
        named = re.search(r"offset (\d+)", page.splitlines()[-1])
        if named is None:
            break
        offset = int(named[1])
    assert seen == [f"hit {i} of the log" for i in range(500)]


def test_grep_with_no_room_for_a_whole_hit_still_shows_one_and_moves_on() -> None:
    # a page whose room (the window's, or a small maxChars) was less than its first matching
    # row listed none and named that row's own offset: the caller was sent back to it forever
    short = "".join(f"hit {i} of the log\n" for i in range(50))
    long = "z" * 1000 + " hit " + "z" * 1000 + "\nhit again\n"
    for text, max_chars in ((short, 300), (short, 320), (long, 420), (long, 600)):
        page = page_raw_output(text, id="c1", grep="hit", max_chars=max_chars)
        first = page.splitlines()[1]
        at, shown = first.split(": ", 1)
        assert "hit" in shown, (max_chars, page)
        assert shown.strip("…") == text[int(at) : int(at) + len(shown.strip("…"))]
        named = re.search(r"offset (\d+)", page.splitlines()[-1])
        assert named is not None and int(named[1]) > text.index("hit"), page
        assert max_chars < 400 or len(page) <= max_chars, page


def test_grep_with_a_long_pattern_stays_within_the_cap() -> None:
    # the header quoted the whole pattern: a 30,000-character grep gave a page past the cap
    page = page_raw_output("hit\n" * 10, id="c1", grep="x" * 30_000 + "|hit", max_chars=1000)
    assert len(page) <= 1000
    assert "10 matching lines" in page


def test_grep_long_line_shows_window_at_absolute_offset() -> None:
    text = "z" * 10_000 + "NEEDLE" + "z" * 10_000
    page = page_raw_output(text, grep="NEEDLE", max_chars=2000)
    row = page.splitlines()[1]
    start = int(row.split(":", 1)[0])
    assert len(row) < 500 and "NEEDLE" in row
    assert row.split(": ", 1)[1].strip("…") == text[start : start + len(row.split(": ", 1)[1]) - 2]


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
