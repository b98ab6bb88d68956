"""A chat body holding more JSON values than ``max_body_values`` is a 413 before it is
parsed (``jsonio.values_count``): parsed, a body of tiny items holds many times its size.
A text's commas and brackets are no values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import StartProxy
from tests.integration.api.errors_helpers import _assert_error_shape, _http


def _post(http: httpx.Client, sid: str, **extra: Any) -> httpx.Response:
    body = {"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}], **extra}
    return http.post("/v1/chat/completions", json=body, headers={"x-session-id": sid})


def test_a_body_of_more_values_than_the_limit_is_a_413_before_it_is_parsed(
    start_proxy: StartProxy, config_path: Path, fake_upstream: FakeUpstream
) -> None:
    server = start_proxy(config_path, max_body_values=2_000)
    fake_upstream.script(reply("fine"))
    with _http(server) as http:
        tiny = [_post(http, "values", extra=[[]] * 2_000), _post(http, "values", x=[0] * 2_000)]
        # a text's commas and brackets are no values: a long one passes
        text = _post(http, "values", messages=[{"role": "user", "content": "[a], {b}, " * 900}])
        # a named history whose texts hold more commas and brackets than the limit, resent
        # longer each turn: counted where it adds (ResentBodies.counted), refused all the same
        history = [{"role": "user", "content": "[1], " * 2000}]
        turns = []
        for _ in range(3):
            fake_upstream.script(reply("fine"))
            turns.append(_post(http, "long", messages=history).status_code)
            history = [*history, {"role": "assistant", "content": "ok"}, history[0]]
        tiny.append(_post(http, "long", messages=[*history, {"role": "user", "x": [[]] * 2000}]))
    assert turns == [200, 200, 200]
    for resp in tiny:
        err = _assert_error_shape(resp, 413, "payload_too_large")
        assert "more than 2000 JSON values" in err["message"]
        assert "CASCADE_MAX_BODY_VALUES" in err["message"]
    assert text.status_code == 200, text.text
    assert len(fake_upstream.requests) == 4


def test_an_embeddings_body_of_more_values_than_the_limit_is_a_413_never_sent(
    start_proxy: StartProxy, config_path: Path, fake_upstream: FakeUpstream
) -> None:
    """The embeddings route parses its body to read ``model``: counted first, as a chat
    body is. A batch of token arrays within the limit goes on."""
    server = start_proxy(config_path, max_body_values=2_000)
    with _http(server) as http:
        tiny = [
            http.post("/v1/embeddings", json={"model": "e", "input": [[]] * 2_000}),
            http.post("/s/emb/v1/embeddings", json={"model": "e", "input": [[1, 2]] * 1_000}),
        ]
        tokens = http.post("/v1/embeddings", json={"model": "e", "input": [[1, 2, 3]] * 400})
    for resp in tiny:
        err = _assert_error_shape(resp, 413, "payload_too_large")
        assert "more than 2000 JSON values" in err["message"]
        assert "CASCADE_MAX_BODY_VALUES" in err["message"]
    assert tokens.status_code == 200, tokens.text
    assert len(fake_upstream.requests) == 1
