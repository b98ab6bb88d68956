"""Every answer of the session and memory APIs, a success and an error alike, validates
against the schema ``/openapi.json`` gives for its route and status (the status's own, else
``default``): a client generated from the document reads what the proxy sends, types and
nullability included, not just the field names ``test_session_api_documented`` checks."""

from __future__ import annotations

from typing import Any

import httpx
from jsonschema import Draft202012Validator

from tests.integration.api.sessions_helpers import (
    chat,
    config_path,  # noqa: F401  (the module's config: a small maxChars)
    settled,
    tool_history,
)

_BASE = "/v1/sessions/{session_id}"
_OUTPUT = _BASE + "/tool-outputs/{tool_call_id}"
_CALLS: list[tuple[str, str, str, dict[str, Any] | None]] = [
    ("get", "/v1/sessions", "/v1/sessions?limit=1", None),
    ("get", "/v1/sessions", "/v1/sessions?limit=0", None),
    ("get", "/v1/sessions", "/v1/sessions?cursor=nope", None),
    ("get", _BASE, "/v1/sessions/doc", None),
    ("get", _BASE, "/v1/sessions/nobody", None),
    ("get", _BASE + "/messages", "/v1/sessions/doc/messages", None),
    ("get", _BASE + "/messages", "/v1/sessions/doc/messages?form=sent&include_superseded=1", None),
    ("get", _BASE + "/messages", "/v1/sessions/doc/messages?offset=-1", None),
    ("get", _OUTPUT, "/v1/sessions/doc/tool-outputs/call_ls", None),
    ("get", _OUTPUT, "/v1/sessions/doc/tool-outputs/call_ls?grep=a|e&limit=50", None),
    ("get", _OUTPUT, "/v1/sessions/doc/tool-outputs/call_ls?offset=99999999", None),
    ("get", _OUTPUT, "/v1/sessions/doc/tool-outputs/none", None),
    ("post", _BASE + "/compact", "/v1/sessions/doc/compact", None),
    ("post", _BASE + "/branch", "/v1/sessions/doc/branch", {"id": "doc-b"}),
    ("post", _BASE + "/branch", "/v1/sessions/doc/branch", {"id": 5}),
    ("post", _BASE + "/branch", "/v1/sessions/doc/branch", None),
    ("post", _BASE + "/reset", "/v1/sessions/doc-b/reset", None),
    ("delete", _BASE, "/v1/sessions/doc-b", None),
    ("delete", _BASE, "/v1/sessions/doc-b", None),
    ("post", "/v1/memory", "/v1/memory", {"text": "The build uses uv"}),
    ("post", "/v1/memory", "/v1/memory", {"text": 5}),
    ("get", "/v1/memory", "/v1/memory", None),
    ("get", "/v1/memory", "/v1/memory?scope=nope", None),
    ("get", "/v1/memory/suggestions", "/v1/memory/suggestions?session_id=doc", None),
    (
        "post",
        "/v1/memory/suggestions/{suggestion_id}/reject",
        "/v1/memory/suggestions/x/reject",
        None,
    ),
    ("delete", "/v1/memory/{fact_id}", "/v1/memory/1", None),
    ("delete", "/v1/memory/{fact_id}", "/v1/memory/1", None),
]


def test_every_answer_validates_against_its_documented_schema(http: httpx.Client) -> None:
    chat(http, tool_history(), sid="doc")
    settled(http, "doc", 4)
    doc = http.get("/openapi.json").json()
    seen = set()
    for method, template, path, body in _CALLS:
        resp = http.request(method.upper(), path, json=body)
        responses = doc["paths"][template][method]["responses"]
        documented = responses.get(str(resp.status_code), responses.get("default"))
        where = f"{method} {path} -> {resp.status_code}"
        assert documented is not None, where
        assert resp.headers["content-type"] == "application/json", where
        schema = documented["content"]["application/json"]["schema"]
        errors = [e.message for e in Draft202012Validator(schema).iter_errors(resp.json())]
        assert errors == [], (where, errors, resp.text[:300])
        seen.add(resp.status_code)
    assert {200, 201, 400, 404} <= seen
