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
