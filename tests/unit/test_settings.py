"""Settings shared by ``cascade-proxy serve`` and ``uvicorn proxy.app:create_app --factory``."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.settings import DEFAULT_CONFIG, Settings


def test_default_config_is_read_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CASCADE_CONFIG", raising=False)
    assert Settings().with_default_config().config is None
    (tmp_path / DEFAULT_CONFIG).parent.mkdir()
    (tmp_path / DEFAULT_CONFIG).write_text("{}")
    assert Settings().with_default_config().config == Path(DEFAULT_CONFIG)


def test_a_named_config_wins_over_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / DEFAULT_CONFIG).parent.mkdir()
    (tmp_path / DEFAULT_CONFIG).write_text("{}")
    named = tmp_path / "other.json"
    assert Settings(config=named).with_default_config().config == named


def test_pooler_and_listen_url_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CASCADE_DB_POOLER", raising=False)
    monkeypatch.delenv("DATABASE_LISTEN_URL", raising=False)
    assert (Settings().db_pooler, Settings().database_listen_url) == ("none", None)
    monkeypatch.setenv("CASCADE_DB_POOLER", "transaction")
    monkeypatch.setenv("DATABASE_LISTEN_URL", "postgresql://u@db:5432/c")
    settings = Settings()
    assert settings.db_pooler == "transaction"
    assert settings.database_listen_url == "postgresql://u@db:5432/c"
    monkeypatch.setenv("CASCADE_DB_POOLER", "session")  # not a mode Cascade knows
    with pytest.raises(ValueError, match="db_pooler"):
        Settings()
