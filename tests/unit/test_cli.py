"""proxy/cli.py: what ``cascade-proxy serve`` sets up before the app starts."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy import __version__
from proxy.bus import listen_url
from proxy.cli import _parser, main
from proxy.cli_run import _settings
from proxy.pgembed import default_data_dir
from tests.unit.starts import FREE_PORT, SERVE, START_COMMANDS, run_start


def test_a_bad_config_or_setting_is_one_line_and_exit_2_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "agents.json"
    bad.write_text('{"context": {"redaction": {"patterns": ["(unclosed"]}}}')
    logger = logging.getLogger("cascade")
    saved = (logger.handlers[:], logger.level, logger.propagate)  # serve sets them
    try:
        assert main(["serve", "--config", str(tmp_path / "missing.json")]) == 2
        assert main(["serve", "--config", str(bad)]) == 2
        monkeypatch.setenv("CASCADE_PORT", "abc")
        assert main(["serve"]) == 2
        monkeypatch.delenv("CASCADE_PORT")
        monkeypatch.setenv("CASCADE_MAX_BODY_BYTES", "-5")  # every request would be a 413
        assert main(["serve"]) == 2
        monkeypatch.delenv("CASCADE_MAX_BODY_BYTES")
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")  # an exporter it does not have
        assert main(["serve"]) == 2
        monkeypatch.delenv("OTEL_TRACES_EXPORTER")
        with pytest.raises(SystemExit) as usage:  # uvicorn took it and listened elsewhere
            main(["serve", "--port", "99999"])
        assert usage.value.code == 2
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved
    err = capsys.readouterr().err
    assert "missing.json does not exist" in err
    assert "redaction.patterns[0]: not a regular expression (missing )" in err
    assert "port" in err and "Traceback" not in err
    assert "CASCADE_MAX_BODY_BYTES" in err and "99999 is not a TCP port" in err
    assert "OTEL_TRACES_EXPORTER names 'zipkin'" in err


def _parsers(
    parser: argparse.ArgumentParser, name: str = "cascade-proxy"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


_ENV = {
    "--host": "CASCADE_HOST",
    "--port": "CASCADE_PORT",
    "--config": "CASCADE_CONFIG",
    "--database-url": "DATABASE_URL",
    "--allow-unauthenticated": "CASCADE_ALLOW_UNAUTHENTICATED",
    "--url": "CASCADE_URL",
    "--api-key": "CASCADE_API_KEY",
}


def test_every_flag_says_its_variable_and_default() -> None:
    seen = set()
    for where, parser in _parsers(_parser()):
        for action in parser._actions:
            flag = next((o for o in action.option_strings if o.startswith("--")), None)
            if flag in (None, "--help", "--version"):
                continue
            seen.add(flag)
            text = action.help or ""
            assert "default" in text, f"{where} {flag}: {text!r}"
            if flag in _ENV:
                assert f"env {_ENV[flag]}" in text, f"{where} {flag}: {text!r}"
    assert set(_ENV) <= seen


def test_the_embedded_data_dir_the_help_names_is_the_one_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    help_text = next(
        a.help or ""
        for _, parser in _parsers(_parser())
        for a in parser._actions
        if "--database-url" in a.option_strings
    )
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_data_dir() == tmp_path / "cascade"
    assert "$XDG_DATA_HOME/cascade" in help_text
    monkeypatch.delenv("XDG_DATA_HOME")
    assert default_data_dir() == Path.home() / ".local" / "share" / "cascade"
    assert "~/.local/share/cascade" in help_text


def test_the_variables_the_serve_help_names_are_the_ones_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    values = {
        "CASCADE_HOST": "10.9.8.7",
        "CASCADE_PORT": "9123",
        "CASCADE_CONFIG": "/etc/cascade.json",
        "DATABASE_URL": "postgresql://h/db",
        "CASCADE_ALLOW_UNAUTHENTICATED": "1",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    settings = _settings(_parser().parse_args(["serve"]))
    assert (
        settings.host,
        settings.port,
        str(settings.config),
        settings.database_url,
        settings.allow_unauthenticated,
    ) == ("10.9.8.7", 9123, "/etc/cascade.json", "postgresql://h/db", True)
    flags = _parser().parse_args(
        ["serve", "--host", "::1", "--port", "1", "--allow-unauthenticated"]
    )
    assert (_settings(flags).host, _settings(flags).port) == ("::1", 1)  # flags win
    monkeypatch.setenv("CASCADE_ALLOW_UNAUTHENTICATED", "0")
    assert _settings(flags).allow_unauthenticated is True
    assert _settings(_parser().parse_args(["serve"])).allow_unauthenticated is False


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"cascade-proxy {__version__}"
    with pytest.raises(SystemExit):
        main(["sessions", "--help"])
    out = capsys.readouterr().out
    for action in ("ls", "show", "messages", "compact", "branch", "reset", "rm"):
        assert re.search(rf"^\s+{action}\s+\S", out, re.M), action  # each with its help


@pytest.mark.parametrize("command", START_COMMANDS)
def test_with_json_logs_a_refusal_to_start_is_json_too(command: list[str], tmp_path: Path) -> None:
    # serve says why it cannot start itself; under uvicorn the config error is raised out of
    # the factory, uncaught: either way each line on stderr is one JSON object.
    bad = tmp_path / "agents.json"
    bad.write_text('{"providers": {"x": {"baseUrl": 3}}}')
    env = {**os.environ, "CASCADE_LOG_FORMAT": "json", "CASCADE_CONFIG": str(bad)}
    done = run_start(command, env)
    assert done.returncode != 0
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert lines and all({"ts", "level", "logger", "message"} <= set(line) for line in lines)
    assert any("providers.x.baseUrl" in line["message"] for line in lines)


@pytest.mark.parametrize("fmt", ["json", "text"])
@pytest.mark.parametrize("command", START_COMMANDS)
def test_a_database_refusal_at_start_is_one_line_not_a_traceback(
    fmt: str, command: list[str], tmp_path: Path
) -> None:
    """What only the lifespan finds (here no server at ``DATABASE_URL``) ends the start with
    its message on one line (proxy/refusals.py), in the log's format, the password masked,
    under ``cascade-proxy serve`` and ``uvicorn proxy.app:create_app --factory`` alike."""
    env = {
        **os.environ,
        "CASCADE_LOG_FORMAT": fmt,
        "DATABASE_URL": "postgresql://cascade:hunter2@127.0.0.1:1/cascade",
    }
    env.pop("CASCADE_CONFIG", None)  # built-in defaults (no config/ in tmp_path)
    done = run_start(command, env, cwd=tmp_path)
    assert done.returncode == 3  # uvicorn's start-up failure
    assert "Traceback" not in done.stderr and "hunter2" not in done.stderr
    refusal = "cannot start: cannot connect to PostgreSQL at postgresql://cascade:***@127.0.0.1:1"
    if fmt == "json":
        lines = [json.loads(line) for line in done.stderr.splitlines()]
        [line] = [line for line in lines if line["message"].startswith(refusal)]
        assert line["level"] == "ERROR" and "(DATABASE_URL)" in line["message"]
        assert any(line["message"] == "Application startup failed. Exiting." for line in lines)
    else:
        assert len([line for line in done.stderr.splitlines() if refusal in line]) == 1


def test_serve_names_the_flag_that_gave_a_database_it_cannot_reach(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start's refusal and the event bus's LISTEN name where the URL came from: they
    said DATABASE_URL when ``--database-url`` gave it, and that flag wins over the variable."""
    env = {**os.environ, "DATABASE_URL": "postgresql://env@127.0.0.1:1/env"}
    env.pop("CASCADE_CONFIG", None)  # built-in defaults (no config/ in tmp_path)
    env.pop("CASCADE_LOG_FORMAT", None)
    url = "postgresql://flag:hunter2@127.0.0.1:1/flag"
    done = run_start([*SERVE, "--database-url", url], env, cwd=tmp_path)
    assert done.returncode == 3  # uvicorn's start-up failure
    refusal = "cannot connect to PostgreSQL at postgresql://flag:***@127.0.0.1:1/flag"
    assert f"{refusal} (--database-url): " in done.stderr, done.stderr
    assert "DATABASE_URL" not in done.stderr and "hunter2" not in done.stderr
    settings = _settings(_parser().parse_args(["serve", "--database-url", url]))
    assert listen_url(settings, url) == (url, "--database-url")
    monkeypatch.setenv("DATABASE_URL", env["DATABASE_URL"])
    env_only = _settings(_parser().parse_args(["serve"]))
    assert listen_url(env_only, env["DATABASE_URL"]) == (env["DATABASE_URL"], "DATABASE_URL")


_POOL_REFUSED = """
import sys
from proxy import app, cli

async def migrated(dsn, **kwargs):
    return []

app.run_migrations = migrated  # the pool is the first to connect
raise SystemExit(cli.main(["serve", "--port", sys.argv[1], "--database-url", sys.argv[2]]))
"""


def test_the_pool_names_the_flag_that_gave_its_database(tmp_path: Path) -> None:
    """The pool's connections (an outage's log line under a running proxy) name where the
    URL came from too, as the start's first connection does."""
    env = {k: v for k, v in os.environ.items() if k not in ("CASCADE_CONFIG", "DATABASE_URL")}
    env.pop("CASCADE_LOG_FORMAT", None)
    url = "postgresql://flag:hunter2@127.0.0.1:1/flag"
    done = run_start(["-c", _POOL_REFUSED, FREE_PORT, url], env, cwd=tmp_path)
    assert done.returncode == 3, done.stderr  # uvicorn's start-up failure
    assert "postgresql://flag:***@127.0.0.1:1/flag (--database-url): " in done.stderr
    assert "DATABASE_URL" not in done.stderr and "hunter2" not in done.stderr


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["serve", "--port", "abc"], "argument --port: abc is not a TCP port (1-65535)"),
        (["serve", "--host", " "], "argument --host: an empty address"),
        (["sessions", "show", ""], "argument ID: an empty session id"),
        (["sessions", "branch", "s1", "--new-id", ""], "argument --new-id: an empty session id"),
        (["sessions", "show", "s1/messages"], "argument ID: a session id holds no '/'"),
        (["sessions", "rm", "a/b"], "argument ID: a session id holds no '/'"),
    ],
)
def test_a_bad_argument_is_named_in_the_users_words(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # argparse names a type function that raises ValueError ("invalid _port value"); an
    # empty id asked GET /v1/sessions/ and printed "no route", and one with a "/" printed
    # the 404 of a wrong URL ("Invalid URL (GET /v1/sessions/s1%2Fmessages)")
    with pytest.raises(SystemExit) as usage:
        main(argv)
    assert usage.value.code == 2
    assert said in capsys.readouterr().err


def test_config_check_judges_the_environment_as_serve_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``config check`` passed a file ``serve`` then refused or warned of: it judged the file
    alone, and not the environment ``serve`` judges it in. What ``serve`` refuses is exit 2
    and its reason; what it warns of is a warning line."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    cfg = tmp_path / "agents.json"
    provider = {"baseUrl": "https://llm.internal/v1", "caFile": str(tmp_path / "ca.pem")}
    cfg.write_text(json.dumps({"providers": {"p": provider}}))
    monkeypatch.setenv("CASCADE_CONFIG", str(cfg))
    monkeypatch.setenv("CASCADE_LOG_LEVL", "debug")  # a misspelt setting
    assert main(["config", "check"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{cfg}: valid"
    assert any("CASCADE_LOG_LEVL" in line for line in out[1:] if line.startswith("warning: "))
    assert f"warning: providers.p.caFile: {tmp_path / 'ca.pem'} cannot be loaded" in "\n".join(out)
    for env, value, said in [
        ("SSL_CERT_FILE", str(tmp_path / "none.pem"), "SSL_CERT_FILE"),
        ("HTTPS_PROXY", "socks4://proxy.internal:1080", "the egress proxy socks4://"),
        ("CASCADE_HOST", "0.0.0.0", "refusing to listen on 0.0.0.0 without proxy keys"),
        # config check takes no --allow-unauthenticated: the line names serve's flag as serve's
        ("CASCADE_HOST", "0.0.0.0", "serve --allow-unauthenticated or CASCADE_ALLOW_UNAUTH"),
    ]:
        with monkeypatch.context() as m:
            m.setenv(env, value)
            assert main(["config", "check"]) == 2, env
        assert said in capsys.readouterr().err, env
    with monkeypatch.context() as m:  # allowed: what serve warns of once it listens
        m.setenv("CASCADE_HOST", "0.0.0.0")
        m.setenv("CASCADE_ALLOW_UNAUTHENTICATED", "1")
        assert main(["config", "check"]) == 0
    warned = [line for line in capsys.readouterr().out.splitlines() if "no proxy keys" in line]
    assert len(warned) == 1 and warned[0].startswith("warning: listening on 0.0.0.0"), warned


def test_config_check_validates_a_file_as_a_reload_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before saving over the config a proxy watches: exit 2 and the reason a reload would
    give, or exit 0 and the warnings the proxy would log."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"models": {"gpt-4o": {"contextLimit": true}}}')
    assert main(["config", "check", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err == f"cascade-proxy config check: {bad}: models.gpt-4o.contextLimit: " + (
        "Input should be a valid integer\n"
    )
    good = tmp_path / "good.json"
    good.write_text('{"auth": {"keys": [{"keyEnv": "CHECK_KEY_A", "tenant": "a"}]}}')
    monkeypatch.delenv("CHECK_KEY_A", raising=False)
    monkeypatch.setenv("CASCADE_CONFIG", str(good))
    assert main(["config", "check"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{good}: valid"
    assert "warning: auth key of tenant 'a': $CHECK_KEY_A is unset" in out[1]


def test_serve_takes_an_ipv6_host_in_brackets() -> None:
    assert _parser().parse_args(["serve", "--host", "[::1]"]).host == "::1"


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["sessions", "ls", "--bogus"], "usage: cascade-proxy sessions ls "),
        (["memory", "add", "a fact", "extra"], "usage: cascade-proxy memory add "),
        (["config", "check", "--bogus"], "usage: cascade-proxy config check "),
        (["sessions", "--bogus", "ls"], "usage: cascade-proxy sessions ls "),
    ],
)
def test_an_unknown_argument_shows_the_usage_of_the_command_it_was_given_to(
    argv: list[str], usage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # argparse's top parser reported it, with the top usage ("cascade-proxy [-h] [--version]
    # COMMAND ..."), which lists none of the options the command takes
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage), err
    assert "error: unrecognized arguments: " in err


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["--json", "sessions", "ls"], "cascade-proxy sessions ls --json"),
        (["--url=http://h:1", "memory", "ls"], "cascade-proxy memory ls --url=http://h:1"),
        (["--limit=1", "sessions", "messages", "s"], "cascade-proxy sessions messages --limit=1 s"),
        (["--json", "sessions", "show", "s1"], "cascade-proxy sessions show --json s1"),
        (["--limit", "1", "sessions", "ls"], "cascade-proxy sessions ls --limit 1"),  # 1: COMMAND
        (["--url", "http://h:1", "memory", "ls"], "cascade-proxy memory ls --url http://h:1"),
    ],
)
def test_a_commands_option_given_before_the_command_says_where_it_goes(
    argv: list[str], hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``cascade-proxy --json sessions ls``: the error is the command's, whose usage lists
    ``--json``; without the hint it read as a contradiction. The hint puts the option after
    the action's name, where each option of the action is taken (``sessions --limit=1 ls``
    is refused: ``--limit`` is ``ls``'s, not ``sessions``')."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"goes after the command's name: {hint}" in err, err


@pytest.mark.parametrize(
    "argv",
    [
        ["--bogus", "sessions", "ls"],
        ["--bogus", "x", "sessions", "ls"],  # x read as the command's name
        ["--limit", "1", "sessions", "show", "s1"],  # ls's and messages' option, not show's
        ["--url", "http://h:1", "--new-id", "n", "sessions", "ls"],  # branch's
    ],
)
def test_an_option_the_command_does_not_take_before_the_command_gets_no_hint(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The hint would name a command line that is refused in turn."""
    with pytest.raises(SystemExit):
        main(argv)
    assert "goes after" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("action", "sid", "why"),
    [
        ("accept", "", "an empty suggestion id"),
        ("reject", "a/b", "a suggestion id holds no '/'"),
    ],
)
def test_a_suggestion_id_no_route_takes_is_a_usage_error(
    action: str, sid: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Sent, it made a path no route takes, and the proxy's 404 ``Invalid URL`` read as a
    wrong ``--url``; a session id is checked alike."""
    with pytest.raises(SystemExit) as exit_:
        main(["memory", action, sid, "--url", "http://127.0.0.1:9"])
    assert exit_.value.code == 2 and why in capsys.readouterr().err


def test_accept_names_its_fact_option_as_the_readme_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One ``--fact TEXT`` each: ``FACTS`` (the option's destination) read as a list."""
    with pytest.raises(SystemExit):
        main(["memory", "accept", "--help"])
    assert "--fact TEXT" in capsys.readouterr().out
