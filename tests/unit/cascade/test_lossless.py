from __future__ import annotations

import json
import re

from hypothesis import given, settings, strategies as st

from proxy.cascade.lossless import collapse_repeats, compact_text, minify_json
from proxy.cascade.pipeline import EARLIER_RESULTS, EarlierResults, earlier_results, ingest
from proxy.cascade.pointers import EarlierLines
from proxy.cascade.truncation import truncate_tool_result
from proxy.cascade.types import TRUNCATED
from proxy.config_context import ContextConfig, RedactionConfig, ToolOutputConfig
from tests.unit.cascade.builders import tool

CFG = ToolOutputConfig(max_chars=24_000)
RED = RedactionConfig()
SECRET = "sk-" + "Z9" * 20
PRETTY = json.dumps(
    {
        "b": [1.10, 2, {"z": "a  b\n", "a": None}],
        "a": 10**30,
        "rows": [[i, True] for i in range(30)],
    },
    indent=2,
)


def _handle(text: str) -> dict[str, object]:
    m = re.search(r"read_tool_output\((\{.*?\})\)", text)
    assert m is not None, text
    return json.loads(m.group(1))


def test_minify_keeps_tokens_order_and_string_whitespace() -> None:
    text = '{\n  "b": 1.10,\n  "a": [1e400, 123456789012345678901234567890],\n  "s": " x  y "\n}'
    assert minify_json(text) == '{"b":1.10,"a":[1e400,123456789012345678901234567890],"s":" x  y "}'


def test_minify_keeps_duplicate_keys_and_escapes() -> None:
    text = '{ "k": 1, "k": "a\\" }{" }'
    assert minify_json(text) == '{"k":1,"k":"a\\" }{"}'


def test_minify_refuses_non_json_scalars_and_already_minified() -> None:
    assert minify_json("not json {") is None
    assert minify_json('  "just a string"  ') is None
    assert minify_json("  42 ") is None
    assert minify_json('{"a":1}') is None
    assert minify_json("{\n 'a': 1\n}") is None
    assert minify_json("[INFO] step 1\n[INFO] step 2 {\n  a: 1\n}") is None  # opens like JSON
    assert minify_json("[1, 2]\n[3, 4]") is None  # JSON, then more


def test_collapse_folds_runs_of_three_or_more() -> None:
    lines = ["a", "b", "b", "c", "c", "c", "c", "d"]
    out, folded = collapse_repeats(lines)
    assert out == ["a", "b", "b", "c", "[previous line repeated 3 more times]", "d"]
    assert folded == 3


def test_compact_text_none_when_nothing_applies() -> None:
    assert compact_text("plain\ntext\n") is None


def test_ingest_compacts_json_and_spills_the_exact_original() -> None:
    msg = tool("c1", PRETTY)
    out = truncate_tool_result(msg, cfg=CFG, redaction=RED)
    assert out.spill is not None and out.spill.text == PRETTY
    content = out.message["content"]
    assert content.startswith("[compacted losslessly from")
    assert _handle(content) == {"id": "c1"}
    body = content.split("\n", 1)[1]
    assert json.loads(body) == json.loads(PRETTY)
    assert out.events[0].name == TRUNCATED and out.events[0].data["compacted"] == "JSON minified"


def test_ingest_leaves_result_when_saving_below_min() -> None:
    msg = tool("c1", PRETTY)
    cfg = ToolOutputConfig(max_chars=24_000, compact_min_saving=0.9)
    out = truncate_tool_result(msg, cfg=cfg, redaction=RED)
    assert out.message is msg and out.spill is None


def test_ingest_off_by_config() -> None:
    msg = tool("c1", PRETTY)
    out = truncate_tool_result(msg, cfg=ToolOutputConfig(compact=False), redaction=RED)
    assert out.message is msg and out.spill is None


def test_redacted_result_is_neither_compacted_nor_spilled() -> None:
    text = json.dumps({"key": SECRET, "rows": list(range(50))}, indent=2)
    out = truncate_tool_result(tool("c1", text), cfg=CFG, redaction=RED)
    assert out.spill is None and out.redacted > 0
    assert "compacted" not in out.message["content"] and SECRET not in out.message["content"]


def test_compacted_text_still_over_limit_is_truncated_from_the_original() -> None:
    text = json.dumps([{"i": i, "name": f"item {i}"} for i in range(400)], indent=2)
    cfg = ToolOutputConfig(max_chars=2_000)
    out = truncate_tool_result(tool("c1", text), cfg=cfg, redaction=RED)
    assert out.spill is not None and out.spill.text == text
    assert "compacted" not in out.message["content"] and "truncated" in out.message["content"]


def test_ingest_points_to_earlier_results_in_the_history() -> None:
    log = "\n".join(f"src/module_{i}.py:10: warning: unused import os" for i in range(40))
    history = [tool("call_a", log), tool("call_b", "header\n" + log + "\nfooter")]
    out = ingest(history[1], ContextConfig(), earlier_results(history, 1))
    content = out.message["content"]
    assert "[40 lines: same as lines 1-40 of tool result call_a@0]" in content
    assert out.spill is not None and out.spill.text == history[1]["content"]


_LINE = st.sampled_from(["", "x", "same line here", "  {", '"k": 1,', "}", "ERROR: retry"])
_TEXT = st.one_of(
    st.lists(_LINE, max_size=60).map("\n".join),
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False)
        | st.text(max_size=8),
        lambda kids: (
            st.lists(kids, max_size=5) | st.dictionaries(st.text(max_size=4), kids, max_size=5)
        ),
        max_leaves=30,
    ).map(lambda v: json.dumps(v, indent=2)),
)


@settings(max_examples=300, deadline=None)
@given(text=_TEXT, earlier=st.lists(_LINE, max_size=40).map("\n".join))
def test_compaction_is_recoverable(text: str, earlier: str) -> None:
    msg = tool("c9", text)
    history = [tool("c0", earlier), msg]
    cfg = ToolOutputConfig(max_chars=24_000, compact_min_saving=0.0)
    out = truncate_tool_result(
        msg, cfg=cfg, redaction=RedactionConfig(enabled=False), earlier=earlier_results(history, 1)
    )
    if out.message is msg:
        assert out.spill is None
        return
    assert out.spill is not None and out.spill.text == text
    content = out.message["content"]
    assert _handle(content) == {"id": "c9"}
    assert len(content) < len(text)
    done = compact_text(text, EarlierLines.build([("c0@0", earlier)]))  # c0 at position 0
    assert done is not None and content.endswith(done.text)
    if done.json_minified and not done.json_tables:
        assert json.loads(done.text) == json.loads(text)


def test_one_index_per_request_matches_a_fresh_index_at_every_position() -> None:
    """``EarlierResults`` grows one index through a request's new messages; at each position
    it holds exactly what ``earlier_results`` builds from the whole history before it, past
    the ``EARLIER_RESULTS`` window too."""
    history: list[dict[str, object]] = []
    for i in range(EARLIER_RESULTS + 6):
        history.append({"role": "assistant", "content": None})
        lines = [f"line {i % 7} {j % 5}" for j in range(4)] + [f"only in {i}"]
        history.append({"role": "tool", "tool_call_id": f"c{i}", "content": "\n".join(lines)})
    grown = EarlierResults(history)
    for pos in range(len(history)):
        assert grown.before(pos)() == earlier_results(history, pos)()
