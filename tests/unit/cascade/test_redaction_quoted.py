"""A secret's quoted value, read to the quote that closes it past the ones it escapes."""

from __future__ import annotations

import json
import time

import pytest

from proxy.cascade.redaction import REDACTED, compile_patterns, redact

PATTERNS = compile_patterns(())


def test_a_value_ending_in_a_backslash_leaves_the_next_key_its_value() -> None:
    """A Windows path ends in a backslash before its quote (``"C:\\keys\\"``): read past
    that quote as an escaped one, the value ran on to the next string's opening quote and
    swallowed the next key, whose own value then went upstream unredacted."""
    text = 'SECRET_DIR="C:\\keys\\" API_KEY="abc123def"\n'
    assert redact(text, PATTERNS) == (f'SECRET_DIR="{REDACTED}" API_KEY="{REDACTED}"\n', 2)
    text = 'token_value="C:\\keys\\" token="t0k3nvalue"'
    assert redact(text, PATTERNS) == (f'token_value="{REDACTED}" token="{REDACTED}"', 2)


def _adversarial(k: int) -> str:
    """Keys before quoted values that never close where an escaped quote would: lone
    backslashes, escaped quotes, and runs of them with no closing quote after."""
    return (
        'password="\\' * 5_000 * k
        + ('secret: "' + '\\" x' * 120 + '"y') * 50 * k
        + ('token: "' + "\\\\" * 300 + '\\"' * 200) * 20 * k
        + ('\\"api_key\\": \\"' + '\\\\\\" x' * 120 + "\\\\") * 50 * k
    )


def test_reading_to_the_closing_quote_is_linear() -> None:
    """Each quoted value is read a bounded distance, past escaped quotes and backslashes, so
    four times the text costs about four times the CPU (backtracking would cost sixteen
    times or far more); a ratio in one test, so a loaded machine does not fail it."""
    costs = []
    for k in (1, 4):
        text = _adversarial(k)
        start = time.process_time()  # CPU time: other processes on the machine do not count
        redact(text, PATTERNS)
        costs.append(time.process_time() - start)
    assert costs[1] < 8 * max(costs[0], 1e-3) and costs[1] < 2.0, costs


def test_json_in_a_string_in_json_text_is_redacted_whole() -> None:
    """In JSON text (a call's arguments) a SecretString's own quotes are escaped twice
    (``\\"{\\\\\\"pass\\\\\\": …}\\"``): read to its first of them, the value's keys and the
    password after them went upstream. Read to its closing quote, it is redacted whole; a
    value ending in a backslash (``\\"C:\\\\\\"``) still ends at its quote."""
    inner = json.dumps({"user": "admin", "password": "hunter2x"})
    text = json.dumps({"cmd": json.dumps({"SecretString": inner, "Name": "prod/db"})})
    out, n = redact(text, PATTERNS)
    assert n == 1 and "hunter2x" not in out
    assert json.loads(json.loads(out)["cmd"]) == {"SecretString": REDACTED, "Name": "prod/db"}
    text = json.dumps({"cmd": 'SECRET_DIR="C:\\keys\\" API_KEY="abc123def"'})
    out, n = redact(text, PATTERNS)
    assert json.loads(out)["cmd"] == f'SECRET_DIR="{REDACTED}" API_KEY="{REDACTED}"'


def _nested(value: object, levels: int) -> str:
    """``value`` as JSON inside a JSON string, ``levels`` deep: a tool's JSON output held by
    a JSON tool result, that result logged as a request body's JSON."""
    text = json.dumps(value)
    for i in range(levels - 1):
        text = json.dumps({f"level{i}": text})
    return text


def _unnested(text: str, levels: int) -> object:
    out: object = json.loads(text)
    for i in reversed(range(levels - 1)):
        assert isinstance(out, dict)
        out = json.loads(out[f"level{i}"])
    return out


@pytest.mark.parametrize("levels", [2, 3])
def test_json_inside_json_strings_loses_its_secrets_and_stays_json(levels: int) -> None:
    """Two levels down a key's quotes are escaped once (``\\"api_key\\"``), three levels
    down twice (``\\\\\\"api_key\\\\\\"``): there the key was not read, and its value, a
    ``docker inspect``'s environment or a logged body's key, went upstream."""
    doc = {
        "api_key": "sk-live-4f9a8b7c",
        "password": 'pa"ss\\w0rd9',
        "Config": {"Env": ["DB_PASSWORD=hunter2x", "PATH=/usr/bin"]},
        "user": "admin",
    }
    out, n = redact(_nested(doc, levels), PATTERNS)
    assert n == 3 and not any(s in out for s in ("4f9a8b7c", "w0rd9", "hunter2x"))
    assert _unnested(out, levels) == {
        "api_key": REDACTED,
        "password": REDACTED,
        "Config": {"Env": [f"DB_PASSWORD={REDACTED}", "PATH=/usr/bin"]},
        "user": "admin",
    }
    assert redact(out, PATTERNS) == (out, 0)


@pytest.mark.parametrize("levels", [1, 2, 3])
@pytest.mark.parametrize("value", ["C:\\keys\\", "\\", 'a\\"b\\\\', 'say "hi"\\'])
def test_a_value_ending_in_a_backslash_inside_json_strings_ends_at_its_quote(
    levels: int, value: str
) -> None:
    """Three levels down a value's own backslash is four (``\\\\\\\\``), before its closing
    quote's three: read two at a time from the value's start, the last of them and that
    quote looked like an escaped quote (seven), the value ran on over ``", "`` to the next
    key's quote, and the innermost text was JSON no longer."""
    doc = {"password": value, "user": "admin", "token": "zz9secret"}
    out, n = redact(_nested(doc, levels), PATTERNS)
    assert n == 2 and "zz9secret" not in out
    assert _unnested(out, levels) == {"password": REDACTED, "user": "admin", "token": REDACTED}


@pytest.mark.parametrize("levels", [1, 2, 3])
@pytest.mark.parametrize("entry", ["DB_PASSWORD=C:\\keys\\", "token: x9\\\\", 'pwd=a\\"b'])
def test_an_unquoted_value_before_backslashes_and_a_quote_leaves_json(
    levels: int, entry: str
) -> None:
    """A value ending in a backslash, two levels down, is its own four backslashes before
    the string's escaped quote (five, then the quote): two of them taken left three, which
    escape that quote, and the text was JSON no longer. A run of backslashes before a
    quote is the value's whole or not at all."""
    doc = {"Env": [entry, "PATH=/usr/bin"], "api_key": "zz9secret"}
    out, n = redact(_nested(doc, levels), PATTERNS)
    assert n == 2 and "zz9secret" not in out
    env = _unnested(out, levels)["Env"]  # type: ignore[index]
    assert env[0].startswith(entry.split("=")[0].split(":")[0]) and REDACTED in env[0]
    assert env[1] == "PATH=/usr/bin"


@pytest.mark.parametrize("levels", [2, 3])
def test_name_value_pairs_inside_json_strings_lose_their_secrets(levels: int) -> None:
    """A pod's ``env`` as ``kubectl get -o json`` prints it, inside a JSON tool result
    inside a logged body: three levels down the pairs' quotes are escaped twice, where the
    entries between a name and its value were not read and the value went upstream."""
    doc = {
        "env": [
            {"name": "DB_PASSWORD", "value": "hunter2xq"},
            {"value": "s3cr3t-v4lue", "name": "API_TOKEN"},
            {"name": "Authorization", "value": "Basic aHVudGVyMnhx"},
        ],
        "Tags": [{"Key": "api_token", "Value": "t0k3n-v4lue"}],
    }
    out, n = redact(_nested(doc, levels), PATTERNS)
    assert n == 4, out
    assert _unnested(out, levels) == {
        "env": [
            {"name": "DB_PASSWORD", "value": REDACTED},
            {"value": REDACTED, "name": "API_TOKEN"},
            {"name": "Authorization", "value": REDACTED},
        ],
        "Tags": [{"Key": "api_token", "Value": REDACTED}],
    }


def test_twice_escaped_values_are_read_in_linear_time() -> None:
    """Hostile runs after keys whose quotes are escaped twice: backslashes with no closing
    quote, escaped quotes one short of closing, keys back to back; each 100,000 characters."""
    key = '\\\\\\"api_key\\\\\\": \\\\\\"'
    for hostile in (
        key + "\\" * 100_000,
        key + '\\\\\\\\\\\\\\"x' * 12_000,
        key * 6_000,
        "PASSWORD=a\\\\" * 9_000 + '\\\\\\"',
    ):
        start = time.process_time()  # CPU time: other processes on the machine do not count
        redact(hostile, PATTERNS)
        assert time.process_time() - start < 0.2, hostile[:40]
