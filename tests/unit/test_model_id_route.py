"""``GET /v1/models/`` (a trailing slash, no id) is no route, as README says: neither
one-model route matches it, so its 404 is the one of any unknown path, and the metrics and
the span name it ``none`` rather than the one-model route's template."""

from __future__ import annotations

import pytest
from fastapi.routing import APIRoute

from proxy.api.chat import router


def _matching(path: str) -> list[str]:
    routes = [r for r in router.routes if isinstance(r, APIRoute) and "GET" in r.methods]
    return [r.path for r in routes if r.path_regex.match(path)]


@pytest.mark.parametrize("path", ["/v1/models/", "/s/run-1/v1/models/"])
def test_a_trailing_slash_after_models_matches_no_route(path: str) -> None:
    assert _matching(path) == []


@pytest.mark.parametrize("path", ["/v1/models/gpt-4o", "/s/run-1/v1/models/org/model-1"])
def test_a_model_id_still_matches_its_route(path: str) -> None:
    assert len(_matching(path)) == 1
