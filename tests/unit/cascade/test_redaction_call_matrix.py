"""Each built-in secret pattern, with a realistic secret, in every form a model reads it:
a message's text, a call's arguments as their JSON text, as an object, nested, and as an
array of the text's lines. Each form is redacted (the secret gone), keeps its form (an
object stays one, a text stays JSON), and reads the same when redacted again (the stored
row, from which the summary's input is redacted, is what went upstream)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from proxy.cascade.redaction import compile_patterns
from proxy.cascade.redaction_calls import redact_written
from tests.unit.cascade import fake_credentials as fake

_PATTERNS = compile_patterns((), use_defaults=True)
_PEM_BODY = "MIIEowIBAAKCAQEA7"
_CUT_PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\nabcDEF123+/="
_CASES = {
    "pem": ("cat id_rsa:\n" + fake.PEM + "\ndone", _PEM_BODY),
    "pem_cut_short": ("head id_rsa:\n" + _CUT_PEM, _PEM_BODY),
    "anthropic": (f"export ANTHROPIC_API_KEY={fake.ANTHROPIC}", fake.ANTHROPIC[7:]),
    "openai": (f"client = OpenAI(api_key='{fake.OPENAI}')", fake.OPENAI[3:]),
    "openai_project": (f"key is {fake.OPENAI_PROJ}", fake.OPENAI_PROJ[8:]),
    "stripe": (f"stripe.api_key = '{fake.STRIPE}'", fake.STRIPE[8:]),
    "aws_key_id": (f"aws configure set aws_access_key_id {fake.AWS_ID}", fake.AWS_ID),
    "aws_secret": (f"aws_secret_access_key = {fake.AWS_SECRET}", fake.AWS_SECRET),
    "aws_secret_json": (f'{{"aws_secret_access_key": "{fake.AWS_SECRET}"}}', fake.AWS_SECRET),
    "github": (f"git remote set-url origin https://{fake.GITHUB}@github.com/o/r", fake.GITHUB),
    "github_pat": (f"GH_TOKEN={fake.GITHUB_PAT}", fake.GITHUB_PAT[11:]),
    "huggingface": (f"huggingface-cli login --token {fake.HUGGINGFACE}", fake.HUGGINGFACE),
    "gitlab": (f"glab auth login -t {fake.GITLAB}", fake.GITLAB),
    "npm": (f"//registry.npmjs.org/:_authToken={fake.NPM}", fake.NPM),
    "slack": (f"SLACK={fake.SLACK}", fake.SLACK),
    "google": (f"GOOGLE={fake.GOOGLE}", fake.GOOGLE),
    "jwt": (f"cookie: session={fake.JWT}", fake.JWT[20:]),
    "url_password": ("DATABASE_URL=postgresql://app:s3cr3tPassw0rd@db:5432/app", "s3cr3tPassw0rd"),
    "bearer": (
        'curl -H "Authorization: Bearer abcdef0123456789XYZ" https://x',
        "abcdef0123456789XYZ",
    ),
    "basic_json": ('{"Authorization": "Basic dXNlcjpwYXNzd29yZDEyMw=="}', "dXNlcjpwYXNzd29yZDEyMw"),
    "env_assignment": ("DB_PASSWORD=hunter2hunter2\nITEMS=[1,2]", "hunter2hunter2"),
    "quoted_assignment": ('DB_PASSWORD="correct horse battery"\nDEBUG=1', "correct horse battery"),
    "yaml": ("db:\n  password: Xk9mQ2vL7pR4\n  port: 5432", "Xk9mQ2vL7pR4"),
    "json_file": ('{"api_key": "Xk9mQ2vL7pR4zz", "max_tokens": 5}', "Xk9mQ2vL7pR4zz"),
    "tab_separated": ("token:\tXk9mQ2vL7pR4", "Xk9mQ2vL7pR4"),
    # a secret keyed by its sibling entry, in JSON and in YAML as kubectl prints it
    "env_json": ('{"env": [{"name": "DB_PASSWORD", "value": "hunter2hunter2"}]}', "hunter2hunter2"),
    "env_yaml": ("env:\n- name: DB_PASSWORD\n  value: hunter2hunter2\n- name: A", "hunter2hunter2"),
    "header_list": ('[{"name": "Authorization", "value": "Basic dXNlcjpwYXNz"}]', "dXNlcjpwYXNz"),
    "aws_tags": ('{"Tags": [{"Key": "api_token", "Value": "tok-93jf83kd"}]}', "tok-93jf83kd"),
    "key_value": ("- key: NPM_TOKEN\n  value: 'Xk9mQ2vL7pR4'", "Xk9mQ2vL7pR4"),
    "tf_output": ('{"db_password": {"sensitive": true, "value": "tfPw-93jf83"}}', "tfPw-93jf83"),
    # a quoted value read past the quotes it escapes, and one ending in a backslash
    "secret_string": ('{"SecretString": "{\\"pass\\": \\"ssPw-93jf83\\"}"}', "ssPw-93jf83"),
    "path_then_key": ('set SECRET_DIR="C:\\keys\\" API_KEY="Xk9mQ2vL7pR4"', "Xk9mQ2vL7pR4"),
}


def _call(arguments: Any) -> dict[str, Any]:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def _forms(text: str) -> Iterator[tuple[str, dict[str, Any]]]:
    lines = text.split("\n")
    yield "content", {"role": "user", "content": text}
    yield "text", _call(json.dumps({"cmd": text}))
    yield "compact_text", _call(json.dumps({"lines": lines}, separators=(",", ":")))
    yield "object", _call({"cmd": text})
    yield "nested", _call({"a": {"b": [{"cmd": text, "n": 1}]}})
    yield "lines", _call({"path": "f", "lines": lines})
    yield "array", _call(lines)


@pytest.mark.parametrize("case", sorted(_CASES))
def test_a_secret_is_redacted_in_every_form_a_model_reads_it(case: str) -> None:
    text, secret = _CASES[case]
    for form, msg in _forms(text):
        out, n = redact_written(msg, _PATTERNS)
        assert n > 0 and secret not in json.dumps(out, ensure_ascii=False), (form, out)
        assert redact_written(out, _PATTERNS) == (out, 0), form
        if form != "content":
            got, sent = (m["tool_calls"][0]["function"]["arguments"] for m in (out, msg))
            assert type(got) is type(sent), form
            if isinstance(got, str):
                json.loads(got)


@pytest.mark.parametrize(
    "text",
    [
        '{"max_tokens": 5, "token_count": 12, "secret": null, "password_required": true}',
        "max_tokens=5\ntoken_limit: 100\nuse_token = True",
        "def f(token: str, password: Optional[str] = None):\n    return token",
        "tokens: Sequence[T]\nif not tokens:  # none",
        "see https://example.com/docs and http://host:8080/path",
        '[{"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"key": "password"}}}]',
        "- name: LOG_LEVEL\n  value: debug\n- name: MAX_TOKENS\n  value: 4096",
    ],
)
def test_no_secret_is_altered_in_any_form(text: str) -> None:
    for form, msg in _forms(text):
        assert redact_written(msg, _PATTERNS) == (msg, 0), form
