"""RELIABILITY.md names each check by its test's first docstring line
(tests/reliability/conftest.py): the soak's says the bound its assertions hold, and the
committed file says what the next generation will."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.reliability import test_soak as soak

ROOT = Path(__file__).parents[2]
SOAKS: list[Callable[..., Any]] = [
    soak.test_a_short_soak_keeps_rss_flat_and_healthz_fast,
    soak.test_a_ten_minute_soak_keeps_rss_flat_and_healthz_fast,
]


def _check(test: Callable[..., Any]) -> str:
    """The report's check for ``test``, as the reliability conftest reads it."""
    return (test.__doc__ or "").strip().splitlines()[0].rstrip(".")


def test_the_soaks_check_states_the_bound_it_asserts() -> None:
    bound = (
        f"/healthz p50/p99 under {soak.CONTROL_RATIO}× control + "
        f"{soak.HEALTHZ_P50_MS}/{soak.HEALTHZ_P99_MS} ms"
    )
    for test in SOAKS:
        assert bound in _check(test), test.__name__
        assert "RSS flat after warm-up" in _check(test), test.__name__


def test_reliability_md_names_the_soak_as_its_test_does() -> None:
    rows = (ROOT / "RELIABILITY.md").read_text(encoding="utf-8").splitlines()
    for test in SOAKS:
        (row,) = [r for r in rows if f"`test_soak.py::{test.__name__}`" in r]
        assert row.startswith(f"| {_check(test)} |"), row
