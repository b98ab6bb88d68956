"""docs/events.md lists every event the proxy names, once, kept as the bus keeps it: a
dashboard built on the table meets no event it does not list, nor waits for a replay of a
transient one; and DESIGN's names are the ones the proxy sends."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from proxy.api.event_cursor import SETTLE_SECONDS
from proxy.api.events import CATCH_UP_SECONDS, SEND_TIMEOUT_SECONDS
from proxy.api.reconnect import FIRST_MS, SPREAD_MS
from proxy.bus import MAX_QUEUED
from proxy.cascade import types
from tests.unit import design

DOC = Path(__file__).resolve().parents[2] / "docs" / "events.md"
ROW = re.compile(r"^\| `([a-z_.]+)` \| ([a-z ]+) \|", re.M)


def _names() -> set[str]:
    return {
        value
        for name, value in vars(types).items()
        if name.isupper() and isinstance(value, str) and re.fullmatch(r"[a-z_]+(\.[a-z_]+)+", value)
    }


def test_every_event_is_listed_once_as_it_is_kept() -> None:
    rows = ROW.findall(DOC.read_text())
    listed = [name for name, _ in rows]
    assert sorted(listed) == sorted(_names()) and len(set(listed)) == len(listed)
    for name, kept in rows:
        if name.startswith("config."):
            assert kept == "live only", name
        else:
            assert kept == ("transient" if name in types.TRANSIENT_EVENTS else "persisted"), name


def _design_names(text: str) -> set[str]:
    """Each event name in backticks, ``a.b|c`` spelt out as ``a.b`` and ``a.c``."""
    names = set()
    for named in re.findall(r"`((?:context|session|memory|config)\.[a-z_.|]+)`", text):
        head, _, alternatives = named.rpartition(".")
        names |= {f"{head}.{tail}" for tail in alternatives.split("|")}
    return names


def test_the_events_design_names_are_the_ones_sent_and_kept_as_it_says() -> None:
    """DESIGN §6 fixes the names and which are transient; ``session.reset`` is the one
    addition (README Endpoints), and transient."""
    assert _names() - {types.SESSION_RESET} == design.EVENTS
    assert types.TRANSIENT_EVENTS - {types.SESSION_RESET} == design.TRANSIENT_EVENTS


def test_the_events_held_as_designs_are_the_ones_it_names() -> None:
    section = design.design_text().split("Per-session SSE.")[1].split("\n## ")[0]
    named, transient = section.split("Transient (never persisted):")
    transient = transient.split(". ")[0]
    assert _design_names(named) == design.EVENTS
    assert _design_names(transient) == design.TRANSIENT_EVENTS


@pytest.mark.parametrize(
    "phrase",
    [
        f"falls {MAX_QUEUED} events behind, or a frame waits {SEND_TIMEOUT_SECONDS:g} s to go out",
        f"between {FIRST_MS} and {FIRST_MS + SPREAD_MS} ms",
        f"from their catch-up read every {CATCH_UP_SECONDS:g} s",
        f"from {SETTLE_SECONDS:g} s after the stream opened",
    ],
)
def test_a_bound_the_stream_section_states_is_the_constant(phrase: str) -> None:
    """A dashboard's author sizes a client's buffer and its reconnect by these figures."""
    assert phrase in " ".join(DOC.read_text().split())
