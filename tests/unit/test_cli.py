"""proxy/cli.py: what ``cascade-proxy serve`` sets up before the app starts."""

from __future__ import annotations

import logging

import pytest

from proxy.cli import log_to_stderr


def test_cascade_loggers_print_to_stderr_at_the_configured_level(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logger = logging.getLogger("cascade")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    try:
        log_to_stderr("warning")
        log_to_stderr("warning")  # twice (a second app in one process): still one line each
        logging.getLogger("cascade.config").info("config reloaded")
        logging.getLogger("cascade.config").warning("config rejected")
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved
    err = capsys.readouterr().err
    assert err.splitlines() == ["WARNING:     cascade.config: config rejected"]
