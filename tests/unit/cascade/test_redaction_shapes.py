"""Secrets in shapes the keyed and sibling passes read besides ``key: value``: a name/value
pair written value first, a YAML block scalar under a secret's key, a form body's pairs, and
a string holding JSON under a secret's key (AWS Secrets Manager's ``SecretString``), in tool
output and in a call's arguments (JSON text, where lines and quotes are escapes)."""

from __future__ import annotations

import json
import random
import time

import pytest

from proxy.cascade.redaction import REDACTED, compile_patterns, redact
from proxy.cascade.redaction_calls import redact_written
from proxy.cascade.redaction_scan import plan_of
from tests.unit.linear import assert_linear

_PATTERNS = compile_patterns(())

_LONG_SECRET = json.dumps({"username": "admin", "dbpass": "hunter2pw", "cert": "x" * 900})


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        # the value before its name
        ('{"value": "hunter2secret", "name": "DB_PASSWORD"}', "hunter2secret"),
        ('{"Value": "tok-93jf83", "Key": "api_token"}', "tok-93jf83"),
        ('{"value": "s3cr3t", "type": "SecureString", "name": "/app/db/password"}', "s3cr3t"),
        ("- value: hunter2secret\n  name: DB_PASSWORD\n", "hunter2secret"),
        ("value=q8ZrT2mWx7&name=api_key", "q8ZrT2mWx7"),
        ("value=q8ZrT2mWx7&name=DB%5FPASSWORD", "q8ZrT2mWx7"),
        ('{"value": "Xq7-pw", "label": "Master Password"}', "Xq7-pw"),
        # YAML block scalars: literal and folded, the block's lines as indented as its first
        (
            "password: |\n  s3cr3tline1\n\n  s3cr3tline2\nuser: bob\n",
            "s3cr3tline1\n\n  s3cr3tline2",
        ),
        (
            "db:\n  password: >-\n    s3cr3t folded\n    more\n  user: bob\n",
            "s3cr3t folded\n    more",
        ),
        ("- name: DB_PASSWORD\n  value: |+\n    hunter2\n- name: A\n", "hunter2"),
        ("password: |\r\n  s3cr3t\r\n  two\r\nuser: bob\r\n", "s3cr3t\r\n  two"),
        # a block in a unified diff, each line led by its mark (``+``, ``-``, a context blank)
        ("+password: |\n+  s3cr3tline\n+\n+  more\n+user: bob\n", "s3cr3tline\n+\n+  more"),
        (" db:\n+  password: >-\n+    s3cr3t\n     two\n   host: x\n", "s3cr3t\n     two"),
        # a block whose first line begins with a comment's mark, and no comment
        ("password: |\n  #hunter2x\nuser: bob\n", "#hunter2x"),
        # a comment after the block's indicator
        ("password: | # the db's\n  hunter2\nuser: bob\n", "hunter2"),
        ("  privateKey: >-  # PEM, folded\n    s3cr3t\n    two\n  x: 1\n", "s3cr3t\n    two"),
        # form bodies: the value to the next pair's ``&``, %-escapes and all
        ("password=hunter%212x&user=bob", "hunter%212x"),
        ("grant_type=password&username=bob&password=p%40ss%26w0rd&scope=x", "p%40ss%26w0rd"),
        ("name=api_key&value=q8ZrT2mWx7&x=1", "q8ZrT2mWx7"),
        ("api%5Fkey=q8ZrT2mWx7&x=1", "q8ZrT2mWx7"),
        # an ``&`` in a value no form body holds: a separator with blanks or a colon (a
        # form writes ``name=value``), and an ``&`` followed by no ``name=``
        ("password: ab&cd=ef\n", "ab&cd=ef"),
        ("  db_password: p@ss&w0rd=1\n", "p@ss&w0rd=1"),
        ("PASSWORD = ab&cd=ef", "ab&cd=ef"),
        ("secret => k9&x=y", "k9&x=y"),
        ("password=ab&cd", "ab&cd"),
        # a key glued to a word before it, in a comment or a name, is a key
        ("#password: hunter2x\n", "hunter2x"),
        ("mypassword: q9xk2\n", "q9xk2"),
        # a string holding JSON under a secret's key, past the quoted value's usual bound
        (
            json.dumps({"Name": "prod/db", "SecretString": _LONG_SECRET}),
            json.dumps(_LONG_SECRET)[1:-1],
        ),
        # ... or any string past it (``SecretBinary``'s base64)
        ('{"SecretBinary": "' + "QUJD" * 200 + '", "x": 1}', "QUJD" * 200),
    ],
)
def test_a_secret_in_these_shapes_is_redacted(text: str, secret: str) -> None:
    out, n = redact(text, _PATTERNS)
    assert (out, n) == (text.replace(secret, REDACTED), 1)
    assert redact(out, _PATTERNS) == (out, 0)


@pytest.mark.parametrize(
    "text",
    [
        '{"value": "debug", "name": "LOG_LEVEL"}',
        '{"value": "debug", "label": "Log level"}',
        '{"value": "cl100k_base", "name": "tokenizer"}',
        '{"value": "bearer", "name": "token_type"}',
        '{"value": 4096, "name": "max_tokens"}',
        # two pairs of the CLI's list: the next pair's name follows this one's value
        "aws ec2 create-tags --tags Key=env,Value=prod Key=api_token",
        # the next object's name is not this one's
        '[{"value": "unrelated"}, {"name": "DB_PASSWORD"}]',
        # a block under a key that names no secret, and a block indicator alone
        "description: |\n  rotate it as the runbook says\n  then restart\n",
        "password: |\nuser: bob\n",
        "password: | # none yet\nuser: bob\n",
        # an empty block: the lines after it at its key's indentation are its siblings
        "db:\n  password: |\n  user: bob\n  host: db\n",
        "env:\n  - password: |\n  - name: LOG_LEVEL\n    value: debug\n",
        "db:\n  password: >-\n  # rotated monthly\n  user: bob\n",
        "query=tokens&sort=asc&page=2",
        # a keyword that an English word after it makes no key's name
        "secretary: Alice Smith",
        "the secretariat: UN",
        "passwordless: enabled",
        "It was secretly: done",
        # an opening quote in prose: a long line after it is no string
        'Set the password: "' + "then restart the service and wait " * 20 + "\nok",
        'x = {"value": self.value, "name": name}',
    ],
)
def test_ordinary_text_in_these_shapes_is_kept(text: str) -> None:
    assert redact(text, _PATTERNS) == (text, 0)


# How tools number a file's lines: ``cat -n`` and editor tools' views (a tab after the
# number), Claude Code's Read tool (an arrow), SWE-agent's ``open`` (a colon).
_NUMBERINGS = ["{:6}\t", "{:6}\u2192", "{}:"]


def _numbered(lines: list[str], numbering: str) -> str:
    return "".join(numbering.format(i) + line + "\n" for i, line in enumerate(lines, 1))


@pytest.mark.parametrize("numbering", _NUMBERINGS)
def test_a_numbered_file_view_keeps_the_lines_after_a_block(numbering: str) -> None:
    """A file read with its lines numbered indents every line alike: the block is read by
    the file's own indentation after each number, and the lines after it are no part of it."""
    lines = [
        "stringData:",
        "  password: |",
        "    hunter2hunter2",
        "",
        "    second-line-of-it",
        "  username: admin",
        "kind: Secret",
    ]
    view = _numbered(lines, numbering)
    out, n = redact(view, _PATTERNS)
    block = f"hunter2hunter2\n{numbering.format(4)}\n{numbering.format(5)}    second-line-of-it"
    assert (out, n) == (view.replace(block, REDACTED), 1)
    assert out.endswith(_numbered(lines, numbering).split("\n", 5)[5])
    assert redact(out, _PATTERNS) == (out, 0)
    # ... and in JSON text (a call's arguments), whose lines and tabs are escapes
    for ascii_only in (False, True):
        written = json.dumps({"content": view}, ensure_ascii=ascii_only)
        expected = json.dumps({"content": out}, ensure_ascii=ascii_only)
        assert redact(written, _PATTERNS) == (expected, 1)
    empty = "db:\n  password: |\n  user: bob\n  host: db\n"
    assert redact(json.dumps({"content": empty}), _PATTERNS)[1] == 0


@pytest.mark.parametrize("numbering", _NUMBERINGS)
@pytest.mark.parametrize(
    "lines",
    [
        ["env:", "- name: DB_PASSWORD", "  value: hunter2x"],
        ["env:", "- value: hunter2x", "  name: DB_PASSWORD"],
        ['{"Name": "api_token",', ' "Value": "hunter2x"}'],
    ],
)
def test_a_pair_across_a_numbered_file_views_lines_is_redacted(
    lines: list[str], numbering: str
) -> None:
    """A name/value pair across a numbered view's lines is read through each line's number,
    bare and in JSON text."""
    view = _numbered(lines, numbering)
    out, n = redact(view, _PATTERNS)
    assert (out, n) == (view.replace("hunter2x", REDACTED), 1)
    for ascii_only in (False, True):
        written = json.dumps({"content": view}, ensure_ascii=ascii_only)
        expected = json.dumps({"content": out}, ensure_ascii=ascii_only)
        assert redact(written, _PATTERNS) == (expected, 1)


def test_a_string_as_long_as_a_services_largest_secret_is_redacted() -> None:
    """Secrets Manager's largest ``SecretBinary`` (64 KiB) is longer than that as its base64
    text, and a Kubernetes Secret's data reaches 1 MiB: each is redacted whole."""
    for size in (87_384, 1_000_000):
        text = json.dumps({"Name": "prod/cert", "SecretBinary": "QUJD" * (size // 4), "V": 1})
        out, n = redact(text, _PATTERNS)
        assert (out, n) == (json.dumps({"Name": "prod/cert", "SecretBinary": REDACTED, "V": 1}), 1)


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("password: |\n  user: admin\n  hunter2\nhost: db\n", "user: admin\n  hunter2"),
        ("db:\n  password: >-\n    user: x\n    pass: y\n  host: db\n", "user: x\n    pass: y"),
        ("@@ -0,0 +1,3 @@\n+  token: |\n+    - k9x\n+    # s3cr3t\n", "- k9x\n+    # s3cr3t"),
        ("+token: |\n+  - k9x\n", "- k9x"),
        ("     3\t  secret: |\n     4\t    a: b8x\n     5\t  c: 1\n", "a: b8x"),
        # a key as deep as a Kubernetes manifest's env (10 to 16 blanks)
        (" " * 10 + "password: |\n" + " " * 12 + "- k9x\n", "- k9x"),
        (" " * 15 + "token: >-\n" + " " * 16 + "a: b8x\n" + " " * 15 + "c: 1\n", "a: b8x"),
    ],
)
def test_a_block_whose_first_line_reads_as_yaml_is_the_blocks_when_it_is_deeper(
    text: str, secret: str
) -> None:
    """A block's first line indented past its key's line is the block's, whatever it reads
    as (a mapping's key, a list's item, a comment): the block was read as empty, its lines
    as the key's siblings, and the secret in them went upstream. At the key's own
    indentation such a line is a sibling (``test_ordinary_text_in_these_shapes_is_kept``)."""
    for written in (text, json.dumps({"content": text})):
        expected = written.replace(
            secret if written is text else json.dumps(secret)[1:-1], REDACTED
        )
        assert redact(written, _PATTERNS) == (expected, 1)
        assert redact(expected, _PATTERNS) == (expected, 0)


def test_the_keyed_pass_looks_for_its_keys_column_only_at_a_keywords_first_letter() -> None:
    """Its lookahead names the keywords' first letters: one missing there would never be
    read as a key."""
    keyed = next(p for p in _PATTERNS if p.pattern.startswith("(?i)(?=[acpst])"))
    assert keyed.pattern.startswith("(?i)(?=[acpst])")
    assert {start[0] for start in plan_of(keyed).starts} <= set("acpst")


def test_a_block_removed_and_added_in_a_diff_loses_both() -> None:
    """A diff that rotates a block scalar's secret shows the old lines and the new, each led
    by its mark: read as plain YAML, neither block had a line, and both secrets leaked."""
    text = "@@ -1,3 +1,3 @@\n-password: |\n-  oldsecret\n+password: |\n+  newsecret\n user: x\n"
    out, n = redact(text, _PATTERNS)
    assert (out, n) == (text.replace("oldsecret", REDACTED).replace("newsecret", REDACTED), 2)
    written = json.dumps({"patch": text})  # an apply_patch call's arguments
    assert redact(written, _PATTERNS) == (json.dumps({"patch": out}), 2)


@pytest.mark.parametrize("text", ["secret=>-\n    hunter2\n", "token =>|\n  x\n", "pwd=> # c\n  y"])
def test_an_arrow_is_one_separator_and_what_follows_it_no_blocks_indicator(text: str) -> None:
    """``=>`` (a Perl or Ruby hash's) is read whole, so its ``>`` is never a block's
    indicator, read as one at the first pass and as a value at the next."""
    out, _ = redact(text, _PATTERNS)
    assert redact(out, _PATTERNS) == (out, 0)


def _arguments(args: object) -> tuple[object, int]:
    call = {"id": "c1", "function": {"name": "write", "arguments": json.dumps(args)}}
    out, n = redact_written({"role": "assistant", "content": None, "tool_calls": [call]}, _PATTERNS)
    return json.loads(out["tool_calls"][0]["function"]["arguments"]), n


def test_these_shapes_in_a_calls_arguments_are_redacted_and_stay_json() -> None:
    """In JSON text a file's lines and a string's quotes are escapes: the block's lines and
    the string holding JSON are read through them, and the arguments stay JSON."""
    read, n = _arguments({"path": "values.yaml", "content": "db:\n  password: |\n    s3cr3t\n"})
    assert n == 1 and read == {
        "path": "values.yaml",
        "content": f"db:\n  password: |\n    {REDACTED}\n",
    }
    read, n = _arguments({"file": json.dumps({"SecretString": _LONG_SECRET})})
    assert n == 1 and read == {"file": json.dumps({"SecretString": REDACTED})}
    read, n = _arguments({"file": json.dumps({"client_secret": "k" * 700, "y": 2})})
    assert n == 1 and read == {"file": json.dumps({"client_secret": REDACTED, "y": 2})}
    read, n = _arguments({"env": [{"value": "hunter2secret", "name": "DB_PASSWORD"}]})
    assert n == 1 and read == {"env": [{"value": REDACTED, "name": "DB_PASSWORD"}]}
    read, n = _arguments({"content": "- value: hunter2secret\n  name: DB_PASSWORD\n"})
    assert n == 1 and read == {"content": f"- value: {REDACTED}\n  name: DB_PASSWORD\n"}


def test_a_block_in_json_text_ends_with_its_string() -> None:
    """In JSON text a block's lines end at the quote that closes their string (a file written
    with no line's end after the block), and the text stays JSON; in bare text a line holds
    what it holds, a backslash too."""
    content = "kind: Secret\nstringData:\n  password: |\n    s3cr3t"
    read, n = _arguments({"path": "v.yaml", "content": content, "mode": "w"})
    written = content.replace("s3cr3t", REDACTED)
    assert n == 1 and read == {"path": "v.yaml", "content": written, "mode": "w"}
    text = json.dumps({"content": content}) + "\nnext"
    assert redact(text, _PATTERNS) == (json.dumps({"content": written}) + "\nnext", 1)
    bare = 'password: |\n  s3cr3t\\n"two"\n  three\nuser: bob\n'
    out = f"password: |\n  {REDACTED}\nuser: bob\n"
    assert redact(bare, _PATTERNS) == (out, 1)


def test_long_blocks_and_strings_under_keys_cost_linear_time() -> None:
    """Each block or string holding JSON is read once from its key, however many keys and
    values lie in and around it, and one left open runs only to its bound; a value first
    whose name never comes is read a bounded distance on."""
    costs = []
    for k in (1, 4):
        block = "password: |\n" + "  value: |\n    token: |\n" * 500 * k
        string = '"secret": "{\\"' + '\\"value\\": \\"password: x, ' * 2_000 * k
        near = (
            ('"value": "' + "a" * 490 + '", ' + " " * 60 + "value=" + "a&" * 250 + ",\n") * 20 * k
        )
        text = block + string + '"value": "x" ' * 2_000 * k + near
        start = time.process_time()
        redact(text, _PATTERNS)
        costs.append(time.process_time() - start)
    assert costs[1] < 8 * max(costs[0], 1e-3) and costs[1] < 1.5, costs


def test_a_block_however_many_lines_is_redacted_whole() -> None:
    """A block past 2,000 lines (a secret's bundle) loses every line: read to a bound, the
    lines past it stayed, though as indented as the rest."""
    text = "password: |\n" + "  QQ\n" * 3000 + "user: x\n"
    for written in (text, json.dumps({"content": text})):
        out, n = redact(written, _PATTERNS)
        assert n == 1 and "Q" not in out and "user: x" in out


def test_values_first_whose_blocks_hold_each_other_cost_linear_time() -> None:
    """A ``value: |`` whose name never follows is read a bounded number of lines on, once:
    each such key's block held every later one, and each was read again from every one of
    them, then given back a line at a time looking for the name (30 KB took seconds). One
    written first whose name does follow its block is still read."""
    text = "value: |\n  x\n" + "  value: |\n  x\n" * 2000
    assert redact(text, _PATTERNS) == (text, 0)
    assert_linear(lambda n: "value: |\n  x\n" + "  value: |\n  x\n" * n, 2000)
    kept = "- value: |\n    hunter2\n    two\n  name: DB_PASSWORD\n"
    assert redact(kept, _PATTERNS) == (kept.replace("hunter2\n    two", REDACTED), 1)


def test_a_value_first_block_is_read_to_the_64_lines_the_readme_names() -> None:
    """A block of a value given before its name is redacted up to 64 lines, and one longer
    is left whole (README, Redaction), not one line more or less."""
    for lines, count in ((64, 1), (65, 0)):
        block = "".join(f"    L{i:03d}x\n" for i in range(lines))
        text = "- value: |\n" + block + "  name: DB_PASSWORD\n"
        assert redact(text, _PATTERNS)[1] == count, lines


def test_a_secret_in_a_blocks_indicator_comment_is_redacted_at_once() -> None:
    """A key and value in the comment after a block's indicator (``password: |  # old
    password: hunter2``) are redacted with the block's lines, at the first pass."""
    for text in (
        "password: |  # old password: hunter2\n  newsecret\n",
        "DB_PASSWORD: >-  # was token=hunter2\n  newsecret\n",
    ):
        out, n = redact(text, _PATTERNS)
        assert (out, n) == (text.replace("hunter2", REDACTED).replace("newsecret", REDACTED), 2)
        assert redact(out, _PATTERNS) == (out, 0)
    read, n = _arguments({"content": "password: |  # old pwd: hunter2\n  newsecret\n"})
    assert n == 2 and read == {"content": f"password: |  # old pwd: {REDACTED}\n  {REDACTED}\n"}


def test_a_string_longer_than_a_mebibyte_is_redacted_whole() -> None:
    """A quoted value past 1 MiB (a Kubernetes Secret's limit) is redacted to its closing
    quote: read to that limit, its tail past it went upstream, and a second pass never read
    it (the value then begins with the marker)."""
    for text in ('{"secret": "' + "Q" * ((1 << 20) + 7) + '"}', 'password: "' + "Q" * (3 << 20)):
        for written in (text, json.dumps({"content": text + '"'})):
            out, n = redact(written, _PATTERNS)
            assert n == 1 and "Q" not in out and redact(out, _PATTERNS) == (out, 0)
    # one left open at its line's end past 1 MiB is no prose: all of its line goes
    text = 'password: "' + "Q" * ((1 << 20) + 7) + "\nnext"
    assert redact(text, _PATTERNS) == ('password: "' + REDACTED + "\nnext", 1)


def test_a_blocks_line_however_long_is_redacted_whole() -> None:
    """A block's line past 20,000 characters (a one-line base64 blob under ``secret: |``)
    is the block's to its end: a line read to a bound left its tail visible, or, as the
    block's first, no block at all."""
    for text in ("secret: |\n  " + "Q" * 25000 + "\nuser: x\n", "pwd: |\n  a\n  " + "Q" * 25000):
        for written in (text, json.dumps({"content": text})):
            out, n = redact(written, _PATTERNS)
            assert n == 1 and "Q" not in out and redact(out, _PATTERNS) == (out, 0)


@pytest.mark.parametrize(
    "text", ["**THE SERVICE CREDENTIALS:**\nUser: x", "password: ********\n", "| Token: *** |"]
)
def test_asterisks_alone_are_no_value(text: str) -> None:
    """A value of asterisks alone is a Markdown heading's closing mark or a masked secret,
    never one: a task prompt's ``**… CREDENTIALS:**`` lost its bold mark."""
    assert redact(text, _PATTERNS) == (text, 0)


_FRAGMENTS = (
    *("password", "api_key", "DB_PASSWORD", "token", "- name: DB_PASSWORD", "value", "name"),
    *(":", "=", "=>", ": |", ": >-", ": |  # c", " |", "\n", "\\n", "\r\n", "  ", "    ", "\t"),
    *("\\t", "1\t", "  12\t", "12\u2192", "12\\u2192", "7:", '"', '\\"', "'", "#", "# c", "-"),
    *("abc123", "s3cr3t", "user: bob", "x" * 30, "y" * 520, '{\\"a\\": 1}', "{", "}", ",", "&"),
    *(REDACTED, "\\", "\\\\", " ", "aGVsbG8=", "**", "a=>b"),
)


def test_the_shapes_redacted_again_are_unchanged() -> None:
    """Blocks, numbered lines, comments, separators and long strings mixed at random (seeded):
    what one pass leaves, a second leaves as it is."""
    rng = random.Random(69)
    for _ in range(4000):
        text = "".join(rng.choice(_FRAGMENTS) for _ in range(rng.randint(2, 40)))
        out, _ = redact(text, _PATTERNS)
        assert redact(out, _PATTERNS)[0] == out, text
