"""The backoff after a failed compaction, and the fast model's ``Retry-After`` as read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from proxy.cascade.pressure import backing_off, compaction_backoff
from proxy.services.fastmodel import retry_after


def test_the_backoff_doubles_with_failures_in_a_row_up_to_ten_minutes() -> None:
    assert [compaction_backoff(n) for n in (1, 2, 3, 5, 6, 40)] == [30, 60, 120, 480, 600, 600]


def test_a_retry_after_lengthens_the_backoff_within_the_cap() -> None:
    assert compaction_backoff(1, 90) == 90
    assert compaction_backoff(3, 90) == 120
    assert compaction_backoff(1, 86400) == 600


def test_a_row_backs_off_only_without_an_owner_and_with_an_expiry_ahead() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    ahead, past = now + timedelta(seconds=5), now - timedelta(seconds=5)
    assert backing_off(None, ahead, now)
    assert backing_off(None, ahead.isoformat(), now)  # as the row's JSON carries it
    assert not backing_off(None, past.isoformat(), now)
    assert not backing_off(None, None, now)
    assert not backing_off("a-running-compaction", ahead, now)


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "7"}, 0.25),
        ({"retry-after": "-3"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "nan"}, None),
        ({}, None),
    ],
)
def test_retry_after_reads_seconds_and_milliseconds(
    headers: dict[str, str], seconds: float | None
) -> None:
    assert retry_after(httpx.Response(429, headers=headers)) == seconds


def test_retry_after_reads_an_http_date() -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=60), usegmt=True)
    wait = retry_after(httpx.Response(503, headers={"retry-after": when}))
    assert wait is not None and 55 < wait <= 60


@pytest.mark.parametrize("value", [0, -1, 3601])
def test_summarize_timeout_seconds_outside_its_range_is_refused(value: float) -> None:
    from pydantic import ValidationError

    from proxy.config_context import SummarizeConfig

    assert SummarizeConfig.model_validate({"timeoutSeconds": 30}).timeout_seconds == 30
    with pytest.raises(ValidationError, match="timeoutSeconds"):
        SummarizeConfig.model_validate({"timeoutSeconds": value})
