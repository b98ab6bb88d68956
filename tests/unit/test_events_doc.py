"""docs/events.md lists every event the proxy names, once, kept as the bus keeps it: a
dashboard built on the table meets no event it does not list, nor waits for a replay of a
transient one."""

from __future__ import annotations

import re
from pathlib import Path

from proxy.cascade import types

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
