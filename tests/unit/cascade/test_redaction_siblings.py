"""A secret keyed by a sibling entry: a list of name/value pairs (a Kubernetes pod's ``env``,
a HAR's headers, AWS tags and CloudFormation parameters, GitHub Actions and Terraform
variables) names the secret in one entry and holds it in the next, in JSON and in YAML as
kubectl prints it. The value is redacted, the name kept, with the keyed pass's vocabulary;
each in every form a model reads it is in ``test_redaction_call_matrix``."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from proxy.cascade.redaction import REDACTED, compile_patterns, redact
from proxy.cascade.redaction_calls import redact_written
from tests.unit.cascade.builders import tool

_PATTERNS = compile_patterns(())

_K8S_JSON = """{
    "env": [
        {
            "name": "DB_PASSWORD",
            "value": "hunter2hunter2"
        },
        {
            "name": "LOG_LEVEL",
            "value": "debug"
        }
    ]
}"""
_ENV = [
    {"name": "DB_PASSWORD", "value": "hunter2hunter2"},
    {"name": "LOG_LEVEL", "value": "debug"},
]
# ``terraform output -json``: a sensitive output's value, under its name
_TF_OUTPUT = """{
  "db_password": {
    "sensitive": true,
    "type": "string",
    "value": "tfPw-93jf83"
  }
}"""
_K8S_YAML = """    env:
    - name: DB_PASSWORD
      value: hunter2hunter2
    - name: LOG_LEVEL
      value: debug
"""


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (_K8S_JSON, "hunter2hunter2"),
        (_K8S_YAML, "hunter2hunter2"),
        (
            '[{"name": "X-Api-Key", "value": "q8ZrT2mW"}, {"name": "Accept", "value": "*/*"}]',
            "q8ZrT2mW",
        ),
        ('{"name": "Authorization", "value": "Basic dXNlcjpwYXNz"}', "Basic dXNlcjpwYXNz"),
        (
            '[{"Key": "api_token", "Value": "tok-93jf83"}, {"Key": "env", "Value": "x"}]',
            "tok-93jf83",
        ),
        ('[{"ParameterKey": "DbPassword", "ParameterValue": "Pa55word"}]', "Pa55word"),
        ('{"key": "aws_secret", "value": "wJalrXUt", "sensitive": true}', "wJalrXUt"),
        ('{"Name": "/app/db/password", "Type": "SecureString", "Value": "s3cr3t"}', "s3cr3t"),
        ("aws ec2 create-tags --tags Key=api_token,Value=tok-93jf83", "tok-93jf83"),
        ('{"id": "password", "type": "CONCEALED", "label": "password", "value": "Xq7!"}', "Xq7!"),
        ("- key: 'SECRET_KEY'\n  value: 'abc 123'\n", "abc 123"),
        # a quoted number is a value, as after a key (a PIN is quoted digits too)
        ('{"name": "MAX_TOKENS", "value": "4096"}', "4096"),
        # a password manager's field labelled in words (``API Key[concealed]=…``)
        ('{"type": "CONCEALED", "label": "API Key", "value": "q8ZrT2mW-1p"}', "q8ZrT2mW-1p"),
        ('{"label": "Secret Key", "value": "A3-ASWWYB-798JRY"}', "A3-ASWWYB-798JRY"),
        ("- label: private key\n  value: xK9-22mQ\n", "xK9-22mQ"),
        # a secret's key whose value is an object holding it: Terraform's outputs
        (_TF_OUTPUT, "tfPw-93jf83"),
        ('"outputs": {"db_password": {"value": "tfPw-93jf83", "type": "string"}}', "tfPw-93jf83"),
        ("db_password:\n  sensitive: true\n  type: string\n  value: tfPw-93jf83\n", "tfPw-93jf83"),
    ],
)
def test_a_value_named_by_its_sibling_is_redacted(text: str, secret: str) -> None:
    out, n = redact(text, _PATTERNS)
    assert (out, n) == (text.replace(secret, REDACTED), 1)
    assert redact(out, _PATTERNS) == (out, 0)


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "LOG_LEVEL", "value": "debug"}',
        '{"name": "max_tokens", "value": 4096}',
        '{"name": "use_token", "value": true}',
        '{"name": "token_type", "value": "bearer"}',
        '{"name": "SECRET_NAME", "value": "prod/db/creds-1"}',
        '{"name": "tokenizer", "value": "cl100k_base"}',
        '{"name": "hostname", "value": "db"}, {"name": "x"}',
        # the secret lives elsewhere: its reference is no secret
        '{"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"key": "password"}}}',
        "- name: DB_PASSWORD\n  valueFrom:\n    secretKeyRef:\n      key: password\n"
        "      name: db\n- name: LOG_LEVEL\n  value: debug\n",
        # two objects: the name of one does not key the value of the next
        '[{"name": "DB_PASSWORD"}, {"value": "unrelated"}]',
        "key = 'token'\nvalue = compute(key)\nname: password\nvalue: self.password",
        # a schema's object under a secret's key, and an empty secret before a value
        '{"password": {"type": "string", "description": "x"}, "value": {"type": "integer"}}',
        '{"password": "", "value": "unrelated"}',
        # a label in words that only begins with one: what the key is, not the key
        '{"label": "API Key ID", "value": "kid-123"}',
        "Your API key: see below\nvalue: 3",
    ],
)
def test_no_sibling_secret_is_altered(text: str) -> None:
    assert redact(text, _PATTERNS) == (text, 0)


def _redacted_call(given: Any, name: str = "f") -> tuple[Any, int, Any]:
    """A call's ``arguments`` redacted as written: what the model reads back, the count, and
    the arguments as stored (in the form given); redacting them again changes nothing."""
    call = {"id": "c1", "function": {"name": name, "arguments": given}}
    out, n = redact_written({"role": "assistant", "content": None, "tool_calls": [call]}, _PATTERNS)
    assert redact_written(out, _PATTERNS) == (out, 0)
    got = out["tool_calls"][0]["function"]["arguments"]
    return (got if isinstance(got, dict) else json.loads(got)), n, got


def test_a_sibling_secret_in_a_tool_result_and_in_arguments_of_both_forms() -> None:
    out, n = redact_written(tool("c1", _K8S_YAML), _PATTERNS)
    assert n == 1 and "hunter2hunter2" not in out["content"]
    har = '"headers": [{"name": "Authorization", "value": "Bearer q8ZrT2mWx7"}]'
    out, _ = redact_written(tool("c1", har), _PATTERNS)  # the Bearer pattern's, then this
    assert out["content"] == har.replace("Bearer q8ZrT2mWx7", REDACTED)
    args = {"manifest": json.loads(_K8S_JSON)}
    for given in (args, json.dumps(args)):
        read, n, _ = _redacted_call(given, "apply")
        assert n == 1 and read["manifest"]["env"][0] == {"name": "DB_PASSWORD", "value": REDACTED}
        assert read["manifest"]["env"][1] == {"name": "LOG_LEVEL", "value": "debug"}


def _near_misses(k: int) -> str:
    """Entries that almost key a secret by a sibling, each failing at its last character,
    and one name that runs on: a key's every repeat is a place the pattern is tried."""
    entry = '{"name": "x_password",' + " " * 120 + '"Type": "a", "b": "c", "valu"}'
    yaml = "- key: " + "token_" * 4 + "\n" + " " * 120 + "value\n"
    return (entry + yaml) * 1_000 * k + "token_" * 10_000 * k + '", "value'


def test_sibling_near_misses_cost_linear_time() -> None:
    """Four times the text costs about four times the CPU: each place a secret's key begins
    is read a bounded distance on, however the entries after it almost fit."""
    costs = []
    for k in (1, 4):
        text = _near_misses(k)
        start = time.process_time()  # CPU time: other processes on the machine do not count
        assert redact(text, _PATTERNS) == (text, 0)
        costs.append(time.process_time() - start)
    assert costs[1] < 8 * max(costs[0], 1e-3) and costs[1] < 1.5, costs


def test_a_sibling_secret_is_redacted_in_arguments_read_entry_by_entry() -> None:
    """Arguments whose text redacted is no JSON (``"Enter password:", "timeout"``) are read
    entry by entry; a value there is read with the entries before it in its object, as the
    whole text would have read it, not alone, where nothing names it."""
    args = {"expect": "Enter password:", "timeout": 5, "env": [_ENV[0], _ENV[1]]}
    for given in (args, json.dumps(args), json.dumps(args, separators=(",", ":"))):
        read, n, got = _redacted_call(given)
        assert n == 1 and type(got) is type(given)
        assert read == {**args, "env": [{**_ENV[0], "value": REDACTED}, _ENV[1]]}


def test_a_sibling_secret_in_lines_of_arguments_read_entry_by_entry() -> None:
    """The same for a YAML file written as its lines, an array's strings: a line is read
    with the lines before it, as the whole text reads them."""
    lines = ["env:", "- name: DB_PASSWORD", "  value: hunter2hunter2", "- name: A"]
    args = {"expect": "Enter password:", "timeout": 5, "lines": lines}
    for given in (args, json.dumps(args)):
        read, n, _ = _redacted_call(given)
        assert n == 1 and read["lines"] == [*lines[:2], f"  value: {REDACTED}", lines[3]]


def test_a_secret_under_its_key_opening_an_object_is_redacted_entry_by_entry() -> None:
    """Read entry by entry, a value whose object a secret's key opens (Terraform's outputs)
    is read with that key too, as the whole text reads it: the first entry of the object
    and one after a short entry alike."""
    outputs = json.loads(_TF_OUTPUT) | {"db_token": {"value": "tfTok-8e7d6c", "type": "string"}}
    args = {"expect": "Enter password:", "timeout": 5, "outputs": outputs}
    for given in (args, json.dumps(args)):
        read, n, _ = _redacted_call(given)
        assert n == 2 and read["outputs"] == {
            "db_password": {**outputs["db_password"], "value": REDACTED},
            "db_token": {"value": REDACTED, "type": "string"},
        }
