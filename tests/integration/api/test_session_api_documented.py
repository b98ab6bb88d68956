"""``/openapi.json`` names every field each session route answers with, and no other.

FastAPI described each answer as an object with any properties, so a client generated from
the document knew none of them; they are listed now, and this checks the list against what
the routes answer (a field added to an answer and not to ``proxy.api.session_schemas``, or
renamed, fails here).
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.integration.api.sessions_helpers import (
    chat,
    config_path,  # noqa: F401  (the module's config: a small maxChars)
    settled,
    tool_history,
)


def _schema(doc: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    ok = doc["paths"][path][method]["responses"]["200"]
    schema: dict[str, Any] = ok["content"]["application/json"]["schema"]
    return schema


def _matches(answer: Any, schema: dict[str, Any], where: str) -> None:
    assert isinstance(answer, dict), where
    assert set(answer) == set(schema["required"]) == set(schema["properties"]), where
    items = schema["properties"].get("data", {}).get("items")
    for row in answer.get("data", []) if items else []:
        _matches(row, items, where + " data")


def test_every_session_route_answers_the_fields_it_documents(http: httpx.Client) -> None:
    chat(http, tool_history(), sid="doc")
    settled(http, "doc", 4)
    doc = http.get("/openapi.json").json()
    base = "/v1/sessions/{session_id}"
    calls = [
        ("get", "/v1/sessions", "/v1/sessions", None),
        ("get", base, "/v1/sessions/doc", None),
        ("get", base + "/messages", "/v1/sessions/doc/messages", None),
        (
            "get",
            base + "/tool-outputs/{tool_call_id}",
            "/v1/sessions/doc/tool-outputs/call_ls",
            None,
        ),
        ("post", base + "/compact", "/v1/sessions/doc/compact", None),
        ("post", base + "/branch", "/v1/sessions/doc/branch", {"id": "doc-b"}),
        ("post", base + "/reset", "/v1/sessions/doc-b/reset", None),
        ("delete", base, "/v1/sessions/doc-b", None),
    ]
    for method, template, path, body in calls:
        resp = http.request(method.upper(), path, json=body)
        assert resp.status_code == 200, resp.text
        _matches(resp.json(), _schema(doc, method, template), f"{method} {path}")
