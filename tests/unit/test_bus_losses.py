"""What the bus says of its listener's losses and returns (``bus_listen.Losses``): each at
WARNING, but a run of listeners made again and lost at once is said once, then at DEBUG
until one lasts, which is said; the start's first listener is never lost at once."""

from __future__ import annotations

import logging

import pytest

from proxy import bus_listen
from proxy.bus_listen import STEADY_AFTER, Losses


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    caplog.clear()
    return said


def test_a_run_of_listeners_lost_at_once_is_said_once_and_its_end_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="cascade.bus")
    losses = Losses("db")
    losses.closed(0.5)  # the start's listener, soon lost: an ordinary loss
    assert _said(caplog) == ["event listener connection at db closed; reconnecting"]
    losses.back()
    assert _said(caplog) == ["event listener at db is listening again"]
    losses.closed(0.1)
    assert len(said := _said(caplog)) == 1 and "was lost at once (0.1 s" in said[0]
    for _ in range(5):
        losses.back()
        losses.lasted(0.5)
        losses.silent(0.9, 5.0)
    assert len([r for r in caplog.records if r.levelno == logging.DEBUG]) == 10
    assert _said(caplog) == []
    losses.back()
    losses.lasted(STEADY_AFTER)
    assert _said(caplog) == [f"event listener at db is listening again ({STEADY_AFTER:.0f} s now)"]
    losses.closed(STEADY_AFTER + 30)
    assert _said(caplog) == ["event listener connection at db closed; reconnecting"]


def test_a_listener_lost_once_it_lasted_is_an_ordinary_loss_again(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bus_listen, "STEADY_AFTER", 2.0)
    caplog.set_level(logging.DEBUG, logger="cascade.bus")
    losses = Losses("db")
    losses.back()
    losses.closed(0.1)
    losses.back()
    _said(caplog)
    losses.closed(2.5)  # lived past STEADY_AFTER, its lasting not yet said: a loss as any
    losses.back()
    assert _said(caplog) == [
        "event listener connection at db closed; reconnecting",
        "event listener at db is listening again",
    ]


def test_through_a_pooler_a_run_lost_at_once_does_not_say_it_ends_the_streams(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Behind a transaction pooler a listener made again ends no stream (``bus.EventBus``).
    caplog.set_level(logging.DEBUG, logger="cascade.bus")
    for pooled, says in ((False, "ends every open stream"), (True, "ends no stream")):
        losses = Losses("db", pooled=pooled)
        losses.back()
        _said(caplog)
        losses.closed(0.1)
        (said,) = _said(caplog)
        assert "was lost at once" in said and says in said, said
        assert pooled == ("ends every open stream" not in said)
