"""A tool call's ``arguments`` sent as a JSON object rather than its string (some agent
frameworks rebuild history so, and some servers take it) is text the model reads as much:
it is redacted as its JSON text, else a key quoted in one went upstream, into the store and
into the summary's input as written. What comes back is an object still, read from that
text redacted: the server that took the client's objects gets one, and the model reads
arguments in the form the client chose, whether or not a secret was found."""

from __future__ import annotations

import json
import time
from typing import Any

from proxy.cascade.redaction import REDACTED, compile_patterns
from proxy.cascade.redaction_calls import redact_written
from tests.unit.cascade.fake_credentials import AWS_ID, AWS_SECRET

_PATTERNS = compile_patterns((), use_defaults=True)


def _redacted(given: Any) -> tuple[Any, int, dict[str, Any]]:
    """``given`` as an assistant call's arguments, redacted: the arguments that come back
    (an object or a text, as given), how many were redacted, and the message."""
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": given}}
    out, n = redact_written({"role": "assistant", "content": None, "tool_calls": [call]}, _PATTERNS)
    return out["tool_calls"][0]["function"]["arguments"], n, out


def _read(got: Any) -> Any:
    """Arguments as the object they stand for, whether they came back an object or a text."""
    return got if isinstance(got, dict) else json.loads(got)


def test_arguments_given_as_an_object_are_redacted_as_their_text() -> None:
    args = {"token": AWS_ID, "opts": [f"--key={AWS_ID}", 3, None], "password": "hunter2hunter2"}
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": args}}
    msg = {"role": "assistant", "content": None, "tool_calls": [call]}
    out, n = redact_written(msg, _PATTERNS)
    assert n == 3  # the password by its key, as in the text form
    assert out["tool_calls"][0]["function"]["arguments"] == {
        "token": REDACTED,
        "opts": [f"--key={REDACTED}", 3, None],
        "password": REDACTED,
    }
    assert msg["tool_calls"][0]["function"]["arguments"]["token"] == AWS_ID  # not mutated
    legacy = {
        "role": "assistant",
        "content": None,
        "function_call": {"name": "f", "arguments": args},
    }
    assert AWS_ID not in str(redact_written(legacy, _PATTERNS)[0]["function_call"]["arguments"])


def test_an_object_without_a_match_is_the_same_message() -> None:
    call = {"id": "c1", "function": {"name": "f", "arguments": {"path": "/tmp", "n": [1, "x"]}}}
    msg = {"role": "assistant", "content": None, "tool_calls": [call]}
    assert redact_written(msg, _PATTERNS) == (msg, 0)
    assert redact_written(msg, _PATTERNS)[0] is msg


def test_arguments_nested_past_reason_are_replaced_whole() -> None:
    """A body may nest as deep as its JSON parser allows; such arguments are not let through
    for want of a text to read them as."""
    args: object = AWS_ID
    for _ in range(900):
        args = {"a": [args]}
    call = {"id": "c1", "function": {"name": "f", "arguments": args}}
    out, n = redact_written({"role": "assistant", "content": None, "tool_calls": [call]}, _PATTERNS)
    assert n == 1 and out["tool_calls"][0]["function"]["arguments"] == REDACTED


def test_a_quoted_value_in_a_string_of_the_arguments_is_redacted_and_keeps_them_json() -> None:
    """In arguments' JSON text a quoted value is escaped (``PASSWORD=\\"…\\"``): the value is
    redacted between its escaped quotes, not the backslash alone, which let the value
    through and left the arguments JSON no longer, as an object's or as a string's."""
    args = {"cmd": 'export PASSWORD="hunter2secret" && run', "key": "api_key='s3cr3tvalue'"}
    for given in (args, json.dumps(args)):
        got, n, _ = _redacted(given)
        assert type(got) is type(given)  # an object stays one, a text one
        text = got if isinstance(got, str) else json.dumps(got)
        assert n == 2 and "hunter2secret" not in text and "s3cr3tvalue" not in text, text
        assert json.loads(text) == {
            "cmd": f'export PASSWORD="{REDACTED}" && run',
            "key": f"api_key='{REDACTED}'",
        }


def test_an_entry_whose_redacted_text_is_no_json_is_redacted_whole() -> None:
    """An operator's pattern may take a quote with the secret: that entry's text redacted is
    no JSON, and its value is replaced whole; the object stays one, its other entries as
    sent."""
    patterns = compile_patterns((r"hunter2\w*\"",), use_defaults=False)
    args = {"p": "hunter2secret", "q": "plain"}
    call = {"id": "c1", "function": {"name": "f", "arguments": args}}
    out, n = redact_written({"role": "assistant", "content": None, "tool_calls": [call]}, patterns)
    assert n == 1 and out["tool_calls"][0]["function"]["arguments"] == {"p": REDACTED, "q": "plain"}


def test_an_object_whose_text_only_seems_to_hold_a_secret_stays_the_same_object() -> None:
    """A key word and a colon ending one string of the arguments (a prompt an agent waits
    for) read, in their JSON text, as an assignment whose quoted value runs to the next
    string: redacted so the text is JSON no longer, and the whole object went on as text.
    Each entry read alone holds no secret, and the object goes on as the client sent it."""
    for args in (
        {"expect": "Enter password:", "timeout": 5},
        {"prompt": "token:", "then": {"send": "ok"}},
        {"max_tokens": -1, "path": "/tmp"},
    ):
        call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": args}}
        msg = {"role": "assistant", "content": None, "tool_calls": [call]}
        assert redact_written(msg, _PATTERNS) == (msg, 0), args


def test_an_entry_beside_one_that_only_seems_a_secret_is_still_redacted() -> None:
    args = {"expect": "Enter password:", "timeout": 5, "opts": [{"password": "hunter2hunter2"}]}
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": args}}
    out, n = redact_written({"role": "assistant", "content": None, "tool_calls": [call]}, _PATTERNS)
    assert n == 1
    assert out["tool_calls"][0]["function"]["arguments"] == {
        "expect": "Enter password:",
        "timeout": 5,
        "opts": [{"password": REDACTED}],
    }


def test_an_unquoted_value_in_json_text_ends_at_an_escape() -> None:
    """A file an agent writes (``.env``) is one string in its call's arguments, its lines
    joined by ``\\n`` escapes: an unquoted value ran on through the lines after it, as the
    same file in a message's text does not, and one before an escaped quote took the
    escape's backslash and left the arguments JSON no longer. A doubled backslash (a
    Windows path's) is the value's; a number, a boolean or a name before an escape is no
    secret, as before a line's end."""
    env = (
        'API_KEY=abc123xyz\nDEBUG=true\nsay "token=s3cr3t" now\nPWD=C:\\new\\x\n'
        "MAX_TOKENS=100\nSECRET=true\npassword = self.password\n"
    )
    want = {
        "path": ".env",
        "content": f'API_KEY={REDACTED}\nDEBUG=true\nsay "token={REDACTED}" now\n'
        f"PWD={REDACTED}\nMAX_TOKENS=100\nSECRET=true\npassword = self.password\n",
    }
    args = {"path": ".env", "content": env}
    for given in (args, json.dumps(args)):
        got, n, _ = _redacted(given)
        assert n == 3 and _read(got) == want, got


def test_a_value_before_an_escape_is_no_call_for_what_the_next_line_holds() -> None:
    """A value is a call or a subscript (``cast(x)``, ``Sequence[T]``) only up to where it
    ends: in JSON text the check read on across an escaped line break, so a ``.env`` line's
    secret before a line with a bracket or a parenthesis (``ITEMS=[1,2]``) was let through,
    though the same file in a message's text had it redacted."""
    env = "DB_PASSWORD=hunter2\nITEMS=[1,2]\ntoken=s3cr3t\trun(x)\napi_key=cast(x)\n"
    want = f"DB_PASSWORD={REDACTED}\nITEMS=[1,2]\ntoken={REDACTED}\trun(x)\napi_key=cast(x)\n"
    args = {"path": ".env", "content": env}
    for given in (args, json.dumps(args)):
        got, n, _ = _redacted(given)
        assert n == 2 and _read(got)["content"] == want
    start = time.perf_counter()
    slashes = {"content": "password=" + "\\" * 36 + "x"}
    out, n = redact_written({"role": "user", "content": json.dumps(slashes)}, _PATTERNS)
    assert n == 1 and time.perf_counter() - start < 0.5  # a backslash run read one way


def test_arguments_text_that_only_seems_to_hold_a_secret_goes_on_as_sent() -> None:
    """The same arguments as their text: the match across two strings left the text JSON no
    longer, what the server reading them gets; read entry by entry, as an object's are,
    they hold no secret and go on as sent, and one that does is redacted and stays JSON."""
    for args in ('{"expect":"Enter password:","timeout":5}', '{"token:": 1, "n": "x"}'):
        call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": args}}
        msg = {"role": "assistant", "content": None, "tool_calls": [call]}
        assert redact_written(msg, _PATTERNS) == (msg, 0), args
    args = '{"expect":"Enter password:","timeout":5,"password":"hunter2hunter2","f":1e5}'
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": args}}
    out, n = redact_written({"role": "assistant", "content": None, "tool_calls": [call]}, _PATTERNS)
    got = out["tool_calls"][0]["function"]["arguments"]
    assert n == 1 and "hunter2" not in got
    assert json.loads(got) == {
        "expect": "Enter password:",
        "timeout": 5,
        "password": REDACTED,
        "f": 1e5,
    }


def test_arguments_text_read_entry_by_entry_keeps_a_lone_surrogate_escaped() -> None:
    args = '{"expect":"Enter password:","password":"hunter2hunter2","s":"\\ud800é"}'
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": args}}
    out, n = redact_written({"role": "assistant", "content": None, "tool_calls": [call]}, _PATTERNS)
    got = out["tool_calls"][0]["function"]["arguments"]
    assert n == 1 and "hunter2" not in got
    got.encode()  # UTF-8 carries it: the store and the upstream body can
    assert json.loads(got)["s"] == "\ud800é"


def test_a_deep_object_read_entry_by_entry_keeps_every_level() -> None:
    """Read entry by entry, an object nested as deep as its text was written is walked
    level by level without recursion, and each scalar is written once: a level was not
    replaced whole for the depth of the walk, and no level's text is written again for
    each level above it."""

    def nest(inner: object) -> object:
        for _ in range(300):
            inner = {"a": [inner], "b": 1}
        return inner

    bottom = {"expect": "Enter password:", "timeout": 5, "key": AWS_ID, "pad": "x " * 50_000}
    call = {"id": "c1", "function": {"name": "f", "arguments": nest(bottom)}}
    started = time.process_time()
    out, n = redact_written({"role": "assistant", "content": None, "tool_calls": [call]}, _PATTERNS)
    assert time.process_time() - started < 1.5
    assert n == 1
    assert out["tool_calls"][0]["function"]["arguments"] == nest({**bottom, "key": REDACTED})


def test_a_match_across_entries_that_still_parses_does_not_drop_them() -> None:
    """A PEM block's BEGIN line in one string and its END line in a later one matched as one
    block, entries between them included, and the text, still JSON, read back without them:
    the object lost its keys. Its shape changed, it is read entry by entry."""
    args = {
        "a": "-----BEGIN PRIVATE KEY-----",
        "n": 1,
        "b": "-----END PRIVATE KEY-----",
        "c": "x",
    }
    for given in (args, json.dumps(args)):
        got, n, _ = _redacted(given)
        got = _read(got)
        assert n >= 1 and list(got) == ["a", "n", "b", "c"], got
        assert got["a"] == REDACTED and got["n"] == 1 and got["c"] == "x"


def test_a_container_s_key_is_read_as_its_json_text_like_a_scalar_s() -> None:
    """Read entry by entry, an object's key whose value is a container is read as its JSON
    text, as a scalar's entry and the whole text read it: read as bare text, a value that
    ends the key (``"token=s3cret"``) was read otherwise, so the key was redacted or not by
    whether a sibling sent the object entry by entry, and the summary's input, redacted
    again from the stored row, differed from the row. A number there (``"token=5"``) is no
    secret read either way."""
    alone = {"timeout": 5, "token=5": [1], "token=s3cret": {"a": 1}}
    beside = {"expect": "Enter password:", **alone}
    want = {"timeout": 5, "token=5": [1], "token=[REDACTED]": {"a": 1}}
    for args, expected in ((alone, want), (beside, {"expect": "Enter password:", **want})):
        call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": args}}
        msg = {"role": "assistant", "content": None, "tool_calls": [call]}
        once, n = redact_written(msg, _PATTERNS)
        assert n == 1 and once["tool_calls"][0]["function"]["arguments"] == expected
        assert redact_written(once, _PATTERNS) == (once, 0)


def test_a_pem_block_across_entries_is_redacted_in_every_entry_it_spans() -> None:
    """A key written as its lines (an array of them, or one entry each) is one block across
    strings: the whole text matched it BEGIN to END, and read entry by entry each string
    was read alone, so the BEGIN line was redacted and the body after it went on as sent.
    Every string from the BEGIN line to the END line is the key's; what follows is not."""
    lines = ["-----BEGIN RSA PRIVATE KEY-----", "MIIEpAIBAAKCAQEA7bq98", "q3P0jXh1ZbKc+/="]
    lines.append("-----END RSA PRIVATE KEY-----")
    nested = {"head": {"l": [lines[0]]}, "n": 2, "body": lines[1:3], "end": lines[3], "z": "x"}
    for args in ({"path": "k.pem", "lines": [*lines, "after"]}, nested):
        for given in (args, json.dumps(args)):
            got, n, out = _redacted(given)
            got = _read(got)
            assert n >= 1 and "MIIE" not in json.dumps(got) and "q3P0" not in json.dumps(got)
            assert redact_written(out, _PATTERNS) == (out, 0)
    assert got == {
        "head": {"l": [REDACTED]},
        "n": 2,
        "body": [REDACTED] * 2,
        "end": REDACTED,
        "z": "x",
    }


def test_a_string_ending_one_pem_block_may_open_the_next() -> None:
    """Two keys written as lines, one string holding the first's END line and the second's
    BEGIN line: the second block is open after it, and its body redacted as the first's."""
    begin, end = "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----"
    lines = [begin, "MIIEbody1AAAA", f"{end}\n{begin}", "MIIEbody2BBBB", end, "after"]
    call = {"id": "c1", "function": {"name": "f", "arguments": {"lines": lines}}}
    out, n = redact_written({"role": "assistant", "content": None, "tool_calls": [call]}, _PATTERNS)
    assert out["tool_calls"][0]["function"]["arguments"] == {"lines": [REDACTED] * 5 + ["after"]}


def test_a_quoted_key_in_a_string_of_the_arguments_is_read_as_in_the_text() -> None:
    """A JSON file an agent writes (``{"api_key": "…"}``) is one string in its call's
    arguments, its quotes escaped (``\\"api_key\\": \\"…\\"``): the key's closing quote is
    read escaped as the text's bare one, so the value is redacted there as in a message."""
    written = f'{{"api_key": "Xk9mQ2vL7pR4zz", "aws_secret_access_key": "{AWS_SECRET}", "n": 3}}'
    content, _ = redact_written({"role": "user", "content": written}, _PATTERNS)
    assert json.loads(content["content"]) == {
        "api_key": REDACTED,
        "aws_secret_access_key": REDACTED,
        "n": 3,
    }
    args = {"path": "config.json", "text": written}
    for given in (args, json.dumps(args)):
        got, n, _ = _redacted(given)
        assert n == 2 and _read(got) == {"path": "config.json", "text": content["content"]}, got


def test_a_pem_block_cut_short_in_an_array_of_lines_is_redacted_to_its_last_body_line() -> None:
    """A key written as its lines and cut short (no END line) is, as one text, redacted from
    its BEGIN line through the body's characters after it; read as an array's strings, the
    BEGIN line alone was, and the body went on as sent. The array's items after it that are
    all the body's characters are the key's; an item of other text ends it, and a string
    elsewhere (a search for the BEGIN line, then a path) is not read as its body."""
    begin = "-----BEGIN RSA PRIVATE KEY-----"
    args = {"lines": ["head:", begin, "MIIEpAIBAAKCAQEA7bq98", "q3P0jXh1ZbKc+/=", "done."]}
    for given in (args, json.dumps(args)):
        got, n, out = _redacted(given)
        got = _read(got)
        assert got == {"lines": ["head:", *[REDACTED] * 3, "done."]}, got
        assert redact_written(out, _PATTERNS) == (out, 0)
    search = {"pattern": begin, "path": "src", "also": [begin], "in": ["src"]}
    call = {"id": "c1", "function": {"name": "f", "arguments": search}}
    out, _ = redact_written({"role": "assistant", "tool_calls": [call]}, _PATTERNS)
    got = out["tool_calls"][0]["function"]["arguments"]
    assert got["path"] == "src" and got["in"] == ["src"], got


def test_a_number_or_constant_ending_a_string_of_the_arguments_is_no_secret() -> None:
    """In JSON text a value that ends its string ends at the string's closing quote: a
    number, boolean or builtin type there (``"export MAX_TOKENS=4096"``) is no secret, as
    at a line's end in a message's text; it read as one in a call's arguments alone."""
    lines = ["export MAX_TOKENS=4096", "use_token = True", "def f(password: str", "secret=null"]
    for text in [*lines, "\n".join(lines)]:
        assert redact_written({"role": "user", "content": text}, _PATTERNS)[1] == 0, text
    args = {"cmd": "\n".join(lines), "lines": lines, "one": lines[0]}
    for given in (args, json.dumps(args), json.dumps(args, separators=(",", ":"))):
        call = {"id": "c1", "function": {"name": "f", "arguments": given}}
        msg = {"role": "assistant", "content": None, "tool_calls": [call]}
        assert redact_written(msg, _PATTERNS) == (msg, 0), redact_written(msg, _PATTERNS)
    quoted = "x = 'token=5'; y = \"password=True\""
    assert redact_written({"role": "user", "content": quoted}, _PATTERNS)[1] == 0


def test_a_tab_after_the_separator_in_a_string_of_the_arguments_is_read_as_one() -> None:
    """In JSON text a tab is an escape (``token:\\tvalue``): read as the tab it stands for
    around the separator, as in a message's text, the value after it is redacted."""
    text = "token:\tXk9mQ2vL7pR4\npassword\t=\thunter2hunter2"
    content, n = redact_written({"role": "user", "content": text}, _PATTERNS)
    assert n == 2
    args = {"cmd": text, "lines": text.split("\n")}
    want = {"cmd": content["content"], "lines": content["content"].split("\n")}
    for given in (args, json.dumps(args)):
        got, n, out = _redacted(given)
        assert n == 4 and _read(got) == want, got
        assert redact_written(out, _PATTERNS) == (out, 0)


def test_keys_that_redact_to_the_same_text_keep_both_entries() -> None:
    """Two keys redacted to one text (``token=abc1`` and ``token=xyz2``) made one entry,
    the last, and the first entry's value was gone from what the model and the server read.
    The later one takes its place in the object after its key (``token=[REDACTED] (2)``),
    in either form."""
    args = {"token=abc1": "a", "n": 3, "token=xyz2": {"b": 2}, "password=[REDACTED]": [1]}
    want = {
        "token=[REDACTED]": "a",
        "n": 3,
        "token=[REDACTED] (3)": {"b": 2},
        "password=[REDACTED]": [1],
    }
    for given in (args, json.dumps(args)):
        got, n, out = _redacted(given)
        assert n == 2 and _read(got) == want and type(got) is type(given)
        assert redact_written(out, _PATTERNS) == (out, 0)
