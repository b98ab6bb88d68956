"""``/openapi.json`` describes the memory API as it answers: the bodies its ``POST`` routes
read, every field each route answers with (and no other), and the error statuses it gives.

FastAPI documented ``POST /v1/memory`` with no request body at all and each answer as an
object of any properties, so a client generated from the document could not add a fact, and
knew no field of a fact or a suggestion; nor did it list a 404 or 403 the routes answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import StartProxy
from tests.integration.api.limited_keys import LIMITED, client, start_with_limited_key
from tests.integration.api.memory_suggestions import suggest

FACTS = "/v1/memory"
FACT = "/v1/memory/{fact_id}"
SUGGESTIONS = "/v1/memory/suggestions"
ACCEPT = "/v1/memory/suggestions/{suggestion_id}/accept"
REJECT = "/v1/memory/suggestions/{suggestion_id}/reject"


def _operation(doc: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    operation: dict[str, Any] = doc["paths"][path][method]
    return operation


def _answer_schema(doc: dict[str, Any], method: str, path: str, status: int) -> dict[str, Any]:
    answer = _operation(doc, method, path)["responses"][str(status)]
    schema: dict[str, Any] = answer["content"]["application/json"]["schema"]
    return schema


def _matches(answer: Any, schema: dict[str, Any], where: str) -> None:
    """``answer`` has exactly the fields ``schema`` lists, and so has each object of a
    documented array of objects in it."""
    assert isinstance(answer, dict), where
    assert set(answer) == set(schema.get("required", ())) == set(schema["properties"]), where
    for name, field in schema["properties"].items():
        items = field.get("items", {}) if isinstance(field, dict) else {}
        if "properties" in items:
            for row in answer[name]:
                _matches(row, items, f"{where} {name}")


def _body(doc: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    body = _operation(doc, method, path)["requestBody"]
    schema: dict[str, Any] = body["content"]["application/json"]["schema"]
    return schema


def test_every_memory_route_answers_the_fields_it_documents(
    http: httpx.Client, db_dsn: str
) -> None:
    suggest(db_dsn, "doc", "sug-accept", ["The build uses uv"])
    suggest(db_dsn, "doc", "sug-reject", ["The port is 8443"])
    doc = http.get("/openapi.json").json()
    calls = [
        ("post", FACTS, FACTS, {"scope": "global", "text": "The CI runs on main"}, 201),
        ("get", FACTS, FACTS, None, 200),
        ("get", SUGGESTIONS, SUGGESTIONS, None, 200),
        ("post", ACCEPT, f"{SUGGESTIONS}/sug-accept/accept", None, 200),
        ("post", REJECT, f"{SUGGESTIONS}/sug-reject/reject", None, 200),
    ]
    for method, template, path, body, status in calls:
        resp = http.request(method.upper(), path, json=body)
        assert resp.status_code == status, resp.text
        _matches(resp.json(), _answer_schema(doc, method, template, status), f"{method} {path}")
    fact_id = http.get(FACTS).json()["data"][0]["id"]
    resp = http.delete(f"{FACTS}/{fact_id}")
    assert resp.status_code == 200, resp.text
    _matches(resp.json(), _answer_schema(doc, "delete", FACT, 200), "delete")


def test_the_bodies_the_memory_routes_read_are_documented(http: httpx.Client) -> None:
    doc = http.get("/openapi.json").json()
    add = _body(doc, "post", FACTS)
    assert add["required"] == ["text"] and set(add["properties"]) == {"text", "scope"}
    assert add["properties"]["text"]["type"] == "string"
    accept = _body(doc, "post", ACCEPT)
    assert set(accept["properties"]) == {"facts"}
    assert accept["properties"]["facts"]["items"] == {"type": "string"}
    assert not _operation(doc, "post", ACCEPT)["requestBody"]["required"]


def _documented(doc: dict[str, Any], method: str, path: str, resp: httpx.Response) -> None:
    responses = _operation(doc, method, path)["responses"]
    assert str(resp.status_code) in responses, (method, path, resp.status_code, sorted(responses))
    schema = responses[str(resp.status_code)]["content"]["application/json"]["schema"]
    _matches(resp.json(), schema, f"{method} {path} {resp.status_code}")
    _matches(resp.json()["error"], schema["properties"]["error"], f"{method} {path} error")


def test_the_errors_the_memory_routes_answer_are_documented(
    http: httpx.Client, db_dsn: str
) -> None:
    suggest(db_dsn, "doc", "sug-once", ["The build uses uv"])
    assert http.post(f"{SUGGESTIONS}/sug-once/reject").status_code == 200
    doc = http.get("/openapi.json").json()
    for method, template, path, kwargs, status in [
        ("post", FACTS, FACTS, {"json": {"text": 5}}, 400),
        ("post", FACTS, FACTS, {"content": b"x" * 70_000}, 413),
        ("get", FACTS, FACTS, {"params": {"scope": "nope"}}, 400),
        ("delete", FACT, f"{FACTS}/987654", {}, 404),
        ("post", ACCEPT, f"{SUGGESTIONS}/nope/accept", {}, 404),
        ("post", ACCEPT, f"{SUGGESTIONS}/sug-once/accept", {}, 400),
        ("post", ACCEPT, f"{SUGGESTIONS}/sug-once/accept", {"content": b"x" * 70_000}, 413),
        ("post", REJECT, f"{SUGGESTIONS}/nope/reject", {}, 404),
        ("get", SUGGESTIONS, SUGGESTIONS, {"params": {"limit": "0"}}, 400),
    ]:
        resp = http.request(method.upper(), path, **kwargs)
        assert resp.status_code == status, (path, resp.text)
        _documented(doc, method, template, resp)


def test_a_limited_keys_403_is_documented(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy = start_with_limited_key(start_proxy, fake_upstream, tmp_path, monkeypatch)
    with client(proxy.origin, LIMITED) as limited:
        doc = limited.get("/openapi.json").json()
        coder = {"scope": "agent:coder", "text": "The build uses uv"}
        for method, template, path, kwargs in [
            ("get", FACTS, FACTS, {"params": {"scope": "agent:coder"}}),
            ("post", FACTS, FACTS, {"json": coder}),
        ]:
            resp = limited.request(method.upper(), path, **kwargs)
            assert resp.status_code == 403, resp.text
            _documented(doc, method, template, resp)
    assert "403" in _operation(doc, "delete", FACT)["responses"]
