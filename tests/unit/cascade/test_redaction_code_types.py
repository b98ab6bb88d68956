"""Code the agent writes names tokens and passwords by their types: a type is no secret.
Redacted, a model file, a migration or an interface the agent writes breaks."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from proxy.cascade.redaction import REDACTED, compile_patterns, redact
from tests.unit.linear import assert_linear

PATTERNS = compile_patterns(())


@pytest.mark.parametrize(
    "text",
    [
        "  authToken: Observable<string>;",
        "  token$ = this.store.select(selectToken);\n  authToken: Observable<string | null>;",
        "export interface Session {\n  apiKey?: string | null;\n  secret: Promise<string>;\n}",
        "  refreshToken: BehaviorSubject<Token | undefined>,",
        "    pub api_key: Option<String>,",
        "  secrets: Record<string, Array<string>>;",
        "passwordHash: varchar(255)",
        "  password_hash TEXT NOT NULL,",
        "CREATE TABLE users (id SERIAL, password_hash VARCHAR(255) NOT NULL, api_key TEXT);",
        "  apiKey?: string | null;",
        "    password_hash: Mapped[str] = mapped_column(String(255))",
        "    api_key: SecretStr\n    db_password: SecretBytes | None = None",
        "  token: AuthToken;\n  refreshToken: JwtPayload | null;\n  tokens: AccessToken[];",
        "pub struct Config {\n    pub api_key: SecretString,\n    pub pwd: i32,\n}",
        "fn login(password: &str, token: &'a str, secret: &mut [u8]) -> bool",
        "  readonly tokens: readonly string[];\n  secretKey: typeof SECRET_KEY;",
        "type Keys = {\n  token: keyof Tokens;\n}",
        "  readonly secret: unique symbol;\n  token: keyof typeof TOKENS,",
        "  apiKeys: readonly [A, B];\n  tokens: readonly Array<Token>[];",
        "    token: Box<dyn Fn() -> String>,",
    ],
)
def test_a_type_is_no_secret(text: str) -> None:
    assert redact(text, PATTERNS) == (text, 0)
    args = json.dumps({"path": "src/session.ts", "content": text})
    assert redact(args, PATTERNS) == (args, 0)


@pytest.mark.parametrize(
    ("text", "kept"),
    [  # a value that is no type's shape is still a secret
        ("password: Hunter2<br>", f"password: {REDACTED}<br>"),
        ("token: abc<def>", f"token: {REDACTED}"),
        ("Password: theagentcompany<", f"Password: {REDACTED}<"),
        ('authToken: Observable<string> = "s3cr3t-v4lue"', None),
        ('apiKey: AuthToken = "s3cr3t-v4lue";', None),
        # two capitalised words at a line's end: a .env's or YAML's password, as likely as a type
        ("DB_PASSWORD=SuperSecret\nUSER=app", f"DB_PASSWORD={REDACTED}\nUSER=app"),
        ("password: Welcome;", f"password: {REDACTED};"),
        ("token: Int64", f"token: {REDACTED}"),
        # a type's shape at a value's start, then more that no code writes after a type
        ("password: Abc<x>yz9!", f"password: {REDACTED}"),
        ("token: Observable<string>hunter2", f"token: {REDACTED}"),
        ("password: &Xk93pq7", f"password: {REDACTED}"),
        ("secret: &str9x", f"secret: {REDACTED}"),
        # after ``=`` no type annotates a name: a shell's or a .env's value before ``;`` or ``,``
        (
            "export DB_PASSWORD=SuperSecret; ./deploy.sh",
            f"export DB_PASSWORD={REDACTED}; ./deploy.sh",
        ),
        ("API_TOKEN = CorrectHorse,", f"API_TOKEN = {REDACTED},"),
        # a passphrase's first word that is a TypeScript operator, before no type it takes
        ("password: unique horse battery", f"password: {REDACTED} horse battery"),
        ("password: readonly access", f"password: {REDACTED} access"),
        ("token: typeof x9k!", f"token: {REDACTED} x9k!"),
        # Rust's and Pydantic's type names are written in one case: another is a word
        ("password: U8", f"password: {REDACTED}"),
        ("api_key: Secretstr", f"api_key: {REDACTED}"),
        ("PASSWORD=F64\n", f"PASSWORD={REDACTED}\n"),
    ],
)
def test_a_secret_beside_angle_brackets_is_still_redacted(text: str, kept: str | None) -> None:
    out, n = redact(text, PATTERNS)
    assert n >= 1
    if kept is not None:
        assert out == kept
    assert "s3cr3t-v4lue" not in out


@pytest.mark.parametrize(
    ("hostile", "count"),
    [
        (lambda n: "token: Observable<" + "a" * n, 100_000),
        (lambda n: "token: A<" * n, 12_000),
        (lambda n: "token: " + "Ab" * n + ";", 50_000),
        (lambda n: "token: &'a " * n, 10_000),
        (lambda n: "token: Abc" * n, 10_000),
        (lambda n: "token: Abc = " * n, 8_000),
        # an opening tag's look for its closing one, at each ``<`` of a long value
        (lambda n: ("password=a" + "<b>" * 166 + " ") * n, 200),
        (lambda n: ("password=a" + "<b>x" * 120 + " ") * n, 200),
    ],
)
def test_a_type_is_read_in_linear_time(hostile: Callable[[int], str], count: int) -> None:
    assert_linear(hostile, count)
