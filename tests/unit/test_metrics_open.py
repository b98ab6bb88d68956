"""``/metrics`` without a metrics key of its own (README Decisions): on a loopback bind it is
open to the machine's own clients and nothing is said; beyond loopback the start warns (and
``config check`` prints) that any proxy key, or anyone with no proxy keys, reads every
tenant's counts, until ``auth.metricsKeyEnv`` names a variable that holds a key."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from proxy.app import check_start
from proxy.cli import main
from proxy.config import parse_config
from proxy.listen import open_metrics_warning, reload_told
from proxy.settings import Settings

PROVIDERS = {"providers": {"openai": {"baseUrl": "http://127.0.0.1:9/v1"}}}
KEYED = {**PROVIDERS, "auth": {"keys": [{"keyEnv": "K1", "tenant": "one"}]}}
SCRAPED = {**PROVIDERS, "auth": {**KEYED["auth"], "metricsKeyEnv": "MK"}}


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
def test_on_loopback_metrics_are_open_without_a_word(host: str) -> None:
    assert open_metrics_warning(host, parse_config(KEYED), {}) is None
    assert open_metrics_warning(host, parse_config(PROVIDERS), {}) is None


def test_beyond_loopback_any_proxy_key_reading_them_is_said() -> None:
    said = open_metrics_warning("0.0.0.0", parse_config(KEYED), {"K1": "sk-one"})
    assert said is not None
    assert said.startswith("/metrics on 0.0.0.0 answers any proxy key")
    assert "auth.metricsKeyEnv is unset" in said and "every tenant's requests" in said
    assert "sk-one" not in said


@pytest.mark.parametrize("host", ["10.0.0.5", "::", "localhost.", "[::]"])
def test_beyond_loopback_with_no_proxy_keys_anyone_reads_them(host: str) -> None:
    """Every address but a loopback one, IPv6's any-address and a name that is not exactly
    ``localhost`` too: as the listening rule judges them (``is_loopback``)."""
    said = open_metrics_warning(host, parse_config(PROVIDERS), {})
    assert said is not None and "answers anyone who can reach it" in said


def test_a_metrics_key_in_force_silences_it_and_one_unset_or_blank_does_not() -> None:
    cfg = parse_config(SCRAPED)
    assert open_metrics_warning("0.0.0.0", cfg, {"MK": "scrape-secret"}) is None
    for env in ({}, {"MK": "  \n"}):
        said = open_metrics_warning("0.0.0.0", cfg, env)
        assert said is not None and "$MK holds no key" in said


def test_serve_judges_it_with_the_rest_of_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MK", raising=False)
    _, warnings = check_start(Settings(host="0.0.0.0"), parse_config(KEYED))
    assert [w for w in warnings if w.startswith("/metrics on 0.0.0.0")], warnings
    _, warnings = check_start(Settings(host="127.0.0.1"), parse_config(KEYED))
    assert warnings == []


def test_config_check_prints_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "agents.json"
    cfg.write_text(json.dumps(KEYED))
    monkeypatch.setenv("CASCADE_CONFIG", str(cfg))
    monkeypatch.setenv("CASCADE_HOST", "0.0.0.0")
    monkeypatch.setenv("K1", "sk-one")
    assert main(["config", "check"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "warning: /metrics on 0.0.0.0 answers any proxy key" in "\n".join(out), out


def test_a_reload_that_opens_them_beyond_loopback_says_so_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The start said nothing (a metrics key in force); a SIGHUP's config without
    ``metricsKeyEnv`` opens ``/metrics`` to every proxy key: said as the start would have,
    and not again for a reload that changes nothing of it; one that closes them says nothing."""
    monkeypatch.setenv("MK", "scrape-secret")
    kept: list[object] = []
    reloaded = reload_told("0.0.0.0", parse_config(SCRAPED), kept.append)
    with caplog.at_level(logging.WARNING, logger="cascade"):
        for cfg in (KEYED, KEYED, SCRAPED):
            reloaded(parse_config(cfg))
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("/metrics on")]
    assert len(said) == 1 and "answers any proxy key" in said[0], said
    assert len(kept) == 3  # each reloaded config is still handed on
    loopback = reload_told("127.0.0.1", parse_config(SCRAPED), None)
    with caplog.at_level(logging.WARNING, logger="cascade"):
        loopback(parse_config(KEYED))
    assert len([r for r in caplog.records if "/metrics on" in r.getMessage()]) == 1
