"""A step's budget keeps the tools' share of what it sets aside apart from the output's, so
the overflow guard's refusal names them apart (tests/unit/cascade/test_overflow.py)."""

from __future__ import annotations

from types import SimpleNamespace

from proxy.services.budget import budget


def test_the_budget_names_the_tools_share_of_what_it_sets_aside() -> None:
    row = {"calibration": 1.0, "last_prompt_tokens": None, "last_estimate": None}
    state = SimpleNamespace(session=row, estimate=100)
    rt = SimpleNamespace(limits=SimpleNamespace(context_limit=8000, reserved_output=1000))
    got = budget(state, rt, {"max_tokens": 300}, 250)  # type: ignore[arg-type]
    assert (got.limit, got.reserved_output, got.fixed) == (8000, 550, 250)
