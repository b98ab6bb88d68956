"""A secret's value as YAML and code write it around the secret: an anchor or a tag before it
(``password: &pw hunter2``), angle brackets inside it (``Abc<x>yz9!``), a flow mapping's
entry (``{password: SuperSecret, user: app}``). Each is the secret, whole."""

from __future__ import annotations

import json

import pytest

from proxy.cascade.redaction import REDACTED, compile_patterns, redact
from tests.unit.linear import assert_linear

PATTERNS = compile_patterns(())


def _assert_linear(head: str, unit: str, count: int, tail: str) -> None:
    """``count`` repeats of ``unit`` between ``head`` and ``tail`` are read in linear time."""
    assert_linear(lambda n: head + unit * n + tail, count)


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("password: &pw hunter2", f"password: &pw {REDACTED}"),
        (
            "db:\n  password: &db_pw hunter2\n  user: app",
            f"db:\n  password: &db_pw {REDACTED}\n  user: app",
        ),
        ('password: &pw "hunter2"', f'password: &pw "{REDACTED}"'),
        ("api_key: !!str s3cr3t-v4lue", f"api_key: !!str {REDACTED}"),
        ("password: &pw |\n  hunter2\nuser: app", f"password: &pw |\n  {REDACTED}\nuser: app"),
        ("password: Abc<x>yz9!", f"password: {REDACTED}"),
        ("PASSWORD=p<a>ss>w0rd\nUSER=app", f"PASSWORD={REDACTED}\nUSER=app"),
    ],
)
def test_a_value_after_an_anchor_or_with_angle_brackets_is_redacted_whole(
    text: str, kept: str
) -> None:
    out, n = redact(text, PATTERNS)
    assert (out, n) == (kept, 1)
    assert redact(out, PATTERNS) == (out, 0)


@pytest.mark.parametrize(
    "text",
    [
        "token: <your-token-here>",
        "password: <password>",
        "fn f(password: &mut String, token: &'a str) -> bool",
        "    token: &dyn TokenSource,",
        "  authToken: Observable<string>;",
        "<td>password: </td>",
        "api_key: *default_key",
    ],
)
def test_a_placeholder_a_reference_or_a_type_is_kept(text: str) -> None:
    assert redact(text, PATTERNS) == (text, 0)


@pytest.mark.parametrize(
    "hostile",
    [
        ("password: ", "&a ", 30_000, ""),
        ("", "password: &a !b ", 10_000, ""),
        ("token: a", "<b>", 30_000, ""),
        ("", "token: a<", 12_000, ""),
    ],
)
def test_anchors_and_angle_brackets_are_read_in_linear_time(
    hostile: tuple[str, str, int, str],
) -> None:
    _assert_linear(*hostile)


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("{password: SuperSecret, user: app}", f"{{password: {REDACTED}, user: app}}"),
        ("db: {user: app, password: SuperSecret, port: 5432}", None),
        ("- {name: prod, api_key: CorrectHorse, region: eu}", None),
    ],
)
def test_a_flow_mappings_value_is_no_type(text: str, kept: str | None) -> None:
    out, n = redact(text, PATTERNS)
    assert n == 1
    assert out == (kept or text.replace("SuperSecret", REDACTED).replace("CorrectHorse", REDACTED))


@pytest.mark.parametrize(
    "text",
    [
        "function login(password: SuperSecret, user: App): void {}",
        "type Creds = { password: SuperSecret; user: App }",
        "const creds: {\n  password: SuperSecret,\n  user: App,\n} = load();",
        "login(opts: {password: SuperSecret, cb: (e: Err) => void})",
    ],
)
def test_a_type_in_a_parameter_list_or_a_type_literal_is_kept(text: str) -> None:
    assert redact(text, PATTERNS) == (text, 0)


@pytest.mark.parametrize("levels", [1, 2, 3, 4])
def test_a_key_and_value_with_quotes_escaped_up_to_three_times_are_redacted(levels: int) -> None:
    doc: object = {"password": 'hunter2 "x" \\ y', "user": "app"}
    texts = [json.dumps(doc)]
    for _ in range(levels - 1):
        texts.append(json.dumps({"l": texts[-1]}))
    out, n = redact(texts[-1], PATTERNS)
    assert n == 1 and "hunter2" not in out
    inner = json.loads(out)
    for _ in range(levels - 1):
        inner = json.loads(inner["l"])
    assert inner == {"password": REDACTED, "user": "app"}
    assert redact(out, PATTERNS) == (out, 0)


def test_a_block_scalar_two_mappings_down_is_redacted() -> None:
    text = "a:\n  b:\n    password: |\n      line1\n      line2\n    user: x\n"
    assert redact(text, PATTERNS) == (
        f"a:\n  b:\n    password: |\n      {REDACTED}\n    user: x\n",
        1,
    )


@pytest.mark.parametrize("levels", [1, 2])
def test_a_block_scalar_in_a_json_string_in_json_text_is_redacted_and_stays_json(
    levels: int,
) -> None:
    yaml = 'db:\n  password: |\n    line1 "s3cr3t"\n    line2 \\ s3cr3t\n  user: app\n'
    text = yaml
    for _ in range(levels):
        text = json.dumps({"f": text})
    out, n = redact(text, PATTERNS)
    assert n == 1 and "s3cr3t" not in out
    inner = out
    for _ in range(levels):
        inner = json.loads(inner)["f"]
    assert inner == f"db:\n  password: |\n    {REDACTED}\n  user: app\n"
    assert redact(out, PATTERNS) == (out, 0)


@pytest.mark.parametrize(
    "hostile",
    [
        ("password: |\\\\n", "  a\\\\\\\\\\\\n", 20_000, ""),
        ("", "password: |\\\\n  token: |\\\\n  x\\\\n", 5_000, ""),
        ('\\\\\\\\\\\\\\"password\\\\\\\\\\\\\\": \\\\\\\\\\\\\\"', "a\\\\", 30_000, ""),
        ('password: "', ", ", 50_000, '"'),
        ('password=\\"', '}], \\"', 20_000, ""),
    ],
)
def test_escaped_blocks_and_quotes_are_read_in_linear_time(
    hostile: tuple[str, str, int, str],
) -> None:
    _assert_linear(*hostile)


@pytest.mark.parametrize(
    "doc",
    [
        {"a": 'x "api_key": ', "b": "y"},
        {"note": "a token: ", "Key": "/"},
        {"note": "password=", "user": "app"},
        {"v": 'ab \\"secret\\": ', "w": ["c"]},
        {"n": [{"u": {"a": "x", "b": "token: "}}], "api_key": "}"},
    ],
)
@pytest.mark.parametrize("levels", [1, 2, 3])
def test_a_string_ending_in_a_keys_text_stays_json(doc: dict[str, object], levels: int) -> None:
    text = json.dumps(doc)
    for _ in range(levels - 1):
        text = json.dumps({"l": text})
    out, _ = redact(text, PATTERNS)
    inner = json.loads(out)
    for _ in range(levels - 1):
        inner = json.loads(inner["l"])
    assert inner == doc
