"""README's table of the codes a 400 carries ("Errors the proxy makes itself") holds to the code.

Each row's code is one the proxy sets, each OpenAI code the proxy sets has its row, and the
chat fields a row names are refused with that row's code by ``chat_body.check_body``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from proxy import errors
from proxy.api.chat_body import check_body
from proxy.api.deps import json_object
from proxy.errors import ClientRequestError
from proxy.services.memory import parse_scope
from tests.unit.readme import LINES

ROOT = Path(__file__).resolve().parents[2]
OPENAI = {
    errors.INVALID_TYPE,
    errors.BELOW_MIN,
    errors.MISSING,
    errors.EMPTY_ARRAY,
    errors.INVALID_VALUE,
}
MSG = [{"role": "user", "content": "hi"}]


def _table() -> dict[str, str]:
    """Each code of the table, with what its row says the proxy answers it for."""
    start = LINES.index("  | Code | The proxy's 400 for |")
    rows: dict[str, str] = {}
    for line in LINES[start + 2 :]:
        if not line.strip().startswith("|"):
            break
        codes, what = line.strip().strip("|").split("|", 1)
        for code in re.findall(r"`([^`]+)`", codes):
            rows[code] = what
    return rows


ROWS = _table()


def _chat_fields(code: str) -> list[str]:
    """The backticked names of ``code``'s row before its ``;`` (the chat body's part)."""
    return re.findall(r"`([^`]+)`", ROWS[code].split(";")[0])


def _refusal(body: Any) -> ClientRequestError:
    with pytest.raises(ClientRequestError) as raised:
        check_body(body)
    return raised.value


def test_the_table_holds_every_openai_code_the_proxy_sets_and_no_other() -> None:
    source = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "proxy").rglob("*.py"))
    names = {"INVALID_TYPE", "BELOW_MIN", "MISSING", "EMPTY_ARRAY", "INVALID_VALUE"}
    for name in names:  # each constant is set by a refusal somewhere, and has its row
        assert re.search(rf"code=[^\n]*\b{name}\b", source), name
        assert getattr(errors, name) in ROWS, name
    for code in set(ROWS) - OPENAI - {"null"}:  # the proxy's own, each set by the proxy
        assert f'"{code}"' in source, code


# A wrong-typed value of each chat field the invalid_type row names.
_WRONG_TYPE: dict[str, dict[str, Any]] = {
    "model": {"model": 5, "messages": MSG},
    "stream": {"stream": "yes", "messages": MSG},
    "stream_options": {"stream_options": [], "messages": MSG},
    "include_usage": {"stream_options": {"include_usage": 1}, "messages": MSG},
    "tools": {"tools": {}, "messages": MSG},
    "messages": {"messages": "hi"},
    "role": {"messages": [{"role": 1}]},
    "tool_call_id": {"messages": [{"role": "tool", "tool_call_id": 5}]},
}


def test_each_chat_field_of_the_invalid_type_row_is_refused_with_it() -> None:
    fields = _chat_fields(errors.INVALID_TYPE)
    assert set(fields) == set(_WRONG_TYPE), fields
    for name in fields:
        assert _refusal(_WRONG_TYPE[name]).code == errors.INVALID_TYPE, name
    for count in _chat_fields(errors.BELOW_MIN):  # "a count not a JSON integer"
        assert _refusal({"messages": MSG, count: 1.5}).code == errors.INVALID_TYPE, count


def test_each_count_of_the_below_min_row_is_refused_with_it() -> None:
    counts = _chat_fields(errors.BELOW_MIN)
    assert counts == ["max_tokens", "max_completion_tokens", "n"]
    for count in counts:
        refused = _refusal({"messages": MSG, count: 0})
        assert (refused.code, refused.param) == (errors.BELOW_MIN, count)


def test_the_missing_and_empty_rows_chat_cases_are_refused_with_theirs() -> None:
    assert _chat_fields(errors.MISSING) == ["messages", "role"]
    assert _refusal({"model": "m"}).code == errors.MISSING
    refused = _refusal({"messages": [{"content": "x"}]})  # named as OpenAI names it
    assert (refused.code, refused.param) == (errors.MISSING, "messages[0].role")
    assert _chat_fields(errors.EMPTY_ARRAY) == ["messages: []"]
    assert _refusal({"messages": []}).code == errors.EMPTY_ARRAY


def test_a_scope_of_no_allowed_form_is_invalid_value_and_of_another_type_invalid_type() -> None:
    assert "`scope`" in ROWS[errors.INVALID_VALUE] and "`scope`" in ROWS[errors.INVALID_TYPE]
    with pytest.raises(ClientRequestError) as raised:
        parse_scope("tenant:x")
    assert raised.value.code == errors.INVALID_VALUE
    with pytest.raises(ClientRequestError) as raised:
        parse_scope(5)  # type: ignore[arg-type]
    assert raised.value.code == errors.INVALID_TYPE


def test_a_body_that_is_no_json_or_no_object_is_null_as_its_row_says() -> None:
    assert "a body that is no JSON or no object" in ROWS["null"]
    for raw in (b'{"messages": [', b"[]"):
        with pytest.raises(ClientRequestError) as raised:
            json_object(raw)
        assert raised.value.code is None, raw
