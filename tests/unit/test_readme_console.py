"""README's Web console states the page's timings and page sizes: each is the constant the
page's module sets, so a module that changes one and a README that does not fail here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.unit.readme import README

STATIC = Path(__file__).resolve().parents[2] / "proxy" / "ui" / "static"


def _constant(module: str, name: str) -> int:
    """``name``'s value in ``static/<module>``: ``(export) const NAME = 123;``."""
    text = (STATIC / module).read_text(encoding="utf-8")
    (value,) = re.findall(rf"^(?:export )?const {name} = (\d+);", text, re.M)
    return int(value)


def _seconds(module: str, name: str) -> str:
    return f"{_constant(module, name) / 1000:g}"


@pytest.mark.parametrize(
    "phrase",
    [
        f"it reads {_constant('app.js', 'LIST_ROWS')} sessions at a time",
        f"reads the next {_constant('app.js', 'LIST_ROWS')} while more follow",
        f"a long session opens on its last {_constant('rows.js', 'WINDOW')} rows",
        f"adds the {_constant('rows.js', 'WINDOW')} before them at a time",
        f"or after {_seconds('composer.js', 'LAST_EVENT_WAIT_MS')} s without it",
        f"after {_seconds('live.js', 'STALE_MS')} s without a delta",
        f"reconnects after {_seconds('api.js', 'RETRY_MS')} s, then 2, 4 … up to "
        f"{_seconds('api.js', 'RETRY_MAX_MS')} s",
        f"so does a stream silent for {_seconds('api.js', 'STALL_MS')} s",
        f"read again by itself, {_seconds('api.js', 'RETRY_MS')} s on, then 2, 4 … up to "
        f"{_seconds('api.js', 'RETRY_MAX_MS')} s",
        f"paged back, {_constant('rows.js', 'PRESS_CHARS'):,} characters a press",
    ],
)
def test_a_figure_readme_gives_the_console_is_its_constant(phrase: str) -> None:
    assert phrase in README.lower()


def test_the_filter_waits_the_quarter_second_readme_says() -> None:
    assert _constant("app.js", "FILTER_MS") == 250
    assert "a quarter of a second after the typing stops" in README
