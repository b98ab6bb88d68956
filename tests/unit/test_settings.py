"""Settings shared by ``cascade-proxy serve`` and ``uvicorn proxy.app:create_app --factory``."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from proxy.settings import (
    DEFAULT_CONFIG,
    Settings,
    SettingsError,
    load_settings,
)
from proxy.settings_names import unknown_variables
from tests.unit.readme import README
from tests.unit.starts import START_COMMANDS, run_start

REPO = Path(__file__).resolve().parents[2]


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


def test_an_unknown_cascade_variable_is_named_with_the_setting_it_is_closest_to() -> None:
    env = {
        "CASCADE_PORTT": "9000",
        "cascade_loglevel": "debug",  # pydantic-settings reads any case
        "CASCADE_DATABASE_URL": "postgresql://db",  # the setting is DATABASE_URL
        "CASCADE_WHATEVER": "x",
        "CASCADE_PORT": "8080",
        "CASCADE_TEST_POOLER": "transaction",  # test helpers'
        "CASCADE_URL": "http://proxy",  # the session commands'
        "CASCADE_KEY_TEAM_A": "sk-proxy",  # named by the config's keyEnv
        "HOME": "/root",
    }
    message = unknown_variables(env, {"CASCADE_KEY_TEAM_A"})
    assert message == (
        "unknown environment variables ignored: "
        "CASCADE_DATABASE_URL (did you mean DATABASE_URL?), CASCADE_PORTT (did you mean "
        "CASCADE_PORT?), CASCADE_WHATEVER, cascade_loglevel (did you mean CASCADE_LOG_LEVEL?); "
        "the settings are listed in README, Configuration"
    )
    assert (
        unknown_variables({"CASCADE_PORT": "1", "CASCADE_KEY_CI": "k"}, {"CASCADE_KEY_CI"}) is None
    )


def test_no_variable_the_project_documents_is_taken_for_a_typo() -> None:
    documented: set[str] = set()
    referenced: set[str] = set()
    docs = [str(p.relative_to(REPO)) for p in sorted((REPO / "docs").glob("*.md"))]
    for name in (
        "README.md",
        ".env.example",
        "docker-compose.yml",
        "Makefile",
        "Dockerfile",
        *docs,
    ):
        text = (REPO / name).read_text()
        # every name but the README's example of a typo
        documented |= set(re.findall(r"\bCASCADE_[A-Z0-9_]*[A-Z0-9]\b(?! \(did you)", text))
        referenced |= set(re.findall(r'[kK]eyEnv"?:\s*"([A-Z0-9_]+)"', text))  # config examples
    assert "CASCADE_PORT" in documented and "CASCADE_KEY_CI" in referenced
    assert unknown_variables(dict.fromkeys(documented, "x"), referenced) is None


def test_no_variable_the_project_reads_is_taken_for_a_typo() -> None:
    """Each ``CASCADE_*`` variable code of the project reads from the environment, the bench's
    too: ``bench.longrun --profile`` gives the proxy it starts ``CASCADE_BENCH_PROFILE``,
    which the proxy's start then named as a misspelt setting."""
    read: set[str] = set()
    pattern = r"(?:environ(?:\.get\(|\[)|getenv\()\s*[\"'](CASCADE_[A-Z0-9_]+)[\"']"
    for folder in ("proxy", "bench", "scripts"):
        for path in (REPO / folder).rglob("*.py"):
            read |= set(re.findall(pattern, path.read_text(encoding="utf-8")))
    assert "CASCADE_BENCH_PROFILE" in read and "CASCADE_LOG_FORMAT" in read
    assert unknown_variables(dict.fromkeys(read, "x")) is None


@pytest.mark.parametrize("command", START_COMMANDS)
def test_a_misspelt_variable_is_one_warning_at_start_without_its_value(
    command: list[str], tmp_path: Path
) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if k != "CASCADE_CONFIG"},
        "CASCADE_PORTT": "s3cret-value",
        "DATABASE_URL": "postgresql://cascade@127.0.0.1:1/cascade",  # the start stops there
    }
    done = run_start(command, env, cwd=tmp_path)
    warned = [line for line in done.stderr.splitlines() if "CASCADE_PORTT" in line]
    assert len(warned) == 1, done.stderr
    assert "WARNING" in warned[0] and "did you mean CASCADE_PORT?" in warned[0]
    assert "s3cret-value" not in done.stderr


@pytest.mark.parametrize(
    "origins",
    [
        "",
        "*",
        "https://app.example",
        "http://localhost:3000, https://b.example",
        "HTTPS://App.Example",  # scheme and host are case-insensitive
        "http://[::1]:8080",
        "chrome-extension://abcdefghijklmnop",  # any scheme a browser serializes
        "null",  # the Origin of a sandboxed frame or a file:// page
    ],
)
def test_cors_origins_that_are_origins_are_taken(origins: str) -> None:
    assert Settings(cors_origins=origins).cors_origins == origins


@pytest.mark.parametrize(
    ("origins", "problem"),
    [
        ("example.com", "entry 1 has no scheme"),
        ("localhost:3000", "entry 1 has no scheme"),
        ("https://a.example, https://b.example/", "entry 2 has a path"),
        ("https://a.example/app", "entry 1 has a path"),
        ("https://a.example?x=1", "entry 1 has a path"),
        ("https://user@a.example", "entry 1 has a user"),
        ("https://a.example:99999", "entry 1 has a port that is no number 1-65535"),
        ("https://", "entry 1 has no host"),
    ],
)
def test_cors_origins_that_are_not_origins_are_refused_at_start(
    origins: str, problem: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: taken, and the entry matched no browser's ``Origin`` (the scheme, no path,
    no trailing '/'), so CORS was silently off for that site."""
    monkeypatch.setenv("CASCADE_CORS_ORIGINS", origins)
    with pytest.raises(SettingsError) as refused:
        load_settings()
    reason = str(refused.value)
    assert reason.startswith(f"CASCADE_CORS_ORIGINS: {problem}; an origin is "), reason
    assert "example" not in reason.removeprefix("CASCADE_CORS_ORIGINS: ").split(";")[0]


@pytest.mark.parametrize("command", START_COMMANDS)
def test_a_cors_origin_with_a_path_refuses_the_start_naming_the_variable(
    command: list[str], tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "CASCADE_CORS_ORIGINS": "https://app.example/",
        "DATABASE_URL": "postgresql://cascade@127.0.0.1:1/cascade",  # taken, it stops there
    }
    env.pop("CASCADE_CONFIG", None)
    done = run_start(command, env, cwd=tmp_path)
    assert done.returncode != 0
    refusals = [line for line in done.stderr.splitlines() if "CASCADE_CORS_ORIGINS" in line]
    assert len(refusals) == 1 and "entry 1 has a path" in refusals[0], done.stderr


@pytest.mark.parametrize("value", ["JSON", "Json", " json "])
def test_the_log_format_is_read_in_any_case(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """As the refusal written before the settings exist reads it (``format_from_env``), and
    as ``CASCADE_LOG_LEVEL`` is read: ``JSON`` was refused, in a JSON line."""
    monkeypatch.setenv("CASCADE_LOG_FORMAT", value)
    assert Settings().log_format == "json"


@pytest.mark.parametrize(
    ("variable", "value", "read"),
    [
        ("CASCADE_TRACING", "OTLP", "otlp"),
        ("CASCADE_TRACING", " Off ", "off"),
        ("CASCADE_HTTP_TRANSPORT", "HTTPX", "httpx"),
        ("CASCADE_DB_POOLER", "Transaction", "transaction"),
        # a switch with blanks around it was refused, where a number is read
        ("CASCADE_WATCH_CONFIG", " False ", False),
        ("CASCADE_ALLOW_UNAUTHENTICATED", "true\t", True),
    ],
)
def test_every_setting_of_a_few_words_is_read_in_any_case(
    variable: str, value: str, read: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As ``CASCADE_LOG_LEVEL`` and ``CASCADE_LOG_FORMAT`` are: ``OTLP`` refused the start
    while ``INFO`` was taken."""
    monkeypatch.setenv(variable, value)
    assert getattr(load_settings(), variable.removeprefix("CASCADE_").lower()) == read


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base", ""])
def test_a_tiktoken_encoding_or_none_is_taken(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASCADE_TOKENIZER", name)
    assert load_settings().tokenizer == name
    # an env file's trailing space refused the start, listing the very name given
    monkeypatch.setenv("CASCADE_TOKENIZER", f"{name} ")
    assert load_settings().tokenizer == name


def test_a_misspelt_tokenizer_refuses_the_start_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Regression: an encoding tiktoken does not have started the proxy with one warning,
    # the same as offline, and every token was counted by the estimate for good.
    monkeypatch.setenv("CASCADE_TOKENIZER", "o200k_bsae")
    with pytest.raises(SettingsError, match=r"CASCADE_TOKENIZER: .*o200k_base") as refused:
        load_settings()
    assert "o200k_bsae" not in str(refused.value)  # a value is never quoted


def test_an_empty_config_variable_is_the_default_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: CASCADE_CONFIG= (a blank line in an env file) read as the path ".", and the
    # start was refused with "cannot read config file .: Is a directory", naming no setting.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CASCADE_CONFIG", "")
    assert load_settings().config is None
    (tmp_path / DEFAULT_CONFIG).parent.mkdir()
    (tmp_path / DEFAULT_CONFIG).write_text("{}")
    assert load_settings().config == Path(DEFAULT_CONFIG)


def test_a_blank_host_refuses_the_start_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Regression: a blank host listened on every interface (an empty host binds them all),
    # and the banner said "listening on :8080"; without keys the refusal read "refusing to
    # listen on  without proxy keys". An empty one is unset (the next test).
    monkeypatch.setenv("CASCADE_HOST", "  ")
    with pytest.raises(SettingsError, match=r"^CASCADE_HOST: empty; give an address"):
        load_settings()


@pytest.mark.parametrize(
    "variable",
    [
        "CASCADE_HOST",
        "CASCADE_PORT",
        "CASCADE_LOG_LEVEL",
        "CASCADE_LOG_FORMAT",
        "CASCADE_POOL_MAX_SIZE",
        "CASCADE_DB_POOLER",
        "CASCADE_MAX_BODY_BYTES",
    ],
)
def test_an_empty_variable_is_an_unset_one(variable: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Regression: an env file's `CASCADE_LOG_LEVEL=` (a template filled with nothing) refused
    # the start while `CASCADE_CONFIG=` or `DATABASE_URL=` meant the default, as README says
    # every empty CASCADE_* variable does.
    monkeypatch.delenv(variable, raising=False)
    default = load_settings()
    monkeypatch.setenv(variable, "")
    assert load_settings() == default


def test_an_empty_data_dir_is_the_default_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # Regression: CASCADE_DATA_DIR= read as the path ".", so the embedded PostgreSQL made its
    # pgdata/ and run/ in whatever directory the proxy was started from.
    monkeypatch.setenv("CASCADE_DATA_DIR", " ")
    assert load_settings().data_dir is None


def test_a_kubernetes_service_link_in_cascade_port_is_named_as_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Regression: a Kubernetes Service named "cascade" sets CASCADE_PORT=tcp://10.0.0.7:8080
    # in every pod of its namespace (service links), and the start read "CASCADE_PORT: Input
    # should be a valid integer", which does not say where the value came from.
    monkeypatch.setenv("CASCADE_PORT", "tcp://10.0.0.7:8080")
    with pytest.raises(SettingsError, match=r"^CASCADE_PORT: .*enableServiceLinks") as refused:
        load_settings()
    assert "10.0.0.7" not in str(refused.value)


def test_kubernetes_service_link_variables_are_not_taken_for_typos() -> None:
    links = {
        "CASCADE_SERVICE_HOST": "10.0.0.7",
        "CASCADE_SERVICE_PORT": "8080",
        "CASCADE_SERVICE_PORT_HTTP": "8080",
        "CASCADE_PORT_8080_TCP": "tcp://10.0.0.7:8080",
        "CASCADE_PORT_8080_TCP_ADDR": "10.0.0.7",
        "CASCADE_PORT_8080_TCP_PORT": "8080",
        "CASCADE_PORT_8080_TCP_PROTO": "tcp",
    }
    assert unknown_variables(links) is None
    assert unknown_variables({"CASCADE_PORT_HTTP": "1"}) is not None  # not a link's name


@pytest.mark.parametrize(("given", "host"), [("[::1]", "::1"), ("[::]", "::"), ("::1", "::1")])
def test_an_ipv6_address_in_brackets_is_the_address(
    given: str, host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: CASCADE_HOST=[::1], as the banner and every URL write it ("listening on
    # [::1]:8080"), was looked up as a host name: "cannot listen on [::1]:8080: Name or
    # service not known", exit 3.
    monkeypatch.setenv("CASCADE_HOST", given)
    assert load_settings().host == host


def test_a_pool_no_postgresql_can_serve_is_refused_at_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """asyncpg builds a holder per connection the pool may open, as it starts: a
    ``CASCADE_POOL_MAX_SIZE`` of a billion held the start building them until memory ran
    out. PostgreSQL takes at most 262143 connections (``max_connections``)."""
    monkeypatch.setenv("CASCADE_POOL_MAX_SIZE", "1000000000")
    with pytest.raises(SettingsError, match=r"^CASCADE_POOL_MAX_SIZE: Input should be less"):
        load_settings()
    monkeypatch.setenv("CASCADE_POOL_MAX_SIZE", "262143")
    assert load_settings().pool_max_size == 262143


@pytest.mark.parametrize(
    "variable",
    [
        "CASCADE_KEEPALIVE_SECONDS",
        "CASCADE_POOL_TIMEOUT_SECONDS",
        "CASCADE_DB_STATEMENT_TIMEOUT_SECONDS",
        "CASCADE_LEASE_TTL_SECONDS",
        "CASCADE_EMBEDDING_POLL_SECONDS",
    ],
)
@pytest.mark.parametrize("value", ["inf", "Infinity", "nan"])
def test_a_duration_that_is_not_a_finite_number_is_refused_at_start(
    variable: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The config file refuses non-finite numbers; a variable took ``inf``: a keep-alive
    that never comes, a wait for a pooled connection that never ends. A bounded one said
    ``nan`` was over its ceiling."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError, match=rf"^{variable}: Input should be a finite number$"):
        load_settings()
    monkeypatch.setenv(variable, "2.5")
    assert getattr(load_settings(), variable.removeprefix("CASCADE_").lower()) == 2.5


@pytest.mark.parametrize(
    ("variable", "value", "form"),
    [
        ("CASCADE_MAX_BODY_BYTES", "32MiB", "a whole number of bytes, no unit or suffix"),
        ("CASCADE_KEEPALIVE_SECONDS", "15s", "a number of seconds, no unit (2.5)"),
        ("CASCADE_LEASE_TTL_SECONDS", "500ms", "a number of seconds, no unit (2.5)"),
        ("CASCADE_WATCH_CONFIG", "maybe", "true or false (or 1/0, yes/no, on/off)"),
        ("CASCADE_ALLOW_UNAUTHENTICATED", "y3s", "true or false (or 1/0, yes/no, on/off)"),
        ("CASCADE_POOL_MAX_SIZE", "1.5", "a whole number"),
    ],
)
def test_a_value_of_the_wrong_form_is_refused_saying_the_form(
    variable: str, value: str, form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pydantic says "a valid integer" or "a valid boolean", not that a size takes no
    suffix or a duration no unit, nor which words a boolean takes: the refusal says it, on
    its one line, still without the value."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as refused:
        load_settings()
    said = str(refused.value)
    assert said.startswith(f"{variable}: Input should be a valid ") and "\n" not in said
    assert said.endswith(f"; give {form}") or f"; give {form} (" in said, said
    assert value not in said


def test_readme_quotes_the_refusal_of_a_duration_with_a_unit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CASCADE_KEEPALIVE_SECONDS", "15s")
    with pytest.raises(SettingsError) as refused:
        load_settings()
    assert f"(`{refused.value}`)" in README


@pytest.mark.parametrize("variable", ["DATABASE_URL", "DATABASE_LISTEN_URL"])
@pytest.mark.parametrize(
    "value", ["mysql://u:pw-SECRET@h/db", "host=h user=u password=pw-SECRET", "h:5432/db"]
)
def test_a_database_url_asyncpg_cannot_read_is_refused_as_a_setting(
    variable: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It was refused only as the start connected, after uvicorn's lines, with the exit
    status of a database down (3) and asyncpg's words ("scheme is expected …")."""
    monkeypatch.setenv("DATABASE_URL", "postgresql://u@h/db")
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError, match=rf"^{variable}: not a postgresql:// URL") as refused:
        load_settings()
    assert "SECRET" not in str(refused.value)
    monkeypatch.setenv(variable, "postgres://u:pw@h:5432/db")
    assert getattr(load_settings(), variable.lower()) == "postgres://u:pw@h:5432/db"


def test_a_database_url_flag_asyncpg_cannot_read_is_refused_naming_the_flag() -> None:
    with pytest.raises(SettingsError, match=r"^--database-url: not a postgresql:// URL") as no:
        Settings().with_database_url("host=h password=pw-SECRET", "--database-url")
    assert "SECRET" not in str(no.value)


@pytest.mark.parametrize(
    "url", ["postgresql://u:pw-SECRET@h:99999/db", "postgresql://u@h1:5432,h2:70000/db"]
)
def test_a_database_url_with_a_port_out_of_range_is_refused_as_a_setting(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """asyncpg's socket raised OverflowError as it connected: ``migrate`` ended with a
    traceback (exit 1), ``serve`` called it a database that did not answer (exit 3)."""
    monkeypatch.setenv("DATABASE_URL", url)
    with pytest.raises(SettingsError, match=r"^DATABASE_URL: port \d+ is no TCP port"):
        load_settings()
    monkeypatch.delenv("DATABASE_URL")
    with pytest.raises(SettingsError, match=r"^--database-url: port \d+ is no TCP port") as no:
        Settings().with_database_url(url, "--database-url")
    assert "SECRET" not in str(no.value)
    many = "postgresql://u@h1:5432,[::1]:5433,h3/db?port=5432"  # asyncpg's hosts, each its port
    assert Settings().with_database_url(many, "--database-url").database_url == many
