"""Credentials that commands, config files and headers hold in their own syntax: ``curl``'s
``-u user:pass``, a token as a URL's user, ``DB_PASS=``, an ``.npmrc`` line, an Azure
connection string, a cookie header, a ``%``-encoded pair. Each is redacted; the text
around it, and what only looks like one, stays."""

from __future__ import annotations

import time

import pytest

from bench.redaction_speed import before
from proxy.cascade.redaction import REDACTED, compile_patterns, redact

PATTERNS = compile_patterns(())
_TOKEN = "Zq7XkP2mW9vL4tR8"
_HEX40 = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        # curl's basic auth: the user stays, the password goes
        (
            f"curl -u user:{_TOKEN} https://api.example.com/x",
            f"curl -u user:{REDACTED} https://api.example.com/x",
        ),
        ("curl -s -u user:Passw0rd https://h/", f"curl -s -u user:{REDACTED} https://h/"),
        (
            f"curl --user user:{_TOKEN} https://h/",
            f"curl --user user:{REDACTED} https://h/",
        ),
        (f"curl --user=bob:{_TOKEN} https://h/", f"curl --user=bob:{REDACTED} https://h/"),
        (f"curl -u 'bob:{_TOKEN}' https://h/", f"curl -u 'bob:{REDACTED}' https://h/"),
        # in JSON text (a call's arguments) its quotes are escaped
        (
            f'{{"cmd": "curl -u \\"bob:{_TOKEN}\\" https://h/"}}',
            f'{{"cmd": "curl -u \\"bob:{REDACTED}\\" https://h/"}}',
        ),
        # a password that repeats the user, a URL after it: a login, not a user and group
        (
            "curl -u theagentcompany:theagentcompany -O http://h:8092/f",
            f"curl -u theagentcompany:{REDACTED} -O http://h:8092/f",
        ),
        # curl's cookies on its command line: to the quote's end, or to the blank
        (
            f"curl -b 'sid={_TOKEN}; theme=dark' https://h/",
            f"curl -b '{REDACTED}' https://h/",
        ),
        (f"curl --cookie sid={_TOKEN} https://h/", f"curl --cookie {REDACTED} https://h/"),
        (f"curl --cookie=sid={_TOKEN} https://h/", f"curl --cookie={REDACTED} https://h/"),
        (
            f'{{"cmd": "curl -b \\"sid={_TOKEN}\\" https://h/"}}',
            f'{{"cmd": "curl -b \\"{REDACTED}\\" https://h/"}}',
        ),
        # a password of digits longer than a group's id
        ("curl -u bob:20240917 https://h/", f"curl -u bob:{REDACTED} https://h/"),
        # the pair glued to curl's option, as curl reads it too
        ("curl -ubob:Passw0rd https://h/", f"curl -ubob:{REDACTED} https://h/"),
        (
            f"curl -s -H 'Accept: x' -ubob:{_TOKEN} https://h/",
            f"curl -s -H 'Accept: x' -ubob:{REDACTED} https://h/",
        ),
        # a short password of digits with a URL after it: a login, not a user and group
        ("curl -u bob:1234 https://h/", f"curl -u bob:{REDACTED} https://h/"),
        # curl's cookies bare after -b
        (f"curl -b sid={_TOKEN} https://h/", f"curl -b {REDACTED} https://h/"),
        # ... on a command continued on the next line, glued pair and bare cookie alike
        (
            f"curl -s \\\n  -ubob:{_TOKEN} \\\n  -b sid={_TOKEN} https://h/",
            f"curl -s \\\n  -ubob:{REDACTED} \\\n  -b {REDACTED} https://h/",
        ),
        # ... quoted, or last of a bundle of curl's flags
        ("curl -s '-ubob:Passw0rd' https://h/", f"curl -s '-ubob:{REDACTED}' https://h/"),
        (
            '{"cmd": "curl -s \\"-ubob:Passw0rd\\" https://h/"}',
            f'{{"cmd": "curl -s \\"-ubob:{REDACTED}\\" https://h/"}}',
        ),
        ("curl -sSfu bob:Passw0rd https://h/", f"curl -sSfu bob:{REDACTED} https://h/"),
        ("curl -fsSLubob:Passw0rd https://h/", f"curl -fsSLubob:{REDACTED} https://h/"),
        # a system account's name as a login's password: a URL after it
        ("curl -u root:root https://h/", f"curl -u root:{REDACTED} https://h/"),
        ("curl -u postgres:postgres https://db/", f"curl -u postgres:{REDACTED} https://db/"),
        # a ``$`` that begins no variable's name is the password's
        ("curl -u 'bob:$3cr3tP4ss' https://h/", f"curl -u 'bob:{REDACTED}' https://h/"),
        ("curl -ubob:$9xYzzy https://h/", f"curl -ubob:{REDACTED} https://h/"),
        # a proxy's basic auth
        (f"curl -U bob:{_TOKEN} https://h/", f"curl -U bob:{REDACTED} https://h/"),
        (
            f"curl --proxy-user bob:{_TOKEN} https://h/",
            f"curl --proxy-user bob:{REDACTED} https://h/",
        ),
        # a token as a URL's user, no password after it
        (
            f"git clone https://{_HEX40}@github.com/o/r.git",
            f"git clone https://{REDACTED}@github.com/o/r.git",
        ),
        (
            f"https://x-access-token:{_TOKEN}@github.com/o/r",
            f"https://x-access-token:{REDACTED}@github.com/o/r",
        ),
        # environment variables naming a password
        (f"DB_PASS={_TOKEN}", f"DB_PASS={REDACTED}"),
        (f"export SMTP_PASS='{_TOKEN}'", f"export SMTP_PASS='{REDACTED}'"),
        (f"PGPASSWORD={_TOKEN} psql -h db", f"PGPASSWORD={REDACTED} psql -h db"),
        (f"MYSQL_PWD={_TOKEN} mysql", f"MYSQL_PWD={REDACTED} mysql"),
        # a bare PASS, as a shell or an .env file assigns it
        (f"PASS={_TOKEN}", f"PASS={REDACTED}"),
        (f"export PASS='{_TOKEN}'", f"export PASS='{REDACTED}'"),
        (f"PASSWD={_TOKEN} ./login.sh", f"PASSWD={REDACTED} ./login.sh"),
        # ... on a line of JSON text after an escaped line break or tab (a tool's result)
        (
            f'{{"content": "set -e\\nPASS={_TOKEN}\\n"}}',
            f'{{"content": "set -e\\nPASS={REDACTED}\\n"}}',
        ),
        (f'"a\\tPASS={_TOKEN}"', f'"a\\tPASS={REDACTED}"'),
        # .npmrc
        (
            f"//registry.npmjs.org/:_authToken={_TOKEN}",
            f"//registry.npmjs.org/:_authToken={REDACTED}",
        ),
        ("_auth=dXNlcjpwYXNzd29yZA==", f"_auth={REDACTED}"),
        ('_auth="dXNlcjpwYXNzd29yZA=="', f'_auth="{REDACTED}"'),
        (
            "//npm.example.com/:_auth=dXNlcjpwYXNzd29yZA==",
            f"//npm.example.com/:_auth={REDACTED}",
        ),
        # Azure connection strings
        (
            "DefaultEndpointsProtocol=https;AccountName=acct;"
            f"AccountKey={_TOKEN}+abc==;EndpointSuffix=core.windows.net",
            "DefaultEndpointsProtocol=https;AccountName=acct;"
            f"AccountKey={REDACTED};EndpointSuffix=core.windows.net",
        ),
        (
            "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;"
            f"SharedAccessKey={_TOKEN}=",
            "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;"
            f"SharedAccessKey={REDACTED}",
        ),
        # the key alone, its value spaced or quoted, at the end
        (f"AccountKey = {_TOKEN}+abc==", f"AccountKey = {REDACTED}"),
        (f'"AccountKey": "{_TOKEN}+abc=="', f'"AccountKey": "{REDACTED}"'),
        (f"AccountKey='{_TOKEN}+abc=='", f"AccountKey='{REDACTED}'"),
        # a storage account's key in YAML, in code or JSON, spelled as its SDKs spell it
        (f"accountKey: {_TOKEN}+abc==", f"accountKey: {REDACTED}"),
        (f"  account_key={_TOKEN}", f"  account_key={REDACTED}"),
        (f'"accountKey": "{_TOKEN}"', f'"accountKey": "{REDACTED}"'),
        (f"ACCOUNT_KEY: '{_TOKEN}'", f"ACCOUNT_KEY: '{REDACTED}'"),
        # ... after a camelCase word, as ``storageApiKey`` is read, and as az's option
        (f"storageAccountKey: {_TOKEN}+abc==", f"storageAccountKey: {REDACTED}"),
        (
            f"az storage blob list --account-name a --account-key {_TOKEN}+abc== -o table",
            f"az storage blob list --account-name a --account-key {REDACTED} -o table",
        ),
        (f'--account-key "{_TOKEN}"', f'--account-key "{REDACTED}"'),
        # cookie headers
        (f'Cookie: sid="{_TOKEN}"', f"Cookie: {REDACTED}"),
        (f'Cookie: sid="{_TOKEN}"; b=1\nHost: h', f"Cookie: {REDACTED}\nHost: h"),
        (f"Cookie: sessionid={_TOKEN}; csrftoken=abc", f"Cookie: {REDACTED}"),
        (
            f"< Set-Cookie: session={_TOKEN}; Path=/; HttpOnly",
            f"< Set-Cookie: {REDACTED}",
        ),
        (f'"Cookie": "sid={_TOKEN}"', f'"Cookie": "{REDACTED}"'),
        # a YAML anchor before a password that is no Rust type (``&mut String`` is one)
        ("password: &mut Passw0rd!", f"password: &mut {REDACTED}"),
        # %-encoded pairs, once or twice (a URL inside a query's parameter)
        (
            f"https://api.example.com/cb?token%3D{_TOKEN}",
            f"https://api.example.com/cb?token%3D{REDACTED}",
        ),
        (
            f"GET /login?next=%2Fcb%253Faccess_token%253D{_TOKEN}%2526x%253D1",
            f"GET /login?next=%2Fcb%253Faccess_token%253D{REDACTED}%2526x%253D1",
        ),
        ("https://u:p%40ss@host/db", f"https://u:{REDACTED}@host/db"),
    ],
)
def test_a_credential_in_its_own_syntax_is_redacted(text: str, kept: str) -> None:
    assert redact(text, PATTERNS)[0] == kept
    assert redact(text, PATTERNS) == before(text, PATTERNS)


@pytest.mark.parametrize(
    "text",
    [
        "docker run -u 1000:1000 image",
        "docker run --user www-data:33 image",
        "podman run --user 100000:100000 image",
        "git push -u origin main",
        "sudo -u postgres psql",
        "python -u -c 'print(1)'",
        "ps -uroot -o pid,cmd",
        "curl -XPUT https://h/x:8080",
        "curl -sSf https://h/ | sort -suk1:2",
        "make -b CFLAGS=-O2",
        # -b with a name=value after it, in a command other than curl
        "git checkout -b feat=x",
        "gcc -b i686=x main.c",
        "sort -b k=2 file",
        "make -b V=1",
        "grep -b pattern=x file",
        "curl --cookie cookies.txt https://h/",
        "git checkout -b feature/login",
        "curl -b cookies.txt -c cookies.txt https://h/",
        # a user and a group of one name
        "docker run --user www-data:www-data image",
        "docker exec -u root:root c ls",
        '{"cmd": "docker run -u \\"www-data:www-data\\" x"}',
        "curl -u $USER:$TOKEN https://h/",
        # a variable's name as the password: no secret in the text
        "curl -u bob:$PASS https://h/",
        'curl -u "bob:${PASS}" https://h/',
        "curl -ubob:$PASS https://h/",
        # a short id as the group, no URL after it
        "docker run --user bob:1234 image",
        # a well-known system account and group
        "docker run --user nobody:nogroup image",
        "curl --user nobody:nogroup",
        "install -o root -g wheel; sudo -u root:wheel ls",
        "docker run -u daemon:staff x",
        # booleans, as YAML 1.1 spells them too
        "all-pass: yes",
        "pass: true",
        "DB_PASS: no",
        "PASS=true",
        "account_key = self.account_key",
        # a storage account's key named in code, not written in it
        "accountKey: this.key",
        "accountKey: process.env.AZURE_STORAGE_KEY,",
        "accountKey?: string | undefined;",
        "storageAccountKey: string",
        "az storage account keys list --account-key-type primary",
        'az storage blob list --account-key "$AZURE_STORAGE_KEY"',
        # no value after the key or option, its quote at its string's end: the text stays
        # JSON (the quote's value is not read on into the next string's)
        '{"a": {"n": "--account-key \'"}, "b": [1, "z\'"]}',
        '{"a": {"n": "PASS=\'"}, "b": [1, "z\'"]}',
        '{"a": {"n": "accountKey: \'"}, "b": [1, "z\'"]}',
        '{"a": {"n": "api_key: \'"}, "b": [1, "z\'"]}',
        '{"l": "{\\"a\\": {\\"n\\": \\"password=\'\\"}, \\"b\\": [1, \\"z\'\\"]}"}',
        "https://git@github.com/o/r",
        "https://user@example.com/path",
        "Tests pass: all",
        "bypass=true",
        "compass: north",
        "the cookie: a small cake",
        "fn f(password: &mut String)",
        "fn f(password: &mut Vec<u8>)",
        "author=Jane",
        "AccountName=acct;",
        "accountKey: string",
        # a JavaScript name, not an .npmrc's key
        "const _auth = require('./auth')",
        "this._auth = null",
        "_auth=${NPM_AUTH}",
        "token%3D%5BREDACTED%5D",
        "?next=%2Fcb%253Ftoken_type%253Dbearer",
    ],
)
def test_what_only_looks_like_one_stays(text: str) -> None:
    assert redact(text, PATTERNS) == (text, 0)


@pytest.mark.parametrize(
    "unit",
    [
        "-u a:a ",  # a pair that repeats its user: the look for a URL after it
        "-u 'a:",
        "--user=",
        "-b '",
        "--cookie a=",
        "_auth=",
        'cookie: a="',
        "accountkey = ",
        '"accountkey": "',
        "curl -u",
        "curl x ",
        "pass=",
        "account_key: ",
        "-b a=",
        "curl \\\n",
        "curl -b a=",
        "curl -sSfu ",
        "curl -uuuuuuuuuuuu ",
        "--account-key ",
        "xAccountKey: ",
    ],
)
def test_a_hostile_run_of_a_rules_literal_reads_in_linear_time(unit: str) -> None:
    """100 KB of one rule's literal, each a try: ~0.1 s, where a scan back or ahead to the
    line's end at each try would take seconds (the bound leaves room for a loaded machine)."""
    text = unit * (100_000 // len(unit))
    start = time.perf_counter()
    redact(text, PATTERNS)
    assert time.perf_counter() - start < 1.0
