"""The start-up block states each stage's trigger as the config file gives it: the shipped
eviction trigger, 0.125, is 12.5% of the window (Python's ``:.0%`` rounded it to 12%)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.banner import startup_banner
from proxy.config import parse_config
from proxy.settings import Settings

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "agents.json"


def _stages_line(raw: dict[str, object]) -> str:
    text = startup_banner(
        Settings(config=SHIPPED),
        parse_config(raw),
        {},
        database="postgresql://h/db",
        embedded_at=None,
        paths=[],
    )
    return next(line for line in text.splitlines() if "stages for agent default" in line)


def test_the_shipped_config_says_12_5_percent() -> None:
    line = _stages_line(json.loads(SHIPPED.read_text()))
    assert "eviction (from 12.5% of the window)" in line
    assert "summarize (in the background, from 60%)" in line


@pytest.mark.parametrize(
    ("fraction", "shown"), [(0.125, "12.5%"), (0.5, "50%"), (0.6, "60%"), (0.9, "90%"), (1, "100%")]
)
def test_every_trigger_is_shown_unrounded(fraction: float, shown: str) -> None:
    line = _stages_line(
        {
            "context": {
                "eviction": {"atFraction": fraction},
                "summarize": {"softFraction": fraction, "hardFraction": 1},
                "handoff": {"enabled": True, "atFraction": fraction},
            }
        }
    )
    assert f"eviction (from {shown} of the window)" in line
    assert f"summarize (in the background, from {shown})" in line
    assert f"handoff (nudge at {shown})" in line
