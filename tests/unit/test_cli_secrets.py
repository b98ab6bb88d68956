"""``cascade-proxy``'s usage errors never quote a secret the command line gave: argparse
quotes a token it cannot place (a key given before the command's name reads as that name),
and such a line lands in a CI log or, with ``CASCADE_LOG_FORMAT=json``, a log pipeline."""

from __future__ import annotations

import pytest

from proxy.cli import main

_KEY = "sk-topsecret-123"
_PASSWORD = "dbpassw0rd"


def _usage_error(
    argv: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    fmt: str | None = None,
) -> tuple[object, str, str]:
    """``cascade-proxy argv`` run to its exit, ``CASCADE_LOG_FORMAT`` ``fmt`` (None: unset):
    its exit code, and what it wrote to stdout and stderr."""
    if fmt is None:
        monkeypatch.delenv("CASCADE_LOG_FORMAT", raising=False)
    else:
        monkeypatch.setenv("CASCADE_LOG_FORMAT", fmt)
    with pytest.raises(SystemExit) as exited:
        main(argv)
    out, err = capsys.readouterr()
    return exited.value.code, out, err


@pytest.mark.parametrize(
    "argv",
    [
        ["--api-key", _KEY, "sessions", "ls"],  # before the command: read as its name
        ["--api-key=" + _KEY, "sessions", "ls"],  # the hint moving it quoted it twice
        ["--api", _KEY, "memory", "ls"],  # a prefix argparse takes for --api-key
        ["sessions", "ls", "--api-kye", _KEY],  # a typo of the flag
        ["--ap", _KEY, "sessions", "ls"],  # every prefix argparse takes, the shortest too
        ["--a=" + _KEY, "sessions", "ls"],
        ["sessions", "messages", "--a=" + _KEY, "s1"],  # ambiguous (--all): quoted whole
        ["--api-key", "-" + _KEY, "sessions", "ls"],  # a key may start with "-"
        ["sessions", "ls", "--api-key", "Bearer", _KEY],  # the header's value, copied whole
        ["--api-key=bearer", _KEY, "sessions", "ls"],
        ["sessions", "ls", "--token", _KEY],  # an option no command has, named as a credential
        ["sessions", "ls", "--auth", _KEY],
        ["migrate", "--db-password", _KEY],
        ["sessions", "ls", "--credentials", _KEY],
        ["sessions", "ls", "-u", f"admin:{_PASSWORD}"],  # curl's habit, a short option
        ["-p", _PASSWORD, "migrate"],  # psql's or mysql's: none of cascade-proxy's takes one
        ["--database-url", f"postgresql://cascade:{_PASSWORD}@db/cascade", "migrate"],
        ["--url", f"http://admin:{_PASSWORD}@127.0.0.1:8080", "sessions", "ls"],
        ["migrate", "--database-url", f"postgresql://cascade:{_PASSWORD}@db/cascade", "--bogus"],
        ["sessions", "ls", f"-uadmin:{_PASSWORD}"],  # a short option's value in its token
        ["--json", _KEY, "sessions", "ls"],  # after a flag, read as the command's name
        ["sessions", "--json", _KEY, "ls"],  # and as the action's
        ["sessions", "ls", "--", _KEY],  # after "--": an argument, no option's value
        ["sessions", "ls", "--rate-limit-key", _KEY],
        ["sessions", "ls", f"-u{_PASSWORD}=="],  # base64's padding: no option's "="
        ["sessions", "ls", "-api-key", _KEY],  # a long option's name with one dash
        ["-api-key", _KEY, "sessions", "ls"],  # a count's word, but no count given
    ],
)
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_usage_error_does_not_quote_a_key_or_a_password(
    argv: list[str],
    fmt: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, out, err = _usage_error(argv, capsys, monkeypatch, fmt)
    assert code == 2
    assert err.strip() and not out
    assert _KEY not in err and _PASSWORD not in err, err


def test_a_usage_error_still_quotes_what_holds_no_secret(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, err = _usage_error(
        ["sessions", "ls", "--limit", "5", "--bogus", "value-shown"], capsys, monkeypatch
    )
    assert "unrecognized arguments: --bogus value-shown" in err


_SHAPED = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"  # an OpenAI key's shape


@pytest.mark.parametrize(
    "argv",
    [
        ["sessions", "ls", _SHAPED],  # the key given with no option: an extra argument
        [_SHAPED, "sessions", "ls"],  # read as the command's name
        ["-k", _SHAPED, "sessions", "ls"],  # a short option, which none of these has
        ["sessions", "ls", "--limit", _SHAPED],  # quoted by the option's type
        ["sessions", "ls", "--header", f"Authorization: Bearer {_SHAPED}"],
        ["--url", f"http://127.0.0.1:8080/?api_key={_SHAPED}", "sessions", "ls"],
    ],
)
def test_a_usage_error_masks_a_key_by_its_shape_where_no_option_names_it(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the log lines mask (``proxy.logs.masked``) an error masks too: argparse's text
    is written before any log line's masking, without it."""
    _, _, err = _usage_error(argv, capsys, monkeypatch)
    assert "error:" in err and _SHAPED[8:] not in err, err


@pytest.mark.parametrize("key", ["to'ps3cret", "tops3cret\\x", "tops3cr\u00e9t\u200b"])
def test_a_usage_error_masks_a_key_as_argparse_or_the_hint_quotes_it(
    key: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """argparse quotes the command's name by ``repr`` (a backslash doubled, an invisible
    character escaped) and the hint by ``shlex`` (a quote spelt ``'"'"'``): neither holds
    the key's text as given."""
    _, _, err = _usage_error(["--api-key", key, "sessions", "ls"], capsys, monkeypatch)
    assert "error:" in err and "s3cr" not in err, err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["sessions", "ls", "--api-key"], "argument --api-key: expected one argument"),
        (["sessions", "ls", "--api-key", "--json"], "argument --api-key: expected one argument"),
        (["--api-key", "sessions", "ls"], "cascade-proxy sessions ls --api-key)"),  # env's key
        (["--bypass", "memory", "memory", "ls"], "invalid choice: 'memory'"),
        (["serve", "--tokenizer", "cl100k_base"], "arguments: --tokenizer cl100k_base"),  # env's
        (["sessions", "ls", "--passes", "300"], "arguments: --passes 300"),
        (["--keyfile", "k.pem", "serve"], "invalid choice: 'k.pem'"),
        (["--api-key", "key", "sessions", "ls"], "cascade-proxy sessions ls --api-key ***)"),
        (["--json", "sessions", "ls", "-o", "json"], "unrecognized arguments: --json -o ***"),
    ],
)
def test_a_usage_error_masks_nothing_that_holds_no_secret(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mistake stays readable: argparse's ``--api-key: expected`` is no key given, nor
    is a command's name after a secret option that was given none, nor the value of an
    option whose name holds a credential's word but names none."""
    _, _, err = _usage_error(argv, capsys, monkeypatch)
    assert said in err


@pytest.mark.parametrize(
    "argv",
    [
        ["correct-horse-battery-staple", "sessions", "ls"],  # a passphrase: lower-case words
        ["sessions", "correcthorsebatterystaple", "ls"],
        ["--json", "correcthorsebatterystaple", "sessions", "ls"],
    ],
)
def test_a_long_lower_case_argument_read_as_a_command_is_not_quoted(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mistyped command is a short word (``run``, ``list``: still quoted); one longer than
    any command's name may be a passphrase given without its option."""
    _, _, err = _usage_error(argv, capsys, monkeypatch)
    assert "horse" not in err and "invalid choice: '***'" in err, err


@pytest.mark.parametrize(
    ("argv", "secret"),
    [
        (["--api-key", "12345678", "sessions", "ls"], "12345678"),  # a key may be all digits
        (["sessions", "ls", "12345678"], "12345678"),  # a number too long for a count
        (["sessions", "ls", "--", "12345678"], "12345678"),
        (["sessions", "ls", "--num-keys", "12345678"], "12345678"),  # a count's word, no count
        (["--api-key", "k9", "sessions", "ls"], "k9"),  # any length
        (["sessions", "ls", "-p", "ab"], "ab"),
        (["sessions", "ls", "-uhunter"], "hunter"),  # a short option's lower-case value
        (["-psecret", "sessions", "ls"], "secret"),
        (["sessions", "ls", "-upassword"], "password"),
        (["sessions", "ls", "-password", "hunter"], "hunter"),  # -p's value, or --password's
    ],
)
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_what_follows_a_secret_taking_option_is_masked_whatever_its_shape(
    argv: list[str],
    secret: str,
    fmt: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """All digits (read as a count), two characters, or a lower-case word glued to a short
    option (read as a long option's name with one dash, ``-json``): each was quoted."""
    code, _, err = _usage_error(argv, capsys, monkeypatch, fmt)
    assert code == 2
    assert "***" in err and secret not in err, err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["sessions", "ls", "-uhunter"], "unrecognized arguments: -u***\n"),  # the option kept
        (["sessions", "ls", "-limit", "5"], "unrecognized arguments: -limit 5\n"),
        (["sessions", "ls", "-jsn"], "unrecognized arguments: -jsn\n"),  # close to --json
        (["sessions", "ls", "999999"], "unrecognized arguments: 999999\n"),  # a count's size
        (["sessions", "ls", "\u2014api-key", "k"], "arguments: \u2014api-key ***\n"),  # its dash
    ],
)
def test_what_names_one_of_cascade_proxys_options_or_a_count_stays_quoted(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, err = _usage_error(argv, capsys, monkeypatch)
    assert said in err


@pytest.mark.parametrize(
    "argv",
    [
        ["sessions", "ls", "\u2014api-key", "hunter"],  # an editor's em dash for "--"
        ["sessions", "ls", "\u2013api-key", "hunter"],  # an en dash
        ["sessions", "ls", "\u2010\u2010api-key", "hunter"],  # Unicode hyphens
        ["sessions", "ls", "\u2212\u2212api-key", "hunter"],  # minus signs
        ["sessions", "ls", "\u2014token=hunter"],
        ["sessions", "ls", "\u2013u", "admin:hunter"],  # curl's -u, its dash pasted
        ["sessions", "ls", "\u2013uadmin:hunter"],
        ["sessions", "ls", "\u2212p", "hunter"],
        ["sessions", "ls", "--pw", "hunter"],  # a password's short names
        ["sessions", "ls", "--pwd", "hunter"],
        ["sessions", "ls", "--user", "admin:hunter"],  # curl's long -u
        ["sessions", "ls", "--login", "admin:hunter"],
    ],
)
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_lookalike_dash_or_a_passwords_short_name_still_marks_a_secret(
    argv: list[str],
    fmt: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A dash pasted from a chat or a document (``\u2014api-key``, no ASCII dash) named no
    option, and the short word after it, a value, was quoted as a mistyped name."""
    code, _, err = _usage_error(argv, capsys, monkeypatch, fmt)
    assert code == 2
    assert "hunter" not in err, err


def test_a_port_of_more_than_six_digits_is_named_by_its_length(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a count's (``quoted``): a long run of digits may be a key, all digits, pasted into
    the wrong option; ``--port`` quoted it whole."""
    _, _, err = _usage_error(["serve", "--port", "12345678901"], capsys, monkeypatch)
    assert "--port: a number of 11 digits is not a TCP port" in err and "1234567" not in err, err
