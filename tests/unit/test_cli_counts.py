"""A ``--limit``, ``--offset`` or fact id the API can never take is a usage error (exit 2,
naming the option), as ``--limit abc`` is, not a request whose 400 exits 1 naming the API's
``query.limit``: the user typed an option, and it is the option that was wrong."""

from __future__ import annotations

import pytest

from proxy.cli import main

CASES = [
    (["sessions", "ls", "--limit", "0"], "argument --limit: 0 is not a count of 1 or more"),
    (["sessions", "ls", "--offset", "-1"], "argument --offset: -1 is not a count of 0 or more"),
    (["sessions", "messages", "s1", "--limit", "-3"], "argument --limit: -3 is not a count"),
    (["sessions", "messages", "s1", "--offset=-2"], "argument --offset: -2 is not a count"),
    (["sessions", "ls", "--limit", "abc"], "argument --limit: not a whole number, which a count"),
    (["memory", "rm", "0"], "argument ID: 0 is not a count of 1 or more"),
    (["sessions", "ls", "--offset", ""], "argument --offset: not a whole number, which a count"),
    (["memory", "rm", str(2**63)], f"ID: a number of 19 digits is above {2**63 - 1}, the largest"),
    (["sessions", "ls", "--offset", str(2**63)], "--offset: a number of 19 digits is above"),
    (["sessions", "ls", "--limit", "999999"], "--limit: 999999 is above 1000"),  # a count: quoted
    (["sessions", "messages", "s1", "--offset", "1" + "0" * 30], "--offset: a number of 31 digits"),
]


@pytest.mark.parametrize(("argv", "said"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_a_count_out_of_range_is_a_usage_error(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = ["--url", "http://127.0.0.1:1"]  # nothing listens: a request would say so instead
    with pytest.raises(SystemExit) as usage:
        main([*argv, *url])
    assert usage.value.code == 2
    err = capsys.readouterr().err
    assert said in err
    assert "cannot reach" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["sessions", "ls", "--limit", "1", "--offset", "0"],
        ["sessions", "ls", "--offset", str(2**63 - 1)],
        ["memory", "rm", str(2**63 - 1)],
    ],
    ids=["smallest", "largest offset", "largest fact id"],
)
def test_the_counts_in_bounds_still_go_to_the_proxy(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([*argv, "--url", "http://127.0.0.1:1"])
    assert code == 3  # no proxy answered: the counts passed as usage
    assert "cannot reach" in capsys.readouterr().err


@pytest.mark.parametrize("given", ["K9xq2vTz", "hunter", "9" * 20, "4.5e3"])
def test_a_fact_id_that_is_no_count_is_a_usage_error_that_does_not_quote_it(
    given: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``memory rm K``: a key pasted in the id's place was quoted back whole (``K is not a
    count``) into a terminal or a CI log; a number of more than a few digits may be a key."""
    with pytest.raises(SystemExit) as usage:
        main(["memory", "rm", given, "--url", "http://127.0.0.1:1"])
    assert usage.value.code == 2
    err = capsys.readouterr().err
    assert "cascade-proxy memory rm: error: argument ID: " in err
    assert given not in err, err
