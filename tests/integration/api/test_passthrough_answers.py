"""What the models and embeddings passthroughs make of a provider's answer, over loopback:
a body over the cap is a 502 naming it, with the provider's connection closed unread (the
caps lowered here, as they are read at each call); a compressed one is decoded; a provider
silent past its ``timeoutSeconds``, before its headers or mid-body, is a 504."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import httpx
import pytest

from proxy import answers
from tests.fakes.replies import error, raw
from tests.fakes.upstream import EMBEDDINGS, MODELS, FakeUpstream
from tests.integration.api.conftest import ProxyServer, StartProxy, wait_for, write_config
from tests.integration.api.errors_helpers import _assert_error_shape

_JSON = {"content-type": "application/json"}
_EMBED = {"model": "e", "input": "a"}


def _big(n: int) -> tuple[bytes, bytes]:
    """A JSON body of about ``n`` bytes, in two pieces (the second sent only much later)."""
    body = json.dumps({"object": "list", "data": [{"id": "m" * n}]}).encode()
    return body[: n // 2], body[n // 2 :]


def test_a_body_over_the_cap_is_a_502_and_its_connection_is_closed(
    proxy: ProxyServer, fake_upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(answers, "MAX_ANSWER_BYTES", 1024)
    monkeypatch.setattr(answers, "MAX_EMBEDDINGS_BYTES", 2048)
    models, embedded = (
        raw(*_big(4096), headers=_JSON, chunk_delay=10),
        raw(*_big(8192), headers=_JSON, chunk_delay=10),
    )
    fake_upstream.script(models, models, endpoint=MODELS)
    fake_upstream.script(embedded, embedded, endpoint=EMBEDDINGS)
    with httpx.Client(base_url=proxy.origin, timeout=5) as http:
        got = [
            http.get("/v1/models"),
            http.get("/s/run-1/v1/models"),
            http.post("/v1/embeddings", json=_EMBED),
            http.post("/s/run-1/v1/embeddings", json=_EMBED),
        ]
    caps = ["1024 bytes"] * 2 + ["2048 bytes"] * 2
    for answer, cap in zip(got, caps, strict=True):
        err = _assert_error_shape(answer, 502, "upstream_bad_response")
        assert f"cap of {cap}" in err["message"], err
    assert wait_for(lambda: len(fake_upstream.disconnects) == 4), fake_upstream.disconnects


def test_a_compressed_answer_is_decoded(proxy: ProxyServer, fake_upstream: FakeUpstream) -> None:
    listed = {"object": "list", "data": [{"id": "gpt-fake", "object": "model"}]}
    embedded = {"object": "list", "data": [{"embedding": [0.5]}], "usage": {"prompt_tokens": 1}}
    for body, endpoint in ((listed, MODELS), (embedded, EMBEDDINGS)):
        packed = gzip.compress(json.dumps(body).encode())
        fake_upstream.script(
            raw(packed, headers={**_JSON, "content-encoding": "gzip"}), endpoint=endpoint
        )
    with httpx.Client(base_url=proxy.origin, timeout=5) as http:
        got = [http.get("/v1/models"), http.post("/v1/embeddings", json=_EMBED)]
    assert [r.json() for r in got] == [listed, embedded]
    assert not [r for r in got if "content-encoding" in r.headers]


def test_a_provider_silent_past_its_timeout_is_a_504(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    provider = {"baseUrl": fake_upstream.url, "timeoutSeconds": 0.3, "connectTimeoutSeconds": 1}
    server = start_proxy(write_config(tmp_path / "slow.json", "", providers={"openai": provider}))
    fake_upstream.script(error(200, {"data": []}, first_byte_delay=5), endpoint=MODELS)
    fake_upstream.script(
        raw(b'{"data":', b"[]}", headers=_JSON, chunk_delay=5), endpoint=EMBEDDINGS
    )
    with httpx.Client(base_url=server.origin, timeout=5) as http:
        got = [http.get("/v1/models"), http.post("/v1/embeddings", json=_EMBED)]
    for answer in got:
        err = _assert_error_shape(answer, 504, "upstream_timeout")
        assert "timeoutSeconds" in err["message"], err
