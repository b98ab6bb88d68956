"""UsageOption: which providers go without the ``stream_options`` the proxy adds to a stream
(tests/integration/api/test_stream_options_refused.py has the proxy's own answers)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from proxy.config import ProviderConfig
from proxy.services.usage_option import UsageOption

_PROVIDER = ProviderConfig(base_url="http://strict.invalid/v1", name="strict")
_QUOTED = b'{"message": "tool_choice needs tools [input_value={... \'stream_options\': {...}}]"}'
"""A client's own error whose text quotes the whole body, the proxy's field in it."""


class _Answer:
    """Stands for a StreamAnswer: its status, its body (or the error reading it raises)."""

    def __init__(self, status: int, body: bytes = b"", broken: Exception | None = None) -> None:
        self.status_code = status
        self.body = body
        self.broken = broken
        self.closed = 0

    async def aread(self, cap: int | None = None) -> bytes:
        if self.broken is not None:
            raise self.broken
        return self.body

    async def aclose(self) -> None:
        self.closed += 1


def _sender(answers: list[_Answer], sent: list[bool]) -> Any:
    async def send(usage: bool) -> Any:
        sent.append(usage)
        return answers.pop(0)

    return send


async def test_a_refusal_the_call_without_the_field_gets_too_marks_no_provider() -> None:
    """The field was not what the provider refused: its next stream still asks for usage."""
    option, sent = UsageOption(), []
    refused = [_Answer(400, _QUOTED), _Answer(400, _QUOTED)]
    answer = await option.open(_PROVIDER, {}, _sender(refused, sent))
    assert answer.status_code == 400  # the provider's answer to the client's error
    await option.open(_PROVIDER, {}, _sender([_Answer(200)], sent))
    assert sent == [True, False, True]


async def test_a_refusal_whose_body_cannot_be_read_is_closed() -> None:
    """Its body breaking off (or the client leaving while it is read) gives the connection
    back, as ``read_refusal`` does for a relayed one."""
    option, sent = UsageOption(), []
    broken = _Answer(400, broken=RuntimeError("the body broke off"))
    with pytest.raises(RuntimeError):
        await option.open(_PROVIDER, {}, _sender([broken], sent))
    assert broken.closed == 1


async def test_two_streams_refused_at_once_warn_once(caplog: pytest.LogCaptureFixture) -> None:
    """Both go again without the field; the provider is news to the log once."""
    option, sent = UsageOption(), []
    refusal = b'{"detail": [{"loc": ["body", "stream_options"], "msg": "Extra inputs"}]}'
    both = asyncio.Barrier(2)

    async def send(usage: bool) -> Any:
        sent.append(usage)
        if usage:
            await both.wait()  # each is refused before either has learned
            return _Answer(422, refusal)
        return _Answer(200)

    with caplog.at_level(logging.WARNING, logger="cascade.forward"):
        answers = await asyncio.gather(*(option.open(_PROVIDER, {}, send) for _ in range(2)))
    assert [a.status_code for a in answers] == [200, 200]
    assert sorted(sent) == [False, False, True, True]
    assert len([r for r in caplog.records if "stream_options" in r.getMessage()]) == 1


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_a_call_without_the_field_that_fails_otherwise_marks_no_provider(status: int) -> None:
    """A refusal that quoted the body, then a rate limit or an outage: nothing shows the field
    was why, and what is learned holds for every tenant's streams to that provider."""
    option, sent = UsageOption(), []
    answers = [_Answer(400, _QUOTED), _Answer(status)]
    assert (await option.open(_PROVIDER, {}, _sender(answers, sent))).status_code == status
    await option.open(_PROVIDER, {}, _sender([_Answer(200)], sent))
    assert sent == [True, False, True]
