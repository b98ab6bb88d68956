"""/openapi.json: every route is in it, with its path parameters, and the document is valid."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient
from openapi_spec_validator import validate

from proxy.app import create_app
from proxy.settings import Settings
from tests.unit import design

_DOCS = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}  # the document itself


def _is_console(path: str) -> bool:
    """The web console's page and static files (proxy/ui): not part of the API."""
    return path == "/ui" or path.startswith("/ui/")


def _app(tmp_path: Path) -> Any:
    config = tmp_path / "agents.json"
    config.write_text(json.dumps({"providers": {"openai": {"baseUrl": "http://127.0.0.1:9/v1"}}}))
    return create_app(Settings(config=config))


def test_the_document_validates_and_lists_every_route_with_its_path_parameters(
    tmp_path: Path,
) -> None:
    app = _app(tmp_path)
    doc = app.openapi()
    validate(doc)  # OpenAPI 3.1; also checks each templated path parameter is declared
    routes = [
        r
        for r in iter_route_contexts(app.routes)
        if r.path not in _DOCS and not _is_console(r.path)
    ]
    assert {"/v1/chat/completions", "/s/{session_id}/v1/chat/completions"} <= {
        r.path for r in routes
    }
    for route in routes:
        path = re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)  # as documented: no converter
        operations = doc["paths"].get(path)
        assert operations is not None, f"{path} is not in /openapi.json"
        for method in route.methods - {"HEAD"}:
            operation = operations[method.lower()]
            declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
            assert declared == set(re.findall(r"\{([^}]+)\}", path)), (method, path)


def test_the_chat_operation_describes_its_json_body(tmp_path: Path) -> None:
    doc = _app(tmp_path).openapi()
    body = doc["paths"]["/v1/chat/completions"]["post"]["requestBody"]
    assert body["required"] is True
    schema = body["content"]["application/json"]["schema"]
    assert schema["required"] == ["messages"] and schema["additionalProperties"] is True


def test_the_chat_body_documents_the_counts_the_proxy_refuses(tmp_path: Path) -> None:
    """``max_tokens``, ``max_completion_tokens`` and ``n`` below 1 or of another type are the
    proxy's 400 (``chat_body.check_body``): the body's schema says so, as it does for the other
    fields it checks, so a client built from the document does not send one it calls valid.
    ``n`` is at most 128, as OpenAI's own document has it (each choice is an answer)."""
    doc = _app(tmp_path).openapi()
    for path in ("/v1/chat/completions", "/s/{session_id}/v1/chat/completions"):
        body = doc["paths"][path]["post"]["requestBody"]
        props = body["content"]["application/json"]["schema"]["properties"]
        assert {"model", "stream", "stream_options", "tools", "messages"} <= set(props)
        for name in ("max_tokens", "max_completion_tokens"):
            assert props[name] == {"type": ["integer", "null"], "minimum": 1}, name
        assert props["n"] == {"type": ["integer", "null"], "minimum": 1, "maximum": 128}


def test_n_past_the_documented_most_is_forwarded_not_refused() -> None:
    """The document's 128 is OpenAI's most, which the provider judges: another provider may
    take more, so the proxy refuses only what it checks (below 1, not an integer)."""
    from proxy.api.chat_body import check_body

    for n in (128, 129, 2**57):
        check_body({"messages": [{"role": "user", "content": "hi"}], "n": n})


def _operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, op)
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
        if isinstance(op, dict) and "responses" in op
    ]


def test_a_malformed_request_is_documented_as_the_400_it_answers(tmp_path: Path) -> None:
    """The validation handler answers a bad query or path parameter with an OpenAI-shaped
    400; FastAPI's 422 ``HTTPValidationError`` is never sent, so it is not documented."""
    doc = _app(tmp_path).openapi()
    assert "HTTPValidationError" not in doc.get("components", {}).get("schemas", {})
    for path, method, op in _operations(doc):
        assert "422" not in op["responses"], (method, path)
        if op.get("parameters") and not path.endswith("/chat/completions"):  # its: "default"
            error = op["responses"]["400"]["content"]["application/json"]["schema"]
            assert error["required"] == ["error"], (method, path)
    validate(doc)


_IDS = ["a.b:c-d_E", "...", "..", "a/b", "a" * 129]


def test_the_session_routes_describe_what_they_take_and_give(tmp_path: Path) -> None:
    doc = _app(tmp_path).openapi()
    branch = doc["paths"]["/v1/sessions/{session_id}/branch"]["post"]
    assert branch["requestBody"]["required"] is False
    schema = branch["requestBody"]["content"]["application/json"]["schema"]
    assert schema["properties"]["id"]["type"] == "string"
    events = doc["paths"]["/v1/sessions/{session_id}/events"]["get"]
    assert set(events["responses"]["200"]["content"]) == {"text/event-stream"}
    headers = [p["name"] for p in events["parameters"] if p["in"] == "header"]
    assert headers == ["Last-Event-ID"]
    listed = {p["name"]: p for p in doc["paths"]["/v1/sessions"]["get"]["parameters"]}
    assert set(listed) == {"limit", "offset", "q", "cursor"}
    assert (
        listed["q"]["schema"]["maxLength"] == 1000
        and "id, agent or model" in (listed["q"]["description"])
    )
    assert "next_cursor" in listed["cursor"]["description"]
    checked = 0
    for path, _, op in _operations(doc):
        for param in op.get("parameters", []):
            if param["name"] == "session_id" and path.startswith("/v1/sessions/"):
                checked += 1
                pattern = re.compile(param["schema"]["pattern"])  # ECMA's syntax here too
                assert [bool(pattern.search(s)) for s in _IDS] == [True, True, False, False, False]
                assert "404" in op["responses"], path
                assert "default" in op["responses"], path  # a 401, a 502, a 503...
    assert checked >= 8  # show, delete, messages, events, a tool output, branch, compact, reset
    validate(doc)


def test_a_fact_delete_is_documented_as_the_fact_deleted(tmp_path: Path) -> None:
    # as a session's delete, and OpenAI's: the deleted resource's object type, its id, deleted
    doc = _app(tmp_path).openapi()
    answer = doc["paths"]["/v1/memory/{fact_id}"]["delete"]["responses"]["200"]
    schema = answer["content"]["application/json"]["schema"]
    assert schema["required"] == ["id", "object", "deleted"]
    assert schema["properties"]["object"] == {"type": "string", "enum": ["memory.fact"]}
    assert schema["properties"]["id"]["type"] == "integer"


def test_every_session_and_memory_route_documents_its_other_errors(tmp_path: Path) -> None:
    """A proxy with keys answers each of them a 401 without one, and a 503 while its
    database is away: ``GET /v1/sessions``, naming no session, listed neither."""
    doc = _app(tmp_path).openapi()
    for path, method, op in _operations(doc):
        if path.startswith(("/v1/sessions", "/v1/memory")):
            assert "default" in op["responses"], (method, path)
            assert "401" in op["responses"]["default"]["description"], (method, path)


_ROOT = Path(__file__).resolve().parents[2]
_NAMED = re.compile(r"`(GET|POST|DELETE|PUT|PATCH)(?:/(GET|POST|DELETE))* (/[^`?\s]*)[^`]*`")
_NOT_SERVED = {("GET", "/v1/models/"), ("GET", "/v1/chat/completions/{id}")}  # README says so
"""Routes README names only to say the proxy answers them with ``unknown_url``."""


def _spelt(path: str) -> str:
    """A route as the docs spell it: every id parameter but a tool call's and a model's is
    ``{id}``."""
    return re.sub(r"\{(session|suggestion|fact)_id\}", "{id}", path)


def _named(text: str) -> set[tuple[str, str]]:
    """Each ``METHOD /path`` a document names in backticks, with its ``a|b`` alternatives
    and ``GET/POST/DELETE`` methods spelt out and its query left off."""
    named = set()
    for match in _NAMED.finditer(text):
        methods = [m for m in re.findall(r"GET|POST|DELETE|PUT|PATCH", match[0].split(" ")[0])]
        head, _, alternatives = match[3].rpartition("/")
        for tail in alternatives.split("|"):
            named |= {(method, f"{head}/{tail}") for method in methods}
    return named


def test_every_operation_is_one_readme_names_and_the_reverse(tmp_path: Path) -> None:
    """README's Endpoints is the API's manual: an operation added to the app, or one README
    names that the app no longer has, fails here. The ``/s/{session_id}/v1/…`` forms are the
    one sentence README gives them, each a ``/v1/…`` operation's copy."""
    doc = _app(tmp_path).openapi()
    served = {(method.upper(), _spelt(path)) for path, method, _ in _operations(doc)}
    prefixed = {(m, p) for m, p in served if p.startswith("/s/")}
    assert {(m, p.removeprefix("/s/{id}")) for m, p in prefixed} <= served
    readme = (_ROOT / "README.md").read_text(encoding="utf-8")
    endpoints = readme.split("\n## Endpoints\n")[1].split("\n### ")[0]
    assert "and the same under `/s/{session_id}/v1/…`" in " ".join(endpoints.split())
    assert served - prefixed - _named(endpoints) == set()
    assert _named(readme) - _NOT_SERVED - served == {("GET", "/models"), ("GET", "/models/{model}")}
    # those two are a provider call's span names (Tracing), the provider's paths


def test_every_operation_design_names_is_served_as_it_is_named(tmp_path: Path) -> None:
    """DESIGN's names are fixed: each endpoint it lists is an operation, but the collection's
    ``DELETE /v1/memory``, which README Endpoints says is ``DELETE /v1/memory/{id}``."""
    doc = _app(tmp_path).openapi()
    served = {(method.upper(), _spelt(path)) for path, method, _ in _operations(doc)}
    assert design.ENDPOINTS - served == {("DELETE", "/v1/memory")}
    readme = " ".join((_ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "`DELETE /v1/memory/{id}` answers" in readme


def test_the_endpoints_held_as_designs_are_the_ones_it_names() -> None:
    assert _named(design.design_text()) == design.ENDPOINTS


def test_readyz_documents_its_body_and_each_events_value(tmp_path: Path) -> None:
    """A load balancer's or a dashboard's author reads what ``/readyz`` answers from the
    document: both statuses' bodies, and the three values ``events`` takes."""
    doc = _app(tmp_path).openapi()
    responses = doc["paths"]["/readyz"]["get"]["responses"]
    for status, state in (("200", "ok"), ("503", "unavailable")):
        schema = responses[status]["content"]["application/json"]["schema"]
        assert schema["required"] == ["status", "database", "events"]
        assert schema["properties"]["status"]["enum"] == [state]
        assert schema["properties"]["events"]["enum"] == ["ok", "reconnecting", "catch-up"]


def test_every_list_paging_by_cursor_documents_its_bad_cursor_and_where_the_next_page_is(
    tmp_path: Path,
) -> None:
    """The session list answers a cursor no page gave, or one with an offset past 0, with the
    400 naming it, as the memory lists do and document; and a cursor page's next rows are at
    its next_cursor, not at an offset it never had."""
    doc = _app(tmp_path).openapi()
    for path in ("/v1/sessions", "/v1/memory", "/v1/memory/suggestions"):
        responses = doc["paths"][path]["get"]["responses"]
        assert "`cursor` no page gave" in responses["400"]["description"], path
        schema = responses["200"]["content"]["application/json"]["schema"]
        assert "next_cursor" in schema["description"], path


def test_the_embeddings_routes_document_the_400_and_413_they_answer(tmp_path: Path) -> None:
    """An embeddings body that is no JSON object is a 400, one past ``CASCADE_MAX_BODY_BYTES``
    or holding more values than ``CASCADE_MAX_BODY_VALUES`` a 413 (``deps.bounded_values``),
    on either route, in OpenAI's error shape; any other error is documented as a chat's is
    (the provider's is relayed as it came), so a client built from the document expects them."""
    doc = _app(tmp_path).openapi()
    for path in ("/v1/embeddings", "/s/{session_id}/v1/embeddings"):
        responses = doc["paths"][path]["post"]["responses"]
        for status in ("400", "413"):
            schema = responses[status]["content"]["application/json"]["schema"]
            assert schema["required"] == ["error"], (path, status)
        # a provider's error is relayed as it came: an object, its error in it as OpenAI's are
        other = responses["default"]["content"]["application/json"]["schema"]
        assert (
            other
            == doc["paths"]["/v1/chat/completions"]["post"]["responses"]["default"]["content"][
                "application/json"
            ]["schema"]
        ), path
        assert "CASCADE_MAX_BODY_VALUES" in responses["413"]["description"], path
        assert "no JSON object" in responses["400"]["description"], path
    validate(doc)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_api_pages_load_what_readme_says_they_load_from_a_cdn(
    tmp_path: Path, page: str
) -> None:
    """README tells a user offline why ``/docs`` shows blank: its scripts are jsDelivr's."""
    html = TestClient(_app(tmp_path)).get(page).text
    assert re.findall(r'(?:src|href)="https://([^/"]+)/[^"]*\.js"', html) == ["cdn.jsdelivr.net"]
    readme = " ".join((_ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "whose scripts and styles come from the jsDelivr CDN" in readme


@pytest.mark.parametrize(
    ("named", "path"),
    [
        ("`GET /v1/sessions` (", "/v1/sessions"),
        ("`GET /v1/sessions/{id}/messages` (", "/v1/sessions/{session_id}/messages"),
        ("`GET /v1/memory?scope=", "/v1/memory"),
        ("`GET /v1/memory/suggestions` lists", "/v1/memory/suggestions"),
    ],
)
def test_the_page_size_readme_gives_a_list_is_the_routes(
    tmp_path: Path, named: str, path: str
) -> None:
    """README's ``?limit=`` up to N, default M after each list it names is the route's."""
    doc = _app(tmp_path).openapi()
    (limit,) = [p for p in doc["paths"][path]["get"]["parameters"] if p["name"] == "limit"]
    readme = " ".join((_ROOT / "README.md").read_text(encoding="utf-8").split())
    after = readme.split(named, 1)[1]
    stated = re.search(r"`\?limit=` up to (\d+), default (\d+)", after)
    assert stated is not None and after.index(stated[0]) < 300, named
    assert (int(stated[1]), int(stated[2])) == (
        limit["schema"]["maximum"],
        limit["schema"]["default"],
    )


def test_the_embeddings_routes_document_their_json_body(tmp_path: Path) -> None:
    """OpenAI's ``CreateEmbeddingRequest`` (openai/openai-openapi): ``model`` and ``input``
    required, ``encoding_format`` ``float`` or ``base64``, ``dimensions`` at least 1, ``user``;
    a client or a fuzzer built from the document sends an embeddings body, not none."""
    doc = _app(tmp_path).openapi()
    for path in ("/v1/embeddings", "/s/{session_id}/v1/embeddings"):
        body = doc["paths"][path]["post"]["requestBody"]
        assert body["required"] is True, path
        schema = body["content"]["application/json"]["schema"]
        assert schema["required"] == ["model", "input"], path
        props = schema["properties"]
        assert set(props) == {"model", "input", "encoding_format", "dimensions", "user"}, path
        assert props["encoding_format"]["enum"] == ["float", "base64"]
        assert props["dimensions"] == {"type": "integer", "minimum": 1}
        kinds = [variant["type"] for variant in props["input"]["anyOf"]]
        assert kinds == ["string", "array", "array", "array"], path
    validate(doc)


def test_the_azure_embeddings_and_models_routes_document_the_deployment_and_api_version(
    tmp_path: Path,
) -> None:
    """On Azure's embeddings path the deployment is the model: a body may leave ``model``
    out (the document required it, as ``/v1/embeddings``' does), and every Azure path takes
    an ``api-version`` it keeps back, as the chat's documents."""
    doc = _app(tmp_path).openapi()
    embeddings = "/openai/deployments/{deployment}/embeddings"
    for path in (embeddings, "/s/{session_id}" + embeddings):
        operation = doc["paths"][path]["post"]
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        assert body["required"] == ["input"], path
        assert "deployment" in body["properties"]["model"]["description"], path
        assert "api-version" in [p["name"] for p in operation["parameters"]], path
    plain = doc["paths"]["/v1/embeddings"]["post"]["requestBody"]["content"]["application/json"]
    assert plain["schema"]["required"] == ["model", "input"]  # the copy left it as it was
    for path in ("/openai/models", "/openai/models/{model}", "/s/{session_id}/openai/models"):
        names = [p["name"] for p in doc["paths"][path]["get"]["parameters"]]
        assert "api-version" in names, path
    validate(doc)
