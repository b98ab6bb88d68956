"""proxy.warmup.warm_process: the per-process caches a first request would build are built at
start (docs/perf.md, Issue 24: a fresh replica's first burst)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.cascade import invisible, redaction, redaction_scan
from proxy.cascade.memory import fact_key, read_form, sanitize_fact
from proxy.cascade.text import quote_closing_tag
from proxy.config import parse_config
from proxy.tokenizers import build_counters
from proxy.transport import ProviderTransport, TlsSettings
from proxy.warmup import warm_process


def _count_contexts(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Each SSLContext httpx builds (the real one), recorded."""
    made: list[Any] = []
    real = httpx.create_ssl_context

    def counted(*args: Any, **kwargs: Any) -> Any:
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(httpx, "create_ssl_context", counted)
    return made


def test_the_default_tls_context_is_built_before_the_first_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A plain-http provider's pool is built with the default context too: without the
    # warm-up the first request loads the CA bundle on the event loop.
    made = _count_contexts(monkeypatch)
    transport = ProviderTransport(max_connections=4)
    cfg = parse_config({"providers": {"openai": {"baseUrl": "http://127.0.0.1:9/v1"}}}, env={})
    count, _ = build_counters(None)
    warm_process(cfg, count, transport)
    assert len(made) == 1
    transport.context_for(TlsSettings())  # what the first request asks for
    assert len(made) == 1


def test_each_agents_redaction_scanner_is_built_at_start() -> None:
    raw = {
        "agents": {
            "coder": {"provider": "openai", "context": {"redaction": {"patterns": ["wu-[0-9]+"]}}}
        }
    }
    cfg = parse_config(raw, env={})
    red = cfg.context_for("coder").redaction
    patterns = redaction.compile_patterns(red.patterns, use_defaults=red.default_patterns)
    assert id(patterns) not in redaction_scan._SCANNERS  # built lazily, on the first message
    count, _ = build_counters(None)
    warm_process(cfg, count, None)
    assert id(patterns) in redaction_scan._SCANNERS


def test_an_unreadable_ca_file_does_not_stop_the_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "no.pem"
    raw = {
        "providers": {
            "private": {"baseUrl": "https://llm.internal/v1", "caFile": str(missing)},
            "unchecked": {"baseUrl": "https://llm.other/v1", "verifyTls": False},
        },
        "agents": {"default": {"provider": "private"}},
    }
    cfg = parse_config(raw, env={})
    count, _ = build_counters(None)
    transport = ProviderTransport(max_connections=4)
    with caplog.at_level(logging.WARNING, logger="cascade"):
        warm_process(cfg, count, transport)
    # which provider and which file, not a bare "No such file or directory"
    # the warm-up's own logger: a loaded machine's tiktoken load that outlasts its wait
    # warns on "cascade.tokens" in build_counters, which is not what this test reads
    (line,) = [r.getMessage() for r in caplog.records if r.name == "cascade"]
    assert line.startswith(f"provider 'private': its caFile {missing} cannot be loaded")
    assert TlsSettings(None, False) in transport._contexts  # the next provider still warmed


def test_the_invisible_characters_class_is_built_at_start() -> None:
    """A summary, a plan or a memory fact with one non-ASCII letter is read through
    ``cascade.invisible``, whose classes scan the planes once per process: that is paid at
    start, not in front of the first such request (or memory API call)."""
    invisible._dropped.cache_clear()
    invisible._invisible.cache_clear()
    count, _ = build_counters(None)
    warm_process(parse_config({}, env={}), count, None)
    built = invisible._invisible.cache_info().misses
    quote_closing_tag("Café </plan>", "plan", "</plan-text>")
    sanitize_fact("Le café ouvre à 8 h", patterns=[])
    fact_key("Le café")
    read_form("Café")
    assert invisible._invisible.cache_info().misses == built
