"""A database URL's password never reaches a log line or a refusal, in the forms an operator
writes by mistake too: an unencoded "@" or "/" in the password, or libpq's key=value DSN
(which asyncpg refuses, quoting it whole)."""

from __future__ import annotations

import pytest

from proxy.logs import causes
from proxy.store.db import DatabaseUnavailable, connect, redact_dsn

SECRET = "TOPSECRET"


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        (  # the host asyncpg then looks up is "SECRET@127.0.0.1": half the password was shown
            "postgresql://cascade:TOP@SECRET@127.0.0.1:5432/postgres",
            "postgresql://cascade:***@127.0.0.1:5432/postgres",
        ),
        ("postgresql://u:TOP/SECRET@h/db", "postgresql://u:***@h/db"),
        # an unencoded "@" and then "/", "?" or "#": the mask stopped at the first "@"
        ("postgresql://u:TOP@SEC/RET@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u:TOP@SEC#RET@h:1/db", "postgresql://u:***@h:1/db"),
        ("postgresql://u:TOP@SEC?RET@h/db?x=1", "postgresql://u:***@h/db?x=1"),
        ("u:TOP@SEC/RET@host/db", "u:***@host/db"),
        # asyncpg connects with a space in the password; the mask stopped at it
        ("postgresql://u:TOP SECRET@127.0.0.1:1/db", "postgresql://u:***@127.0.0.1:1/db"),
        ("postgresql://u:TOP\tSE CRET@h/db", "postgresql://u:***@h/db"),
        (
            "host=127.0.0.1 port=5432 user=cascade password=TOPSECRET dbname=postgres",
            "host=127.0.0.1 port=5432 user=cascade password=*** dbname=postgres",
        ),
        ("host=h password = 'TOP SECRET' dbname=x", "host=h password = *** dbname=x"),
        ("postgresql://u:p%40ss@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgres://u@h/db?password=TOPSECRET", "postgres://u@h/db?password=***"),
        ("postgres://u@h/db", "postgres://u@h/db"),
        # the client key's passphrase, which asyncpg reads from the URL as libpq does
        (
            "postgresql://u:TOPSECRET@h/db?sslmode=verify-full&sslpassword=TOPSECRET",
            "postgresql://u:***@h/db?sslmode=verify-full&sslpassword=***",
        ),
        ("host=h sslpassword=TOPSECRET dbname=x", "host=h sslpassword=*** dbname=x"),
        # a query's password with an "@" (the URL's mask took the query to it, and left the
        # rest of the password), or a "#" (which asyncpg reads as the end of the URL)
        ("postgresql://u@h:1/db?password=TOP@SECRET&x=1", "postgresql://u@h:1/db?password=***&x=1"),
        (
            "postgresql://u:pw@h/db?sslpassword=TOP@SECRET",
            "postgresql://u:***@h/db?sslpassword=***",
        ),
        ("postgresql://u@h/db?sslpassword=TOP#SECRET", "postgresql://u@h/db?sslpassword=***"),
        # malformed URLs, which asyncpg quotes whole in its error: no "://" before the user
        ("postgresql:/u:TOPSECRET@h", "postgresql:/u:***@h"),
        ("u:TOPSECRET@host/db", "u:***@host/db"),
        ("u:TOP@SECRET@host/db", "u:***@host/db"),
        ("u:TOP/SECRET@host/db", "u:***@host/db"),
        ("postgresql:///u:TOPSECRET@h", "postgresql:///u:***@h"),
        ("postgresql:u:TOPSECRET@h/db", "postgresql:***@h/db"),  # the user goes with it
    ],
)
def test_the_password_is_masked_in_every_form(dsn: str, shown: str) -> None:
    assert redact_dsn(dsn) == shown
    assert "SECRET" not in redact_dsn(dsn)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        # Regression: the mask ran from "://user:" to the last "@" of the whole text.
        (
            "cannot connect to postgresql://u:TOPSECRET@h:5432/db; mail dba@example.com",
            "cannot connect to postgresql://u:***@h:5432/db; mail dba@example.com",
        ),
        (
            "postgresql://u:TOPSECRET@h1/a (DATABASE_URL), postgresql://v:TOPSECRET2@h2/b",
            "postgresql://u:***@h1/a (DATABASE_URL), postgresql://v:***@h2/b",
        ),
        # no password at all: a port, then a path or the end of the URL
        (
            "postgresql://localhost:5432/cascade is down, ask dba@example.com",
            "postgresql://localhost:5432/cascade is down, ask dba@example.com",
        ),
        (
            "postgresql://localhost:5432 is down, ask dba@example.com",
            "postgresql://localhost:5432 is down, ask dba@example.com",
        ),
        (
            "postgresql://[::1]:5432/db for dba@example.com",
            "postgresql://[::1]:5432/db for dba@example.com",
        ),
        # the forms the password takes stay masked with text after them
        (
            "at postgresql://u:TOP SECRET@127.0.0.1:1/db for dba@example.com",
            "at postgresql://u:***@127.0.0.1:1/db for dba@example.com",
        ),
        (
            "at postgresql://u:TOP@SECRET@h/db for dba@example.com",
            "at postgresql://u:***@h/db for dba@example.com",
        ),
        (
            "at postgresql://u:TOP/SECRET@h/db for dba@example.com",
            "at postgresql://u:***@h/db for dba@example.com",
        ),
        (
            "line postgresql://u:TOPSECRET@h/db\nand dba@example.com",
            "line postgresql://u:***@h/db\nand dba@example.com",
        ),
    ],
)
def test_only_each_urls_password_is_masked(text: str, shown: str) -> None:
    assert redact_dsn(text) == shown
    assert "SECRET" not in redact_dsn(text)


@pytest.mark.parametrize(
    "text",
    [
        "postgresql://localhost:5432/db for dba@example.com",
        "at 12:30:01 mail dba@example.com",
        "host:5432 dba@example.com",
        "postgresql://u:***@h/db",  # masked already: masked again, it is the same
    ],
)
def test_text_without_a_password_is_kept(text: str) -> None:
    assert redact_dsn(text) == text


@pytest.mark.parametrize(
    "filler",
    [
        "://" * 350_000,  # about 1 MB of "://" and no "@"
        "://u:" * 200_000,  # each a URL's "user:" with no "@" to end its password
        "postgresql://u:" + "x://" * 250_000,
    ],
)
def test_a_long_text_of_urls_without_an_at_is_read_in_one_pass(filler: str) -> None:
    """The password was looked for from each "://" on to the end of its run, so a text of
    many "://" and no "@" was read once for each of them: about a megabyte took minutes
    (over the suite's timeout), where one pass takes milliseconds."""
    text = f"{filler} then postgresql://u:TOPSECRET@h/db and postgresql://v:TOP SECRET@h/db"
    tail = " then postgresql://u:***@h/db and postgresql://v:***@h/db"
    assert redact_dsn(text) == filler + tail


async def test_a_malformed_database_url_is_refused_without_its_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PGHOST", "127.0.0.1")  # where a URL without a host leads: refused
    monkeypatch.setenv("PGPORT", "1")
    for dsn in ("postgresql:/u:TOPSECRET@h", "u:TOPSECRET@host/db"):
        with pytest.raises(DatabaseUnavailable) as info:
            await connect(dsn, timeout=5)
        assert "SECRET" not in str(info.value) and "u:***@h" in str(info.value)


@pytest.mark.parametrize(
    ("url", "kept"),
    [
        ("u:TOP@SECRET@provider.example/v1", "provider.example/v1"),  # malformed: no scheme
        ("https://u:TOP@SECRET@provider.example/v1", "https://provider.example/v1"),
    ],
)
def test_a_cause_naming_a_url_loses_its_whole_user_and_password(url: str, kept: str) -> None:
    try:
        try:
            raise OSError(f"cannot reach {url}")
        except OSError as inner:
            raise RuntimeError("provider failed") from inner
    except RuntimeError as exc:
        said = causes(exc)
    assert "SECRET" not in said
    assert kept in said


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://u:TOP@SEC?RET@127.0.0.1:1/db",  # bad query field: 'RET@127.0.0.1:1/db'
        "postgresql://u:TOP@SECRET:word@127.0.0.1:1/db",  # int(): 'word@127.0.0.1:1'
        "postgresql://u:SE/CRET@127.0.0.1:1/db",  # int(): 'SE', the port asyncpg read
        "postgresql://u:SE#CRET@127.0.0.1:1/db",
    ],
)
async def test_what_asyncpg_quotes_of_a_misread_password_is_masked(dsn: str) -> None:
    """A password with an unencoded "@", "/", "?" or "#" is read as a host, a port or a query,
    and asyncpg's complaint quotes that part with no "user:" before it: the pieces of the
    URL's password are masked in it wherever they stand."""
    with pytest.raises(DatabaseUnavailable) as info:
        await connect(dsn, timeout=5)
    said = str(info.value)
    assert "ValueError" in said
    assert not any(piece in said for piece in ("RET", "SEC", "word", "'SE'")), said
