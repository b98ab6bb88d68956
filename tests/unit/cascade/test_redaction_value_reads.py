"""A secret's value where a reading of the text around it could have let it through: an
anchor, a tag or an alias that YAML alone writes (after a colon, and before a value), a value
quoted otherwise than its key (``{'password': "…"}`` in a call's JSON arguments), and an AWS
secret key after a blank (``aws configure set aws_secret_access_key …``)."""

from __future__ import annotations

import json

import pytest

from proxy.cascade.redaction import REDACTED, compile_patterns, redact
from tests.unit.linear import assert_linear

PATTERNS = compile_patterns(())
AWS = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("PASSWORD=!Passw0rd  # prod", f"PASSWORD={REDACTED}  # prod"),
        ("password: !Passw0rd # prod", f"password: {REDACTED} # prod"),
        ("password: &Xk9pq2 \nuser: app", f"password: {REDACTED} \nuser: app"),
        ("DB_PASSWORD=&abc123 ", f"DB_PASSWORD={REDACTED} "),
        ("{password: &Xk9pq2 , user: y}", f"{{password: {REDACTED} , user: y}}"),
        ("PASSWORD=!Xk9 more", f"PASSWORD={REDACTED} more"),
        ("PASSWORD=*abc123", f"PASSWORD={REDACTED}"),
        ("password = *Xy9zQ", f"password = {REDACTED}"),
    ],
)
def test_a_value_that_only_looks_like_an_anchor_a_tag_or_an_alias_is_redacted(
    text: str, kept: str
) -> None:
    assert redact(text, PATTERNS) == (kept, 1)


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        (
            "password: !<tag:yaml.org,2002:str> hunter2",
            f"password: !<tag:yaml.org,2002:str> {REDACTED}",
        ),
        ("password: !!python/str hunter2", f"password: !!python/str {REDACTED}"),
        ("password: !vault |\n  $ANSIBLE_VAULT;1.1\nuser: x", None),
    ],
)
def test_a_value_after_a_verbatim_or_a_namespaced_tag_is_redacted(
    text: str, kept: str | None
) -> None:
    out, n = redact(text, PATTERNS)
    assert n == 1 and "hunter2" not in out and "ANSIBLE_VAULT" not in out
    assert kept is None or out == kept


@pytest.mark.parametrize(
    ("code", "secret"),
    [
        ("DB = {'password': \"hunter2\"}", "hunter2"),
        ("cfg = {\"password\": 'hunter2'}", "hunter2"),
        ("headers = {'X-Api-Key': \"k-93fa7Q\"}", "k-93fa7Q"),
        ('log(\'"password": \\"hunter2\\"\')', "hunter2"),
    ],
)
def test_a_value_quoted_otherwise_than_its_key_in_a_calls_arguments_is_redacted(
    code: str, secret: str
) -> None:
    text = json.dumps({"path": "app.py", "content": code})
    out, n = redact(text, PATTERNS)
    assert n == 1 and secret not in out
    assert json.loads(out)["content"] == code.replace(secret, REDACTED)


@pytest.mark.parametrize(
    "text",
    [
        f"aws configure set aws_secret_access_key {AWS}",
        f"aws configure set default.aws_secret_access_key {AWS} --profile x",
        f"AWS Secret Access Key [None]: {AWS}",
        f"AWS Secret Access Key [****************EKEY]: {AWS}",
    ],
)
def test_an_aws_secret_key_after_a_blank_or_the_cli_prompt_is_redacted(text: str) -> None:
    out, n = redact(text, PATTERNS)
    assert (out, n) == (text.replace(AWS, REDACTED), 1)


@pytest.mark.parametrize(
    "doc",
    [
        {"note": 'x "api_key": \'a', "b": "c'"},
        {"l": ['"token": \'', {"v": "'"}]},
    ],
)
def test_a_single_quoted_value_across_a_strings_end_is_not_read(doc: dict[str, object]) -> None:
    text = json.dumps(doc)
    assert json.loads(redact(text, PATTERNS)[0]) == doc


@pytest.mark.parametrize(
    ("doc", "secret"),
    [
        ({"name": "DB_PASSWORD", "value": "hunter2"}, "hunter2"),
        ({"value": "hunter2", "name": "api_key"}, "hunter2"),
        ({"authorization": "Basic dXNlcjpwYXNz"}, "dXNlcjpwYXNz"),
    ],
)
def test_a_pair_or_a_header_four_json_levels_deep_is_redacted(
    doc: dict[str, str], secret: str
) -> None:
    texts = [json.dumps(doc)]
    for _ in range(3):
        texts.append(json.dumps({"l": texts[-1]}))
    out, n = redact(texts[-1], PATTERNS)
    assert n == 1 and secret not in out
    inner = out
    for _ in range(3):
        inner = json.loads(inner)["l"]
    assert json.loads(inner) == {k: v.replace(secret, REDACTED) for k, v in doc.items()}


@pytest.mark.parametrize(
    "text",
    [
        "function f(opts: {token: AuthToken, retries: number}) {}",
        "type Opts = {token: AuthToken, retries?: number[]};",
        "let o: {apiKey: ApiKey, url: string} = x;",
    ],
)
def test_a_type_literal_on_one_line_with_a_builtin_typed_entry_is_kept(text: str) -> None:
    assert redact(text, PATTERNS) == (text, 0)


def test_a_flow_mappings_type_reading_is_linear() -> None:
    assert_linear(lambda n: ("{password: AbcDef, " + "a: b, " * n + "\n") * 2, 20_000)
    assert_linear(lambda n: "password: AbcDef," * n, 6_000)


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("SECRET_ENV=hunter2abc", f"SECRET_ENV={REDACTED}"),
        ("PASSWORD_ENV=Tr0ub4dor&3", f"PASSWORD_ENV={REDACTED}"),
        ("export TOKEN_ENV=ghx9ZkQ2mP7vR4tY", f"export TOKEN_ENV={REDACTED}"),
        ("API_KEY_ENV=a8f5f167f44f4964e6c998dee827110c", f"API_KEY_ENV={REDACTED}"),
        ("GITHUB_TOKEN_ENV: K7P2QX9LMN4RT8VW", f"GITHUB_TOKEN_ENV: {REDACTED}"),
        ("token.env: 8c1f2d9e7a6b5c4d", f"token.env: {REDACTED}"),
        ('{"secret_env": "pl41nT3xt-s3cret"}', f'{{"secret_env": "{REDACTED}"}}'),
        ('{"apiKeyEnv": "hunter2abc"}', f'{{"apiKeyEnv": "{REDACTED}"}}'),
        ("tokenEnv: correcthorse9", f"tokenEnv: {REDACTED}"),
        (
            '{"name": "DB_PASSWORD_ENV", "value": "s3cr3tvalue9"}',
            f'{{"name": "DB_PASSWORD_ENV", "value": "{REDACTED}"}}',
        ),
    ],
)
def test_a_key_ending_in_env_holds_its_secret_as_any_key_does(text: str, kept: str) -> None:
    """A key ending in ``env`` is read as a secret's key: ``SECRET_ENV=…``, ``token.env:
    …`` and a key pasted into ``API_KEY_ENV`` hold the secret in tool output, and naming a
    variable (Cascade's ``apiKeyEnv``) is told by the value, not the key (a variable's name in
    CONSTANT_CASE is left, as for any key)."""
    assert redact(text, PATTERNS) == (kept, 1)
