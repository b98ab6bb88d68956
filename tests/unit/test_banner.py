"""proxy/banner.py: the start-up block says where to point a client and what will happen,
and never shows a secret."""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from proxy.banner import client_origin, startup_banner
from proxy.config import Config, parse_config
from proxy.logs import masked
from proxy.server import bind
from proxy.settings import Settings

SECRETS = {"PAID_KEY": "sk-paid-3c9e11", "TEAM_KEY": "cascade-team-0af4d2"}
DSN = "postgresql://cascade:db-pass-8812@db.internal:5432/cascade"


def _config(**extra: object) -> Config:
    return parse_config(
        {
            "providers": {
                "paid": {"baseUrl": "https://api.example.com/v1", "apiKeyEnv": "PAID_KEY"},
                "local": {"baseUrl": "http://bob:url-pass-55@127.0.0.1:11434/v1"},
                "later": {"baseUrl": "http://127.0.0.1:9/v1", "apiKeyEnv": "LATER_KEY"},
            },
            "agents": {
                "default": {"provider": "paid"},
                "quiet": {
                    "provider": "local",
                    "context": {
                        "summarize": {"enabled": False},
                        "eviction": {"enabled": False},
                        "recitation": {"enabled": True},
                        "handoff": {"enabled": True},
                    },
                },
            },
            **extra,
        }
    )


def test_the_block_names_the_address_providers_database_stages_and_pages() -> None:
    settings = Settings(host="0.0.0.0", port=9000, config=Path("config/agents.json"))
    text = startup_banner(
        settings,
        _config(),
        SECRETS,
        database=DSN,
        embedded_at=None,
        paths=["/v1/chat/completions", "/metrics", "/healthz"],
    )
    lines = text.splitlines()
    assert lines[0] == "Cascade 0.1.0 listening on 0.0.0.0:9000"
    assert "base URL for clients: http://127.0.0.1:9000/v1" in text
    assert "provider paid: https://api.example.com/v1, key $PAID_KEY set" in text
    assert "provider later: http://127.0.0.1:9/v1, key $LATER_KEY unset" in text
    assert "provider local: http://127.0.0.1:11434/v1, no apiKeyEnv" in text
    assert "database: postgresql://cascade:***@db.internal:5432/cascade" in text
    assert "proxy keys: none ON A NON-LOOPBACK ADDRESS" in text
    assert "a request without a bearer token is refused" in text  # $PAID_KEY pays
    default = next(line for line in lines if "stages for agent default" in line)
    quiet = next(line for line in lines if "stages for agent quiet" in line)
    assert "eviction" in default and "summarize" in default
    assert "eviction" not in quiet and "summarize" not in quiet and "redaction" in quiet
    assert "recitation" in quiet and "recitation" not in default
    assert "handoff (nudge at 90%)" in quiet and "handoff" not in default
    assert "metrics: http://127.0.0.1:9000/metrics" in text
    assert "console: not served by this build (/ui)" in text
    assert lines[-1] == "  tracing: off"
    for secret in (*SECRETS.values(), "db-pass-8812", "url-pass-55", "bob"):
        assert secret not in text


def test_embedded_database_and_proxy_keys() -> None:
    cfg = _config(
        auth={
            "keys": [
                {"keyEnv": "TEAM_KEY", "tenant": "team"},
                {"keyEnv": "UNSET_KEY", "tenant": "other"},
            ]
        }
    )
    text = startup_banner(
        Settings(),
        cfg,
        SECRETS,
        database="postgresql://x:y@/z",
        embedded_at=Path("/data/pgdata"),
        paths=["/ui/{path:path}"],
    )
    assert "listening on 127.0.0.1:8080" in text
    assert "database: embedded PostgreSQL at /data/pgdata" in text
    assert "proxy keys: 2 (1 with their variable set), tenants other, team" in text
    assert "called without credentials (proxy keys never leave)" in text
    assert "console: http://127.0.0.1:8080/ui" in text
    assert "metrics: not served by this build (/metrics)" in text
    assert SECRETS["TEAM_KEY"] not in text
    # the routes that answer without a key, the probes among them, as the gate has them
    assert "every route but /healthz, /readyz and /ui needs one" in text


def test_client_origin() -> None:
    assert client_origin("0.0.0.0", 80) == "http://127.0.0.1:80"
    # "::" is listened on IPv6 only (server.bind, as asyncio does): 127.0.0.1 is refused
    assert client_origin("::", 80) == "http://[::1]:80"
    assert client_origin("[::]", 80) == "http://[::1]:80"
    assert client_origin("::1", 80) == "http://[::1]:80"
    assert client_origin("proxy.lan", 8080) == "http://proxy.lan:8080"


@pytest.mark.parametrize("host", ["0.0.0.0", "::", ""])
def test_client_origin_reaches_a_wildcard_address_as_serve_listens_on_it(host: str) -> None:
    """The banner's base URL and the CLI's default ``--url`` connect to what ``serve`` bound."""
    try:
        sockets = bind(host, 0, 8)
    except OSError:
        pytest.skip(f"cannot listen on {host!r} here")
    try:
        port = sockets[0].getsockname()[1]
        url = urlsplit(client_origin(host, port))
        with socket.create_connection((url.hostname, url.port), timeout=5):
            pass
    finally:
        for sock in sockets:
            sock.close()


def test_a_pooled_database_names_the_pooler_and_the_listen_url() -> None:
    listen = "postgresql://cascade:listen-pass-31@db.internal:5432/cascade"
    settings = Settings(
        database_url=DSN.replace(":5432", ":6432"),
        db_pooler="transaction",
        database_listen_url=listen,
    )
    text = startup_banner(
        settings,
        _config(),
        SECRETS,
        database=DSN.replace(":5432", ":6432"),
        embedded_at=None,
        paths=[],
    )
    assert (
        "database: postgresql://cascade:***@db.internal:6432/cascade through a transaction"
        " pooler (no statement cache); events LISTEN at"
        " postgresql://cascade:***@db.internal:5432/cascade"
    ) in text
    assert "listen-pass-31" not in text and "db-pass-8812" not in text


def test_the_stages_line_names_retrieval_and_memory_when_they_are_on() -> None:
    """The opt-in stages a file turns on are listed like the others: a line without them
    reads as if retrieval and memory were off."""
    cfg = _config(
        context={
            "retrieval": {"enabled": True, "maxResults": 3},
            "memoryPromotion": {"mode": "suggest"},
        }
    )
    settings = Settings(config=Path("config/agents.json"))
    text = startup_banner(settings, cfg, SECRETS, database=DSN, embedded_at=None, paths=[])
    lines = text.splitlines()
    default = next(line for line in lines if "stages for agent default" in line)
    assert "retrieval (up to 3 hits" in default
    assert "memory (suggest" in default
    off = startup_banner(settings, _config(), SECRETS, database=DSN, embedded_at=None, paths=[])
    assert "retrieval" not in off and "memory" not in off


def test_an_agent_with_every_stage_off_says_none() -> None:
    """``toolOutput.enabled`` false was the last stage always on: an agent with every stage
    off reads "none", not an empty list that looks like a cut-off line."""
    off = {"enabled": False}
    context = {
        "toolOutput": off,
        "redaction": off,
        "eviction": off,
        "summarize": off,
    }
    cfg = parse_config({"agents": {"default": {"provider": "openai", "context": context}}})
    settings = Settings(config=Path("config/agents.json"))
    text = startup_banner(settings, cfg, SECRETS, database=DSN, embedded_at=None, paths=[])
    line = next(line for line in text.splitlines() if "stages for agent default" in line)
    assert line.rstrip().endswith("stages for agent default: none"), line


def test_an_ipv6_address_is_named_in_brackets() -> None:
    # Regression: "listening on ::1:8080", which reads as the address ::1:8080 on no port.
    settings = Settings(host="::1", port=8080)
    text = startup_banner(settings, _config(), SECRETS, database=DSN, embedded_at=None, paths=[])
    assert text.splitlines()[0] == "Cascade 0.1.0 listening on [::1]:8080"


def test_the_block_says_where_spans_go() -> None:
    """An operator reading the block learns whether spans are exported, and where to."""
    where = "OTLP/HTTP to http://collector.lan:4318/v1/traces, service cascade-proxy"
    text = startup_banner(
        Settings(), _config(), SECRETS, database=DSN, embedded_at=None, paths=[], tracing=where
    )
    assert f"  tracing: {where}" in text.splitlines()


@pytest.mark.parametrize(
    ("watch", "said"),
    [(True, "(reloaded when it changes, or on SIGHUP)"), (False, "(reloaded on SIGHUP)")],
)
def test_the_config_line_says_what_reloads_the_file(watch: bool, said: str) -> None:
    settings = Settings(config=Path("config/agents.json"), watch_config=watch)
    text = startup_banner(settings, _config(), SECRETS, database=DSN, embedded_at=None, paths=[])
    assert f"  config: config/agents.json {said}\n" in text


@pytest.mark.parametrize("keys", [False, True])
def test_every_line_is_logged_as_written(keys: bool) -> None:
    """Each line goes through the log's secret scrub (``logs.masked``): one it rewrites says
    what it did not mean. ``no apiKeyEnv: the client's bearer …`` read as a key's value
    there, so the summary of a provider without a key said ``[REDACTED]``."""
    auth = {"auth": {"keys": [{"keyEnv": "TEAM_KEY", "tenant": "team"}]}} if keys else {}
    text = startup_banner(
        Settings(config=Path("config/agents.json")),
        _config(**auth),
        SECRETS,
        database=DSN,
        embedded_at=None,
        paths=["/ui", "/metrics"],
    )
    for line in text.splitlines():
        assert masked(line) == line
    assert "provider local: http://127.0.0.1:11434/v1, no apiKeyEnv; " in text
