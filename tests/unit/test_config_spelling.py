"""config/agents.json's key spellings: camelCase is the documented one, and the snake_case
of the same key is read the same way wherever a key is read, an agent's ``context`` too."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.config import ConfigError, parse_config


def test_an_agents_context_reads_snake_case_keys_as_the_top_level_does() -> None:
    """The top level took ``tool_output`` while ``agents.<name>.context`` refused it; and a
    snake_case key there merges key by key over the top-level block, as its camelCase does."""
    raw = {
        "context": {"tool_output": {"compact": False}, "eviction": {"atFraction": 0.4}},
        "agents": {
            "a": {"context": {"tool_output": {"max_chars": 900}}},
            "b": {"context": {"eviction": {"keep_recent_rounds": 1}}},
        },
    }
    cfg = parse_config(raw, env={})
    a, b = cfg.context_for("a"), cfg.context_for("b")
    assert (a.tool_output.max_chars, a.tool_output.compact) == (900, False)
    assert (b.eviction.keep_recent_rounds, b.eviction.at_fraction) == (1, 0.4)
    assert not b.tool_output.compact


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (
            {"context": {"toolOutput": {"maxChars": 300, "max_chars": 500}}},
            "context.toolOutput.maxChars: given twice, as maxChars and max_chars; keep one",
        ),
        (
            {"context": {"toolOutput": {}, "tool_output": {}}},
            "context.toolOutput: given twice, as toolOutput and tool_output; keep one",
        ),
        (
            {"agents": {"a": {"context": {"tool_output": {"maxChars": 1, "max_chars": 2}}}}},
            "agents.a.context.toolOutput.maxChars: given twice, as maxChars and max_chars; "
            "keep one",
        ),
    ],
)
def test_one_key_in_both_spellings_is_refused_naming_both(raw: dict[str, Any], reason: str) -> None:
    """JSON keeps both, and which would win is nowhere written: refused, the same way in
    each ``context``."""
    with pytest.raises(ConfigError) as refused:
        parse_config(raw, env={})
    assert str(refused.value) == reason
