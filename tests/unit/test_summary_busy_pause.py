"""The pause a summary takes after each refusal by the proxy's own budget of whole answers
(``compaction_job._call``) stays at most 2 s however many refusals come: the refusals
counted no attempt, so nothing else bounded their number within a ``summarize.timeoutSeconds``
of up to an hour, and past the 1025th the pause's power of two was too large for a float
(``OverflowError``, which failed the compaction with a traceback)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.errors import ServerBusy
from proxy.services import compaction_job
from proxy.services.compaction_job import _call
from tests.unit.test_summary_waits_for_budget import _BRIEFING, _JOB, _Reply

_REFUSALS = 1100


class _Room:
    async def room(self) -> None:
        return None


class _Refusing:
    """A budget with room whose every call is refused as its answer arrives, _REFUSALS
    times, then answered."""

    def __init__(self) -> None:
        self.budget = _Room()
        self.sent = 0

    async def call(self, *args: Any, **kwargs: Any) -> _Reply:
        self.sent += 1
        if self.sent <= _REFUSALS:
            raise ServerBusy("stayed spent while this answer arrived")
        return _Reply()


async def test_refusals_past_a_thousand_pause_at_most_two_seconds_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pauses: list[float] = []

    async def no_sleep(seconds: float) -> None:
        pauses.append(seconds)

    monkeypatch.setattr(compaction_job.asyncio, "sleep", no_sleep)
    upstream = _Refusing()
    prompt = [{"role": "user", "content": "x"}]
    text = await _call(upstream, _JOB, prompt, len)  # type: ignore[arg-type]
    assert text == _BRIEFING and upstream.sent == _REFUSALS + 1
    assert len(pauses) == _REFUSALS and max(pauses) == 2.0
