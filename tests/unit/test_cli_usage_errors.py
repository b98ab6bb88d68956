"""What ``sessions`` and ``memory`` refuse before any request, and how a usage error quotes
the command line: a ``--limit`` past the API's largest page, a URL with blanks around it, a
key given with no option, a count's value, and the corrected command of a misplaced key."""

from __future__ import annotations

import typing

import pytest

from proxy import cli_args
from proxy.api.memory import list_facts, list_suggestions
from proxy.api.sessions import list_messages, list_sessions
from proxy.cli import main
from tests.unit.readme import TEXT

_KEY = "K9xq2vTz"


@pytest.fixture(autouse=True)
def _no_key_or_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CASCADE_URL", "CASCADE_API_KEY", "OPENAI_API_KEY", "CASCADE_LOG_FORMAT"):
        monkeypatch.delenv(name, raising=False)


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as usage:
        main(argv)
    assert usage.value.code == 2
    return capsys.readouterr().err


def _api_largest(route: typing.Any) -> int:
    """The ``le`` of a list route's ``limit`` query parameter."""
    query = typing.get_type_hints(route, include_extras=True)["limit"].__metadata__[0]
    (most,) = [m.le for m in query.metadata if hasattr(m, "le")]
    return int(most)


def test_the_cli_s_largest_pages_are_the_api_s() -> None:
    assert _api_largest(list_sessions) == cli_args.LIST_MAX
    assert _api_largest(list_facts) == _api_largest(list_suggestions) == cli_args.LIST_MAX
    assert _api_largest(list_messages) == cli_args.MESSAGES_MAX


@pytest.mark.parametrize(
    ("command", "most"),
    [
        (["sessions", "ls"], cli_args.LIST_MAX),
        (["sessions", "messages", "s1"], cli_args.MESSAGES_MAX),
        (["memory", "ls"], cli_args.LIST_MAX),
        (["memory", "suggestions"], cli_args.LIST_MAX),
    ],
)
def test_a_limit_above_the_api_s_largest_page_is_a_usage_error(
    command: list[str], most: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was sent, and the API's 400 (exit 1) named ``query.limit``; the largest is taken."""
    argv = [*command, "--url", "http://127.0.0.1:1"]
    err = _refused([*argv, "--limit", str(most + 1)], capsys)
    assert f"argument --limit: {most + 1} is above {most}, the largest the API takes" in err
    assert main([*argv, "--limit", str(most)]) == 3  # sent: no proxy listens on port 1


@pytest.mark.parametrize("url", [" http://127.0.0.1:1", "http://127.0.0.1:1 ", "\thttp://h:1\n"])
@pytest.mark.parametrize("flag", [True, False])
def test_a_url_with_blanks_around_it_is_refused_not_trimmed(
    url: str, flag: bool, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """httpx read a trailing blank as the port's ("could not be cast to integer") and a
    script's stray one went unseen trimmed; the line names where the URL came from."""
    if not flag:
        monkeypatch.setenv("CASCADE_URL", url)
    assert main(["sessions", "ls", *(["--url", url] if flag else [])]) == 2
    where = "--url" if flag else "CASCADE_URL"
    err = capsys.readouterr().err
    assert err == f"cascade-proxy sessions ls: the URL ({where}) has blanks around it (a " + (
        "space, a tab or a line break), which no URL has; give it without\n"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["sessions", "ls", _KEY],  # the key of no known shape, given without --api-key
        ["--json", "sessions", "ls", _KEY],  # no hint: its command would be refused too
        ["memory", "ls", "--json", _KEY],  # after a flag: no value of it
        [_KEY, "sessions", "ls"],  # read as the command's name: argparse's invalid choice
        ["sessions", _KEY, "ls"],  # and as the action's
    ],
)
def test_an_argument_nothing_marks_is_not_quoted(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    err = _refused(argv, capsys)
    assert _KEY not in err, err
    assert "arguments: ***" in err or "arguments: --json ***" in err or "choice: '***'" in err
    assert "*** is an argument no option takes, not quoted: it may be a key" in err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["sessions", "ls", "5"], "unrecognized arguments: 5\n"),  # a number: --limit meant
        (["sessions", "ls", "--bogus", "value-shown"], "arguments: --bogus value-shown\n"),
        (["sessions", "ls", "--max-tokens", "500"], "arguments: --max-tokens 500\n"),
        (["sessions", "ls", "--num-keys", "120"], "arguments: --num-keys 120\n"),
        (["sessions", "ls", "-json"], "unrecognized arguments: -json\n"),  # one dash, a word
        (["sessions", "ls", "all"], "unrecognized arguments: all\n"),  # --all meant
        (["memory", "add", "my", "fact", "here"], "unrecognized arguments: fact here\n"),
        (["sessions", "ls", "-limit", "5"], "unrecognized arguments: -limit 5\n"),
        (["sesions", "ls"], "invalid choice: 'sesions'"),  # a command's name mistyped
        (["run"], "invalid choice: 'run'"),  # a word: what make's target is called
        (["sessions", "list"], "invalid choice: 'list'"),
        (["--keyfile", "k.pem", "serve"], "invalid choice: 'k.pem'"),  # the option's value
    ],
)
def test_what_names_itself_or_a_count_is_quoted(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A count's option holds a credential's word (``--max-tokens``) and no secret; a
    mistyped command's name is a word, or close to a name."""
    err = _refused(argv, capsys)
    assert said in err and " not quoted" not in err, err


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["--api-key", _KEY, "sessions", "ls"], "sessions ls --api-key ***"),
        (["--api-key", f"-{_KEY}", "sessions", "ls"], "sessions ls --api-key ***"),  # no hint
        (["--api-key", "option", "sessions", "ls"], "sessions ls --api-key ***"),  # a hint's word
        (["--api-key=" + _KEY, "--json", "sessions", "ls"], "sessions ls --api-key=*** --json"),
        (["--api-key", f"Bearer {_KEY}", "memory", "ls"], "memory ls --api-key 'Bearer ***'"),
        (
            ["--url", f"http://admin:{_KEY}@h:1", "--api-key", _KEY, "sessions", "ls"],
            "sessions ls --url 'http://admin:***@h:1' --api-key ***",
        ),
        (["--url", f"http://{_KEY}@h:1", "sessions", "ls"], "sessions ls --url 'http://***@h:1'"),
    ],
)
def test_the_hint_for_a_misplaced_key_is_the_corrected_command_with_the_key_masked(
    argv: list[str], hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Built from the command line with each secret masked in its token, not masked after:
    a key that is a word of the hint (``option``) masked the hint's own word, and a value or
    a URL masked whole lost the command's shape (the scheme, the user, the host)."""
    err = _refused(argv, capsys)
    assert f" goes after the command's name: cascade-proxy {hint})\n" in err, err
    assert "(an option of " in err
    assert _KEY not in err


def test_no_hint_names_a_command_line_refused_in_turn(capsys: pytest.CaptureFixture[str]) -> None:
    """``--json sessions ls K``: moved after ``ls``, ``--json`` still leaves ``K`` unplaced."""
    assert "goes after" not in _refused(["--json", "sessions", "ls", _KEY], capsys)


@pytest.mark.parametrize(
    ("command", "name"),
    [
        (["sessions", "show"], "ID"),
        (["sessions", "branch"], "ID"),
        (["memory", "rm"], "ID"),
        (["memory", "accept"], "ID"),
        (["memory", "add"], "TEXT"),
    ],
)
def test_a_positional_is_named_as_readme_names_it(
    command: list[str], name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """README's ``show ID``, ``add [--scope] TEXT``: the usage and its errors said ``id``."""
    assert f"`{command[1]} {name}" in " ".join(TEXT.split()) or f"] {name}`" in TEXT
    assert f"arguments are required: {name}\n" in _refused(command, capsys)
