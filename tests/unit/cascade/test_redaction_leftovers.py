"""Values the keyed pass read short or long: a flow mapping's value of several words, a value
after an anchor named like a Rust keyword (``&dyn``), an HTML tag after a value."""

from __future__ import annotations

import json

import pytest

from proxy.cascade.redaction import REDACTED, compile_patterns, redact

PATTERNS = compile_patterns(())


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("{password: Hunter Two, x: y}", f"{{password: {REDACTED}, x: y}}"),
        ("{password: Hunter Two}", f"{{password: {REDACTED}}}"),
        (
            "- {name: prod, api_key: correct horse battery staple, region: eu}",
            f"- {{name: prod, api_key: {REDACTED}, region: eu}}",
        ),
        ("db: {token: a b c , user: app}", f"db: {{token: {REDACTED} , user: app}}"),
    ],
)
def test_a_flow_mappings_value_of_several_words_is_redacted_whole(text: str, kept: str) -> None:
    out, n = redact(text, PATTERNS)
    assert (out, n) == (kept, 1)
    assert redact(out, PATTERNS) == (out, 0)


@pytest.mark.parametrize(
    "text",
    [
        # prose and code: the words after the first are no flow mapping's entry
        "password: wrong for user bob, retry}",
        "error: password: wrong for user bob, then {retry}",
        "function login(password: Secret Thing, user: App)",
    ],
)
def test_words_after_a_value_outside_a_flow_mapping_are_kept(text: str) -> None:
    out, _ = redact(text, PATTERNS)
    assert "user bob" in out or "Thing" in out


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("password: &dyn hunter2", f"password: &dyn {REDACTED}"),
        ("password: &impl hunter2\nuser: app", f"password: &impl {REDACTED}\nuser: app"),
        ("password: &mut hunter2", f"password: &mut {REDACTED}"),
        ("token: &dyn !!str hunter2", f"token: &dyn !!str {REDACTED}"),
        ("password: &dyn 'hunter2'", f"password: &dyn '{REDACTED}'"),
    ],
)
def test_a_value_after_an_anchor_named_like_a_rust_keyword_is_redacted(
    text: str, kept: str
) -> None:
    out, n = redact(text, PATTERNS)
    assert (out, n) == (kept, 1)


@pytest.mark.parametrize(
    "text",
    [
        "    token: &dyn TokenSource,",
        "fn f(token: &dyn std::io::Read, secret: &impl AsRef<str>) -> bool",
        "fn f(password: &mut String, token: &mut [u8], secret: &mut dyn Write)",
        "fn f(token: &mut self) {}",
    ],
)
def test_a_rust_reference_type_is_kept(text: str) -> None:
    assert redact(text, PATTERNS) == (text, 0)


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("password=hunter2<br>next", f"password={REDACTED}<br>next"),
        ("password: hunter2<br/>next", f"password: {REDACTED}<br/>next"),
        ("token=abc123<b>bold</b>", f"token={REDACTED}<b>bold</b>"),
        ("<td>api_key=s3cr3t<b>new</b></td>", f"<td>api_key={REDACTED}<b>new</b></td>"),
        ("PASSWORD=p<a>ss>w0rd", f"PASSWORD={REDACTED}"),
        ("password=hunter2<span class=x>ok</span>", f"password={REDACTED}<span class=x>ok</span>"),
        # not a tag: the secret's own characters
        ("password: Abc<x>yz9!", f"password: {REDACTED}"),
        ("password: pa<bx>ss", f"password: {REDACTED}"),
    ],
)
def test_an_html_tag_after_a_value_is_kept_and_the_value_redacted(text: str, kept: str) -> None:
    out, n = redact(text, PATTERNS)
    assert (out, n) == (kept, 1)
    assert redact(out, PATTERNS) == (out, 0)


@pytest.mark.parametrize(
    "doc",
    [
        {"a": "token: 'x", "b": "y'"},
        {"n": "password='9,a", "m": ["z'"]},
        {"note": [{"k": "api_key: '>\\", "user": "a'b"}], "v": "c"},
        {"x": {"y": "secret: 'q"}, "z": "w'"},
    ],
)
@pytest.mark.parametrize("levels", [1, 2, 3])
def test_a_single_quoted_value_across_a_strings_end_stays_json(
    doc: dict[str, object], levels: int
) -> None:
    text = json.dumps(doc)
    for _ in range(levels - 1):
        text = json.dumps({"l": text})
    out, n = redact(text, PATTERNS)
    assert n >= 1
    inner = json.loads(out)
    for _ in range(levels - 1):
        inner = json.loads(inner["l"])
    assert REDACTED in json.dumps(inner)


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("password: 'ab\"c, d'", f"password: '{REDACTED}'"),
        ("PASSWORD='x\", y'", f"PASSWORD='{REDACTED}'"),
        ("{'password': 'x y', 'u': 'b'}", f"{{'password': '{REDACTED}', 'u': 'b'}}"),
        # in JSON text, a quote escaped once is the value's own where its closing quote is
        # followed by its string's bare end: no string ends inside it
        (
            json.dumps({"cmd": 'password: \'p@ss", "x": 1\''}),
            json.dumps({"cmd": f"password: '{REDACTED}'"}),
        ),
        (
            json.dumps({"l": json.dumps({"cmd": 'password: \'p@ss", "x": "1"}\''})}),
            json.dumps({"l": json.dumps({"cmd": f"password: '{REDACTED}'"})}),
        ),
    ],
)
def test_a_single_quoted_value_holding_a_double_quote_is_redacted_whole(
    text: str, kept: str
) -> None:
    assert redact(text, PATTERNS) == (kept, 1)


@pytest.mark.parametrize(
    "text",
    [
        "def unix_getpass(prompt='Password: ', stream=None):",
        "child.expect('Password:')",
        'print(json.dumps({"prompt": "Password: "}), \'x\')',
    ],
)
def test_a_prompt_ending_in_a_key_before_a_single_quote_is_kept(text: str) -> None:
    assert redact(text, PATTERNS) == (text, 0)
