"""Quiet output between tests: the proxy's log lines reach a test's report, not the terminal.

A proxy run in this process (tests/integration/api's ``ProxyServer``) logs through the stderr
handler ``configure_logging`` puts on the root logger, from its server thread, and may write a
line just after the test's phase that caused it has ended (the access line follows the response
the test already read). While a test's setup, call or teardown runs, pytest captures
``sys.stderr`` and shows what it caught under a failing test ("Captured stderr call", beside
"Captured log call"); between those phases (where pytest prints the progress dot) ``sys.stderr``
is the terminal again, and such a line landed between the dots. So every such handler drops a
record when stderr is not captured: no line a failing test's report holds is lost (the report
is made of what was caught during its phases), and the run's output is pytest's own. With
``-s`` (no capture) nothing is filtered: every line goes to the terminal.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Generator

import pytest


def _captured(record: logging.LogRecord) -> bool:
    """Whether a test phase's capture holds stderr, so the line has a report to go to."""
    return sys.stderr is not sys.__stderr__


def _filter_proxy_handlers(config: pytest.Config) -> None:
    if config.getoption("capture") == "no":
        return
    for handler in logging.getLogger().handlers:
        if getattr(handler, "cascade", False) and _captured not in handler.filters:
            handler.addFilter(_captured)


def _phase(item: pytest.Item) -> Generator[None]:
    try:
        return (yield)
    finally:
        _filter_proxy_handlers(item.config)


# trylast: inside pytest's capture of the phase, so the filter is on before the capture ends,
# whatever the phase started (``create_app`` installs a new handler).
@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None]:
    return (yield from _phase(item))


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None]:
    return (yield from _phase(item))


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None]:
    return (yield from _phase(item))
