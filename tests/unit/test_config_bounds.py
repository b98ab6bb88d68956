"""Values config/agents.json took that its keys cannot mean: a whole number past 2**53
(Python's JSON reader takes any number of digits, and a ``contextLimit`` of 1 followed by
400 zeros was valid, then every request a 500: ``OverflowError`` where the window is taken
as a fraction), and ``providers`` or ``agents`` that are no object."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.config import ConfigError, load_config, parse_config

HUGE = 10**400


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        ({"models": {"default": {"contextLimit": HUGE}}}, "models.default.contextLimit"),
        ({"models": {"m": {"reservedOutput": HUGE}}}, "models.m.reservedOutput"),
        ({"context": {"toolOutput": {"rawCapBytes": HUGE}}}, "context.toolOutput.rawCapBytes"),
        ({"context": {"eviction": {"clearAtLeast": 2**53 + 1}}}, "context.eviction.clearAtLeast"),
        (
            {"agents": {"a": {"context": {"summarize": {"keepRecent": HUGE}}}}},
            "agents.a.context: summarize.keepRecent",
        ),
    ],
)
def test_a_whole_number_past_2_53_is_refused_naming_its_key(
    raw: dict[str, Any], where: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(raw, env={})
    reason = str(refused.value)
    assert reason.startswith(f"{where}: at most 9007199254740992"), reason
    assert "000000000" not in reason  # the value is never quoted


def test_2_53_itself_is_taken_from_the_file(tmp_path: Any) -> None:
    path = tmp_path / "agents.json"
    path.write_text(json.dumps({"models": {"default": {"contextLimit": 2**53}}}))
    assert load_config(path).model_limits("m").context_limit == 2**53
    window = load_config(path).model_limits("m").context_limit
    assert window * 0.125 > 0  # a float of it, as the stages take it, does not overflow


@pytest.mark.parametrize("block", ["providers", "agents"])
@pytest.mark.parametrize("value", [None, [], "", 0, False])
def test_providers_and_agents_that_are_no_object_are_refused(block: str, value: Any) -> None:
    """They were read as empty (``data.get(block) or {}``), while ``models: []`` or
    ``models: null`` is refused as no object, as a value of another JSON type is."""
    with pytest.raises(ConfigError) as refused:
        parse_config({block: value}, env={})
    assert str(refused.value) == f'{block}: must be an object of named entries, {{"name": {{…}}}}'
