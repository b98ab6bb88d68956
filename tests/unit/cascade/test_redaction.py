from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings, strategies as st

from proxy.cascade.redaction import (
    DEFAULT_PATTERNS,
    REDACTED,
    compile_patterns,
    redact,
    redact_message,
)
from proxy.cascade.redaction_calls import redact_written
from proxy.cascade.text import content_text
from tests.unit.cascade.builders import tool, user
from tests.unit.cascade.fake_credentials import (
    ANTHROPIC,
    AWS_ID,
    AWS_SECRET,
    GITHUB,
    GITHUB_PAT,
    GITLAB,
    GOOGLE,
    HUGGINGFACE,
    JWT,
    NPM,
    OPENAI,
    OPENAI_PROJ,
    PEM,
    SLACK,
    STRIPE,
    STRIPE_RK,
)

PATTERNS = compile_patterns(())


@pytest.mark.parametrize(
    "secret",
    [
        OPENAI,
        OPENAI_PROJ,
        ANTHROPIC,
        AWS_ID,
        GITHUB,
        GITHUB_PAT,
        SLACK,
        GOOGLE,
        STRIPE,
        STRIPE_RK,
        JWT,
        PEM,
        HUGGINGFACE,
        GITLAB,
        NPM,
    ],
)
def test_token_shapes_are_redacted(secret: str) -> None:
    out, n = redact(f"before {secret} after", PATTERNS)
    assert secret not in out
    assert n == 1
    assert out == f"before {REDACTED} after"


def test_unterminated_pem_block_is_redacted() -> None:
    text = "key:\n-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nMIIEvQ"
    out, n = redact(text, PATTERNS)
    assert "MIIEvQ" not in out and n == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("password=hunter22", f"password={REDACTED}"),
        ('{"password": "correct horse"}', f'{{"password": "{REDACTED}"}}'),
        ("DB_PASSWORD: s3cr3t!", f"DB_PASSWORD: {REDACTED}"),
        ("api_key = 'abc123xyz'", f"api_key = '{REDACTED}'"),
        ("export GITHUB_TOKEN=abcdef123", f"export GITHUB_TOKEN={REDACTED}"),
        (f"aws_secret_access_key = {AWS_SECRET}", f"aws_secret_access_key = {REDACTED}"),
        ("Authorization: Bearer abcdefgh12345678", f"Authorization: Bearer {REDACTED}"),
        (
            "curl -H 'authorization: bearer tok_12345678'",
            f"curl -H 'authorization: bearer {REDACTED}'",
        ),
        ("Authorization: Basic dXNlcjpwYXNz", f"Authorization: Basic {REDACTED}"),
        ("PASSWORD=#n0t-a-comment", f"PASSWORD={REDACTED}"),
        ("password: strong-one", f"password: {REDACTED}"),
        ("token: %sx9", f"token: {REDACTED}"),
        # a plain word, or a word with digits, is a password, not a variable's name
        ("Password: theagentcompany", f"Password: {REDACTED}"),
        ("Old token: token1", f"Old token: {REDACTED}"),
        ("password=Hunter2Go", f"password={REDACTED}"),
        ("secret: xK9mQ2vLp", f"secret: {REDACTED}"),
        ("api_key=abc_123_def", f"api_key={REDACTED}"),
        # a URL's password (a .env file, a clone command): the user and host stay
        (
            "DATABASE_URL=postgresql://app:Hunter2pass@db.internal:5432/app",
            f"DATABASE_URL=postgresql://app:{REDACTED}@db.internal:5432/app",
        ),
        ("redis://:s3cretPW99@cache:6379/0", f"redis://:{REDACTED}@cache:6379/0"),
        (
            "/cb?token_type=bearer&access_token=x9Yz81kq",
            f"/cb?token_type=bearer&access_token={REDACTED}",
        ),
        (
            "git clone https://deploy:ghx9Qz71wLkd@git.example.com/r.git",
            f"git clone https://deploy:{REDACTED}@git.example.com/r.git",
        ),
        # a key after a colon that is no ARN's resource type (PowerShell's environment)
        ('$env:SECRET = "hunter2x"', f'$env:SECRET = "{REDACTED}"'),
        ("$Env:Token=hunter2x", f"$Env:Token={REDACTED}"),
        # an annotated assignment: the builtin type is no value, the literal after it is
        ('password: str = "hunter2x"', f'password: str = "{REDACTED}"'),
        ('const apiToken?: string = "hunter2x";', f'const apiToken?: string = "{REDACTED}";'),
        ('val token: String? = "hunter2x"', f'val token: String? = "{REDACTED}"'),
    ],
)
def test_assignments_keep_the_key_and_redact_the_value(text: str, expected: str) -> None:
    out, n = redact(text, PATTERNS)
    assert out == expected
    assert n == 1


@pytest.mark.parametrize(
    "text",
    [
        '{"prompt_tokens": 523, "max_tokens": 100}',
        "use_password: true",
        "the task-force ran a risk-assessment-framework-document-v2",
        "token_count: 12.5",
        "ordinary prose about passwords and tokens",
        # source code that names a token or password (a coding agent reads and edits it)
        "token = cast(MetaSegment, token)",
        "def f(tokens: Sequence[BaseSegment]) -> None:",
        "csrfToken = document.querySelector('meta')",
        "def login(user: str, password: str) -> None:",
        # a builtin type in TypeScript's, Kotlin's and C#'s annotations, optional ones too
        "interface Login { password: string; showPassword: boolean; apiToken?: string }",
        "function f(token: string | undefined, secretCount: number): void {}",
        "val password: String? = null",
        "if not tokens:  # pragma: no cover",
        'log.info("Lexed tokens: %s", tokens)',
        # a variable's name as the value: camelCase, snake_case, CONSTANT_CASE, attribute
        "params: { _csrf_token: csrfToken },",
        "const token = accessToken;",
        "password = user_password",
        "api_key: OPENAI_API_KEY",
        "self.password = self.password",
        "password = this._password",
        # URLs without a password: a port, a user alone, an IPv6 host
        "see https://example.com:8443/docs?a=b@c",
        "ssh://git@github.com:22/org/repo.git",
        "http://[::1]:8080/health",
        # identifiers that start like a token's prefix
        "from huggingface_hub import hf_hub_download",
        "npm_config_registry=https://registry.npmjs.org/",
        # a key that names a secret's kind, not one (an OAuth redirect, a token response)
        "GET /callback?token_type=bearer&expires_in=3600",
        '{"token_type": "Bearer", "expires_in": 3600}',
        "tokenType: Bearer\nsecret_type: Opaque",
        # a key that names a secret by its name (a Kubernetes volume, AWS Secrets Manager)
        "volumes:\n- name: certs\n  secret:\n    secretName: tls-certs-2",
        '{"secretName": "tls-certs-2", "SECRET_NAME": "prod/db/creds-1"}',
        # an AWS service and its secret's ARN: an IAM policy's action and resource
        '{"Action": ["secretsmanager:GetSecretValue"], "Resource": '
        '"arn:aws:secretsmanager:us-east-1:123456789012:secret:prod/db-AbCdEf"}',
        "Action: secretsmanager:GetSecretValue",
        # what tokenizes text holds no token (a Hugging Face tokenizer_config.json)
        '{"tokenizer_class": "LlamaTokenizerFast", "tokenizer": "meta-llama/Llama-3-8B"}',
        "tokenization: cl100k_base",
    ],
)
def test_non_secrets_are_left_alone(text: str) -> None:
    assert redact(text, PATTERNS) == (text, 0)


def test_redaction_is_idempotent() -> None:
    text = f"password={OPENAI} Authorization: Bearer {GITHUB} {PEM}"
    once, n = redact(text, PATTERNS)
    assert n >= 3
    assert redact(once, PATTERNS) == (once, 0)


@given(st.text(max_size=200))
@settings(max_examples=100, deadline=None)
def test_redaction_is_idempotent_on_any_text(text: str) -> None:
    once, _ = redact(text, PATTERNS)
    assert redact(once, PATTERNS) == (once, 0)


def test_secret_in_middle_of_multi_megabyte_text_is_found_quickly() -> None:
    filler = ("lorem ipsum = dolor, sit: amet {x: 1}\n" * 60_000)[:2_000_000]
    text = filler + f" {OPENAI} " + filler
    start = time.process_time()  # CPU time: other processes on the machine do not count
    out, n = redact(text, PATTERNS)
    assert n == 1 and OPENAI not in out
    assert time.process_time() - start < 2.0


def _pathological(k: int) -> str:
    return (
        "password" * 12_500 * k + "=" + "-----BEGIN PRIVATE KEY-----" * 500 * k + "a" * 25_000 * k
    )


def test_pathological_input_does_not_backtrack() -> None:
    """The cost grows linearly with the input: four times the text costs about four times
    the CPU (backtracking would cost sixteen times or far more). A ratio of CPU times in the
    same test, so a loaded machine does not fail it."""
    costs = []
    for k in (1, 4):
        text = _pathological(k)
        start = time.process_time()
        redact(text, PATTERNS)
        costs.append(time.process_time() - start)
    assert costs[1] < 8 * max(costs[0], 1e-3), costs


def test_custom_patterns_with_and_without_defaults() -> None:
    only_custom = compile_patterns([r"INTERNAL-\d{4}"], use_defaults=False)
    assert len(only_custom) == 1
    out, n = redact(f"INTERNAL-1234 {OPENAI}", only_custom)
    assert out == f"{REDACTED} {OPENAI}" and n == 1
    both = compile_patterns([r"INTERNAL-\d{4}"])
    assert len(both) == len(DEFAULT_PATTERNS) + 1
    assert redact(f"INTERNAL-1234 {OPENAI}", both) == (f"{REDACTED} {REDACTED}", 2)


def test_custom_pattern_secret_group_keeps_context() -> None:
    pats = compile_patterns([r"pin (?P<secret>\d{4})"], use_defaults=False)
    assert redact("my pin 1234.", pats) == (f"my pin {REDACTED}.", 1)


def test_compile_is_cached() -> None:
    assert compile_patterns(("a+",)) is compile_patterns(["a+"])


def test_invalid_pattern_is_a_readable_value_error() -> None:
    with pytest.raises(ValueError, match=r"invalid redaction pattern '\(unclosed'"):
        compile_patterns(["(unclosed"])


def test_redact_message_string_content() -> None:
    msg = tool("c1", f"key {OPENAI}")
    out, n = redact_message(msg, PATTERNS)
    assert n == 1 and out["content"] == f"key {REDACTED}"
    assert out["tool_call_id"] == "c1" and msg["content"] == f"key {OPENAI}"


def test_redact_message_text_parts() -> None:
    msg = {
        "role": "user",
        "content": [
            {"type": "text", "text": f"a {GITHUB}"},
            {"type": "image_url", "image_url": {"url": "https://x"}},
        ],
    }
    out, n = redact_message(msg, PATTERNS)
    assert n == 1
    assert out["content"][0] == {"type": "text", "text": f"a {REDACTED}"}
    assert out["content"][1] is msg["content"][1]


def test_redact_message_unchanged_is_same_object() -> None:
    msg = user("nothing here")
    assert redact_message(msg, PATTERNS) == (msg, 0)
    assert redact_message(msg, PATTERNS)[0] is msg
    empty = {"role": "assistant", "content": None}
    assert redact_message(empty, PATTERNS)[0] is empty


def test_what_a_model_wrote_is_redacted_in_its_text_and_its_call_arguments() -> None:
    """An assistant message holds text a model reads in its content and in the arguments of
    its calls, legacy ``function_call`` included; the rest of the message is kept as is."""
    patterns = compile_patterns((), use_defaults=True)
    call = {"id": "c1", "type": "function", "function": {"name": "run", "arguments": ""}}
    msg = {
        "role": "assistant",
        "content": f"exporting {OPENAI}",
        "tool_calls": [
            {**call, "function": {"name": "run", "arguments": f'{{"key": "{GITHUB}"}}'}},
            call,
        ],
    }
    out = redact_written(msg, patterns)[0]
    assert out["content"] == f"exporting {REDACTED}"
    assert out["tool_calls"][0]["function"] == {
        "name": "run",
        "arguments": f'{{"key": "{REDACTED}"}}',
    }
    assert out["tool_calls"][0]["id"] == "c1" and out["tool_calls"][1] is call
    legacy = {
        "role": "assistant",
        "content": None,
        "function_call": {"name": "f", "arguments": AWS_ID},
    }
    assert redact_written(legacy, patterns)[0]["function_call"] == {
        "name": "f",
        "arguments": REDACTED,
    }
    plain = {"role": "assistant", "content": "nothing here", "tool_calls": [call]}
    assert redact_written(plain, patterns)[0] is plain


def test_a_refusal_is_redacted_as_the_content_is() -> None:
    """A refusal is text the model reads when the turn is resent, whether the message's
    ``refusal`` field or a ``refusal`` part of its content; a key quoted in one went
    upstream and into the summary's input as written."""
    patterns = compile_patterns((), use_defaults=True)
    field = {"role": "assistant", "content": None, "refusal": f"I won't use {AWS_ID}"}
    assert redact_written(field, patterns) == (
        {"role": "assistant", "content": None, "refusal": f"I won't use {REDACTED}"},
        1,
    )
    text = {"type": "text", "text": "plain"}
    parts = {"role": "assistant", "content": [text, {"type": "refusal", "refusal": AWS_ID}]}
    out, n = redact_written(parts, patterns)
    assert out["content"] == [text, {"type": "refusal", "refusal": REDACTED}] and n == 1
    assert out["content"][0] is text
    calm = {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}], "refusal": "no"}
    assert redact_written(calm, patterns) == (calm, 0) and redact_written(calm, patterns)[0] is calm


@pytest.mark.parametrize("role", ["user", "tool", "system", "function"])
def test_a_refusal_part_is_redacted_whatever_the_role(role: str) -> None:
    """A lenient provider takes a ``refusal`` part in any message, and the summary's input
    and the extraction render its text whatever the role (``content_text``): redacted only
    in an assistant's, a key quoted in a user's or a tool result's was stored, resent and
    summarised as written. Both redactors (the rescan uses the second) read it."""
    text = {"type": "text", "text": "plain"}
    msg = {"role": role, "content": [text, {"type": "refusal", "refusal": f"key {AWS_ID}"}]}
    for redactor in (redact_message, redact_written):
        out, n = redactor(msg, PATTERNS)
        assert out["content"] == [text, {"type": "refusal", "refusal": f"key {REDACTED}"}], role
        assert n == 1 and out["content"][0] is text
        assert AWS_ID not in content_text(out["content"], media=True)
    field = {"role": role, "content": "plain", "refusal": f"I won't use {AWS_ID}"}
    assert redact_written(field, PATTERNS) == ({**field, "refusal": f"I won't use {REDACTED}"}, 1)
    calm = {"role": role, "content": [{"type": "refusal", "refusal": "no"}], "refusal": "no"}
    assert redact_written(calm, PATTERNS)[0] is calm and redact_message(calm, PATTERNS)[0] is calm


def test_a_bare_string_part_is_redacted_as_the_summary_renders_it() -> None:
    """A part given as a bare string (a lenient provider takes ``["a", "b"]`` as content)
    is text ``content_text`` renders into the summary's input and the extraction: it is
    redacted in its place, still a string, and with its neighbour as one text."""
    msg = {"role": "tool", "content": ["plain", f"key {AWS_ID}", {"type": "image_url"}]}
    for redactor in (redact_message, redact_written):
        out, n = redactor(msg, PATTERNS)
        assert out["content"] == ["plain", f"key {REDACTED}", {"type": "image_url"}] and n == 1
    split = {"role": "user", "content": [f"key {AWS_ID[:8]}", AWS_ID[8:]]}
    assert "".join(redact_message(split, PATTERNS)[0]["content"]) == f"key {REDACTED}"
    calm = {"role": "user", "content": ["plain"]}
    assert redact_message(calm, PATTERNS)[0] is calm


def test_a_quoted_value_holding_escaped_quotes_is_redacted_whole() -> None:
    """A secret's quoted value read to its closing quote, past the quotes it escapes: AWS
    Secrets Manager's ``SecretString`` is JSON in a string, whose keys need not name a
    secret (``"pass"``), so read to its first escaped quote it let them through and left
    the text no JSON."""
    answer = {"Name": "prod/db", "SecretString": json.dumps({"user": "admin", "pass": "hunter2x"})}
    text = json.dumps(answer, indent=4)
    out, n = redact(text, PATTERNS)
    assert n == 1 and json.loads(out) == {**answer, "SecretString": REDACTED}
    # a value that ends in a backslash still ends at its quote
    assert redact('token: "C:\\"\n', PATTERNS) == (f'token: "{REDACTED}"\n', 1)
