"""README states names and bounds the code defines elsewhere; these tie the two together, so a
renamed event, a new setting or a changed constant fails here instead of leaving the manual
silently wrong."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from proxy.cascade import types
from proxy.cascade.lossless import MAX_OCCURRENCES
from proxy.cascade.memory import MAX_FACT_CHARS
from proxy.cascade.memory_block import MEMORY_MAX_TOKENS
from proxy.cascade.overflow import GUARD_MARGIN, TRIM_TARGET
from proxy.cascade.pipeline import EARLIER_RESULTS
from proxy.cascade.truncation import HEAD_SHARE
from proxy.config_context import SummarizeConfig
from proxy.settings import Settings

README = " ".join((Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8").split())
"""README with every run of whitespace one blank, so a phrase may wrap anywhere."""

EVENTS = sorted(
    value
    for value in vars(types).values()
    if isinstance(value, str) and re.fullmatch(r"(context|session|memory|config)\.[a-z_.]+", value)
)


def test_every_event_the_proxy_sends_is_named_in_readme() -> None:
    assert "context.usage" in EVENTS and "config.rejected" in EVENTS
    assert [name for name in EVENTS if f"`{name}`" not in README] == []


def test_every_setting_is_a_row_of_the_environment_table() -> None:
    rows = "\n".join(
        line
        for line in (Path(__file__).parents[2] / "README.md").read_text().splitlines()
        if line.startswith("| `")
    )
    missing = []
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        variable = alias if isinstance(alias, str) else f"CASCADE_{name.upper()}"
        if f"`{variable}`" not in rows:
            missing.append(variable)
    assert missing == []


@pytest.mark.parametrize(
    "phrase",
    [
        f"among the last {EARLIER_RESULTS} the client resent",
        f"among each line's last {MAX_OCCURRENCES} places",
        f"keep a {round(HEAD_SHARE * 100)}% head and {round((1 - HEAD_SHARE) * 100)}% tail",
        f"down to {round(TRIM_TARGET * 100)}% of the budget",
        f"real/estimated ratio plus {round((GUARD_MARGIN - 1) * 100)}%",
        f"over {MAX_FACT_CHARS} characters",
        f"cut at about {MEMORY_MAX_TOKENS} tokens",
        f"at most `summarize.ledgerCap` ({SummarizeConfig().ledger_cap})",
        "`CASCADE_MAX_INTERNAL_ROUNDS` ({})".format(
            Settings.model_fields["max_internal_rounds"].default
        ),
    ],
)
def test_a_bound_readme_states_is_the_constant(phrase: str) -> None:
    assert phrase in README
