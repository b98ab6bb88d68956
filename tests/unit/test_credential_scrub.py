"""The credential a provider call sent never comes back out of the proxy in the provider's
error: ``Upstream`` scrubs the exact ``Authorization`` it sent (the provider's ``apiKeyEnv``
key, the client's token forwarded, a baseUrl's user:password) from every error body it
surfaces, whole or streamed, and from the error object of a 2xx answer; a success is relayed
as it came. The fast model's calls read it so too (``read_fast_answer``)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from proxy.answers import scrubbed
from proxy.cascade.redaction import REDACTED
from proxy.config import ModelConfig, ProviderConfig
from proxy.credentials import scrub_bytes, scrub_text, secrets_of
from proxy.errors import UpstreamBadResponse
from proxy.provider_errors import completion
from proxy.services.fastmodel import post_fast_model, read_fast_answer
from proxy.services.relay import ClientStream, RoundOutcome, relay_round
from proxy.services.round_answer import round_response
from proxy.transport import build_client
from proxy.upstream import StreamAnswer, Upstream
from tests.fakes.replies import error
from tests.fakes.upstream import FakeUpstream

KEY = "sk-provider-0123456789"
CLIENT = "sk-client-abcdefghij"


def _echo(status: int, *, whole: bool = False) -> httpx.MockTransport:
    """A provider that quotes the Authorization it got: its token, or the whole value."""

    def answer(request: httpx.Request) -> httpx.Response:
        sent = request.headers.get("authorization", "")
        quoted = sent if whole else sent.partition(" ")[2]
        body = {"error": {"message": f"Incorrect API key provided: {quoted}.", "code": "bad"}}
        return httpx.Response(status, json=body)

    return httpx.MockTransport(answer)


def _upstream(transport: httpx.MockTransport, env: dict[str, str] | None = None) -> Upstream:
    return Upstream(build_client(transport=transport), env=env or {})


_KEYED = ProviderConfig(base_url="http://llm.test/v1", apiKeyEnv="LLM_KEY")
_KEYLESS = ProviderConfig(base_url="http://llm.test/v1")


async def _call(upstream: Upstream, provider: ProviderConfig, headers: dict[str, str]) -> Any:
    try:
        return await upstream.call(
            provider, "POST", "/chat/completions", client_headers=headers, content=b"{}"
        )
    finally:
        await upstream.client.aclose()


async def test_the_configured_key_is_scrubbed_from_an_error_body() -> None:
    upstream = _upstream(_echo(401), {"LLM_KEY": KEY + "\n"})
    answer = await _call(upstream, _KEYED, {"authorization": f"Bearer {CLIENT}"})
    assert KEY.encode() not in answer.content
    assert answer.json()["error"]["message"] == "Incorrect API key provided: [REDACTED]."


async def test_the_clients_forwarded_token_is_scrubbed_from_an_error_body() -> None:
    answer = await _call(_upstream(_echo(500)), _KEYLESS, {"authorization": f"Bearer {CLIENT}"})
    assert answer.status_code == 500
    assert answer.json()["error"]["message"] == "Incorrect API key provided: [REDACTED]."


async def test_a_base_urls_user_and_password_are_scrubbed_in_every_spelling() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        sent = request.headers["authorization"]
        return httpx.Response(403, text=f"refused {sent} (user:pa55word-xyz, pa55word-xyz)")

    provider = ProviderConfig(base_url="http://user:pa55word-xyz@llm.test/v1")
    got = await _call(_upstream(httpx.MockTransport(answer)), provider, {})
    basic = base64.b64encode(b"user:pa55word-xyz").decode()
    assert basic not in got.text and "pa55word" not in got.text
    assert got.text == "refused Basic [REDACTED] ([REDACTED], [REDACTED])"


async def test_a_key_a_provider_wrote_with_json_escapes_is_scrubbed_as_parsed() -> None:
    """A JSON writer may escape any character (.NET's writes ``+`` as ``\\u002B``): no
    spelling of the key is in the bytes, and a client's parser reads it out whole. Such a
    body goes written again, scrubbed; one without goes byte for byte."""

    def answer(request: httpx.Request) -> httpx.Response:
        token = request.headers["authorization"].partition(" ")[2]
        quoted = token.replace("-", "\\u002D")
        return httpx.Response(400, text='{"error": {"message": "bad key: ' + quoted + '"}}')

    got = await _call(
        _upstream(httpx.MockTransport(answer)), _KEYLESS, {"authorization": f"Bearer {CLIENT}"}
    )
    assert CLIENT not in json.dumps(got.json(), ensure_ascii=False), got.content
    assert got.json()["error"]["message"] == "bad key: [REDACTED]"
    other = b'{"error":  {"message": "caf\\u00e9 is closed"}}'  # an escape, no key: as it came
    mock = httpx.MockTransport(lambda _: httpx.Response(400, content=other))
    plain = await _call(_upstream(mock), _KEYLESS, {"authorization": f"Bearer {CLIENT}"})
    assert plain.content == other


def test_escapes_are_read_for_the_key_in_every_member_and_only_there() -> None:
    """A key an escape spells in a member a later duplicate hides from ``json`` still goes
    (a first-wins parser reads it); a body no escape spells a key in goes byte for byte,
    even where writing it again would spell a digits-only password in a number (``1e6``)."""
    bearer = httpx.Request("POST", "https://p/", headers={"authorization": f"Bearer {CLIENT}"})
    hidden = CLIENT.replace("-", "\\u002d")
    dup = ('{"error": {"message": "' + hidden + '"}, "error": {"message": "caf\\u00e9"}}').encode()
    assert b"u002d" not in scrubbed(401, dup, bearer), scrubbed(401, dup, bearer)
    pair = base64.b64encode(b"user:1000000").decode()
    basic = httpx.Request("POST", "https://p/", headers={"authorization": f"Basic {pair}"})
    number = b'{"error": {"message": "caf\\u00e9", "retry": 1e6}}'
    assert scrubbed(400, number, basic) == number
    astral = base64.b64encode("user:hunter\U0001f600x".encode()).decode()
    emoji = httpx.Request("POST", "https://p/", headers={"authorization": f"Basic {astral}"})
    pairs = b'{"error": {"message": "\\u0068unter\\ud83d\\ude00x"}}'  # a surrogate pair
    assert json.loads(scrubbed(401, pairs, emoji))["error"]["message"] == REDACTED


async def test_a_success_is_relayed_as_it_came() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"choices": [], "note": request.headers["authorization"]})

    got = await _call(_upstream(httpx.MockTransport(answer)), _KEYLESS, {"authorization": CLIENT})
    assert got.json()["note"] == CLIENT


async def test_an_error_object_sent_as_a_success_is_a_502_without_the_key() -> None:
    got = await _call(_upstream(_echo(200)), _KEYLESS, {"authorization": f"Bearer {CLIENT}"})
    with pytest.raises(UpstreamBadResponse) as failed:
        completion(got, _KEYLESS)
    assert CLIENT not in str(failed.value) and "[REDACTED]" in str(failed.value)
    assert CLIENT not in failed.value.log_message


async def _stream(status: int, *, key: str = CLIENT) -> tuple[Upstream, StreamAnswer]:
    upstream = _upstream(_echo(status, whole=True))
    resp = await upstream.open_stream(
        _KEYLESS, "/chat/completions", client_headers={"authorization": key}, content=b"{}"
    )
    return upstream, resp


async def test_a_streamed_calls_error_body_and_its_in_band_frame_are_scrubbed() -> None:
    upstream, resp = await _stream(401)
    assert CLIENT.encode() not in await resp.aread()
    assert resp.scrub(f"frame {CLIENT}") == "frame [REDACTED]"
    await resp.aclose()
    upstream, resp = await _stream(429)
    send = asyncio.get_running_loop().create_future()
    send.set_result(resp)
    _, frame, refusal = await round_response(send, _KEYLESS)
    await upstream.client.aclose()
    assert frame is not None and refusal is not None
    assert CLIENT.encode() not in frame and b"[REDACTED]" in frame
    assert CLIENT.encode() not in bytes(refusal.body)


class _Body:
    """Stands for a StreamAnswer whose body is ``pieces``."""

    def __init__(self, *pieces: bytes) -> None:
        self.pieces = pieces

    async def aiter_bytes(self) -> Any:
        for piece in self.pieces:
            yield piece


@pytest.mark.parametrize("escaped", [False, True], ids=["plain", "escaped"])
@pytest.mark.parametrize("error_id", [None, "c-1", "c-other"], ids=["bare", "same", "realigned"])
async def test_a_streams_own_error_frame_goes_out_without_the_key(
    error_id: str | None, escaped: bool
) -> None:
    """Also with the key spelled by JSON escapes (``\\u002d``), which an SSE client parses."""
    error = {"error": {"message": f"bad key {CLIENT}", "type": "auth", "code": CLIENT}}
    if error_id is not None:  # a later round's frame takes the stream's identity, re-encoded
        error["id"] = error_id  # type: ignore[assignment]
    text = json.dumps(error)
    if escaped:
        text = text.replace(CLIENT, CLIENT.replace("-", "\\u002d"))
    body = _Body(f"data: {text}\n\n".encode(), b"data: [DONE]\n\n")
    out = RoundOutcome(scrub=lambda text: scrub_text(text, secrets_of(CLIENT)))
    client = ClientStream(head={"id": "c-1", "created": 1, "model": "m"})
    relayed = b"".join(
        [
            p
            async for p in relay_round(
                body,  # type: ignore[arg-type]
                out,
                strip_usage=False,
                intercept=False,
                keepalive=5,
                client=client,
            )
        ]
    )
    assert CLIENT.encode() not in relayed and b"bad key [REDACTED]" in relayed
    assert out.provider_error is not None and CLIENT not in out.provider_error


async def test_the_fast_models_error_names_no_credential(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    upstream = _upstream(_echo(401), {"LLM_KEY": KEY})
    job = SimpleNamespace(
        provider=_KEYED, headers={}, query=(), fast_model="fast", fast_limits=ModelConfig()
    )
    resp = await post_fast_model(upstream, job, {"messages": []})
    await upstream.client.aclose()
    status, text = read_fast_answer(job, resp)
    assert status == 401 and json.loads(text)["error"]["message"].endswith("[REDACTED].")
    assert KEY not in caplog.text


def test_the_spellings_of_a_credential() -> None:
    assert secrets_of("Bearer sk-abc") == ("sk-abc",)
    assert secrets_of("sk-bare-key") == ("sk-bare-key",)
    assert secrets_of('Bearer sk-"q"-1') == ('sk-\\"q\\"-1', 'sk-"q"-1')
    assert secrets_of("Bearer sk/abc") == ("sk\\/abc", "sk/abc")
    assert secrets_of("Bearer ") == secrets_of(None) == secrets_of("Bearer EMPTY") == ()
    # a scheme with no token (HTTP drops the space after it): no credential to scrub, and
    # the scheme's word stays in "Bearer token missing"
    assert secrets_of("Bearer") == secrets_of("Basic") == ()
    assert scrub_text("a sk-abc b", secrets_of("Bearer sk-abc")) == "a [REDACTED] b"
    assert scrub_bytes(b"a sk-abc b", secrets_of("Bearer sk-abc")) == b"a [REDACTED] b"


async def test_a_base_urls_non_ascii_password_is_scrubbed_as_a_provider_spells_it() -> None:
    """Basic auth carries the password's UTF-8 bytes: a JSON body quotes it escaped (Python's
    ``ensure_ascii``) or as it is, and the proxy's own message quotes its text."""
    password = "pässwört-xyz"

    def answer(request: httpx.Request) -> httpx.Response:
        quoted = json.dumps({"error": {"message": f"bad {password}"}})  # p\u00e4ssw\u00f6rt
        return httpx.Response(401, text=f"{quoted} raw: {password}")

    provider = ProviderConfig(base_url="http://user:p%C3%A4ssw%C3%B6rt-xyz@llm.test/v1")
    got = await _call(_upstream(httpx.MockTransport(answer)), provider, {})
    assert "xyz" not in got.text, got.text
    assert "xyz" not in got.scrub(f"bad {password}")


async def test_a_redirect_is_quoted_without_the_key_or_its_query() -> None:
    """A provider that redirects to a URL holding the key it was sent (``?key=…``) had the
    502 quote it; the message is scrubbed as a body is, and has no query at all (one may hold
    a token that is not the call's, and the message is logged as well as sent)."""
    target = f"https://llm.example/v2/{KEY}/chat?key={KEY}&sig=TOKEN-IN-QUERY#frag"
    with FakeUpstream() as fake:
        fake.script(error(302, {}, {"location": target}))
        upstream = Upstream(build_client(), env={"LLM_KEY": KEY})  # the proxy's own transport
        provider = ProviderConfig(base_url=fake.url, apiKeyEnv="LLM_KEY")
        with pytest.raises(UpstreamBadResponse) as failed:
            await _call(upstream, provider, {})
    said = str(failed.value)
    assert "answered 302, a redirect to https://llm.example/v2/[REDACTED]/chat?…; " in said, said
    assert KEY not in said and "TOKEN" not in said and "frag" not in said, said
