"""Bad input, generated: property-based bodies and headers (hypothesis), and requests
schemathesis derives from ``/openapi.json``, valid and invalid. Nothing answers 5xx, and
every 4xx is OpenAI-shaped (``{"error": {"message", "type", "param", "code"}}``)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from tests.fakes.upstream import FakeUpstream
from tests.reliability.conftest import Figures, ProxyServer

# Loads both cores or times the proxy: make test runs it alone, after the rest.
pytestmark = pytest.mark.heavy

AUTH = {"authorization": "Bearer sk-test-client"}
EXAMPLES = 120  # the property-based bodies
PER_OPERATION = 12  # schemathesis, per operation and generation mode


def assert_shaped(r: httpx.Response) -> None:
    assert r.status_code < 500, (r.status_code, r.text[:500])
    if r.status_code >= 400:
        err = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"}, err
        assert isinstance(err["message"], str) and err["message"]


_text = st.text(st.characters(codec="utf-8"), max_size=40)  # NULs and surrogates' neighbours
_scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), _text)
_json = st.recursive(
    _scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_text, inner, max_size=4)),
    max_leaves=12,
)
_role = st.one_of(st.sampled_from(["system", "developer", "user", "assistant", "tool"]), _json)
_message = st.fixed_dictionaries(
    {"role": _role},
    optional={"content": _json, "tool_call_id": _json, "name": _json, "tool_calls": _json},
)
_wild = st.fixed_dictionaries(
    {"messages": st.one_of(st.lists(_message, max_size=5), _json)},
    optional={
        "model": st.one_of(st.just("gpt-4o"), _json),
        "stream": _json,
        "stream_options": _json,
        "tools": _json,
        "metadata": _json,
        "max_tokens": _json,
        # the fake upstream answers n choices: a huge n would stall it, not the proxy
        "n": st.one_of(st.integers(-2, 3), _text, st.none()),
    },
)
_plausible = st.fixed_dictionaries(  # near a valid request: texts with NULs, odd ids
    {
        "model": st.just("gpt-4o"),
        "stream": st.booleans(),
        "messages": st.lists(
            st.fixed_dictionaries(
                {"role": st.sampled_from(["system", "user", "assistant"]), "content": _text}
            ),
            min_size=1,
            max_size=4,
        ),
    },
    optional={
        "metadata": st.fixed_dictionaries({"session_id": _json}),
        "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
    },
)
# Printable ASCII, without the leading or trailing blanks no HTTP client sends in a value
# (httpx refuses them before the proxy sees the request).
_header_id = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=140).map(
    str.strip
)
_body = st.one_of(_wild, _plausible)


def test_generated_bodies_and_session_ids_never_answer_5xx(
    proxy: ProxyServer, fake_upstream: FakeUpstream, figures: Figures
) -> None:
    """Property-based bodies, raw bytes and session ids: no 5xx, only OpenAI-shaped 4xx."""
    statuses: dict[int, int] = {}
    with httpx.Client(base_url=proxy.origin, headers=AUTH, timeout=20) as http:

        def check(r: httpx.Response) -> None:
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            assert_shaped(r)

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(body=_body, sid=st.one_of(st.none(), _header_id), raw=st.binary(max_size=64))
        def run(body: dict[str, Any], sid: str | None, raw: bytes) -> None:
            headers = {"x-session-id": sid} if sid is not None else {}
            check(
                http.post(
                    "/v1/chat/completions",
                    content=json.dumps(body),
                    headers={**headers, "content-type": "application/json"},
                )
            )
            check(http.post("/s/x/v1/chat/completions", content=raw))
            if sid:
                check(
                    http.get(
                        f"/v1/sessions/{httpx.URL(sid).raw_path.decode()}/messages",
                        params={"offset": sid[:8]},
                    )
                )

        run()
    figures.add(
        tried=sum(statuses.values()),
        statuses=" ".join(f"{k}×{v}" for k, v in sorted(statuses.items())),
    )


# A fixed amount of work that takes most of a minute on a loaded machine: the suite's 60 s
# timeout, a guard against hangs, cut it short there.
@pytest.mark.timeout(300)
def test_schemathesis_over_the_openapi_document_finds_no_5xx(
    proxy: ProxyServer, fake_upstream: FakeUpstream, figures: Figures
) -> None:
    """Schemathesis over /openapi.json, valid and invalid requests: no 5xx, OpenAI-shaped 4xx."""
    schema = schemathesis.openapi.from_url(f"{proxy.origin}/openapi.json")
    calls = operations = 0
    statuses: dict[int, int] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @settings(
                max_examples=PER_OPERATION,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def run(case: Any) -> None:
                nonlocal calls
                r = case.call(base_url=proxy.origin, headers=AUTH, timeout=20)
                calls += 1
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                assert r.status_code < 500, (case.method, case.path, r.status_code, r.text[:300])
                ctype = r.headers.get("content-type") or ""
                ctype = ctype[0] if isinstance(ctype, list) else ctype  # schemathesis: lists
                if r.status_code >= 400 and ctype.startswith("application/json"):
                    err = r.json()["error"]
                    assert set(err) == {"message", "type", "param", "code"}, err
                elif r.status_code >= 400:
                    raise AssertionError(f"{case.method} {case.path}: {r.status_code} not JSON")

            try:
                run()
            except Unsatisfiable:  # no invalid request exists (an operation without inputs)
                assert mode is GenerationMode.NEGATIVE
    figures.add(
        tried=calls,
        operations=operations,
        statuses=" ".join(f"{k}×{v}" for k, v in sorted(statuses.items())),
    )
