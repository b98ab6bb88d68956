from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from bench import replay_driver

O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


def test_the_replayed_proxy_gets_tiktokens_o200k_file_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without it the proxy counts with the estimate, which is not the proxy deployed."""
    pytest.importorskip("bpe_openai")
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    env = replay_driver.proxy_env(tmp_path, "http://127.0.0.1:1/v1")
    cache = Path(env["TIKTOKEN_CACHE_DIR"])
    name = hashlib.sha1(
        b"https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
    ).hexdigest()
    assert hashlib.sha256((cache / name).read_bytes()).hexdigest() == O200K_SHA256


def test_a_cache_dir_the_caller_set_is_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "mine"))
    env = replay_driver.proxy_env(tmp_path, "http://127.0.0.1:1/v1")
    assert env["TIKTOKEN_CACHE_DIR"] == str(tmp_path / "mine")
    assert not (tmp_path / "mine").exists()
