"""A provider's error whose body is no JSON (a gateway's HTML 502, a plain-text 503) as the
official SDK reads it through the proxy: it said only ``Error code: 502``, the same as for the
proxy's own 502, and now names the provider and the page; the status and the retry headers
stay, so the SDK retries as it did, and the proxy logs the provider's answer once a call."""

from __future__ import annotations

import time
from pathlib import Path

import openai
import pytest

from tests.fakes.replies import raw
from tests.fakes.upstream import CHAT, MODELS, FakeUpstream
from tests.integration.api.conftest import Records, StartProxy, write_config

_CHAT = {"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}]}
_PAGE = "<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
PAGES = {
    "html-502": (
        raw(_PAGE, status=502, headers={"content-type": "text/html", "retry-after-ms": "300"}),
        "an HTML page titled '502 Bad Gateway'",
    ),
    "text-503": (
        raw("no healthy upstream", status=503, headers={"retry-after-ms": "300"}),
        "no healthy upstream",
    ),
}


@pytest.mark.parametrize("case", list(PAGES))
def test_an_error_page_names_the_provider_and_is_retried_as_before(
    case: str,
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    records: Records,
) -> None:
    answer, said = PAGES[case]
    status = answer.status
    proxy = start_proxy(write_config(tmp_path / "a.json", fake_upstream.url))
    fake_upstream.script(*[answer] * 4, endpoint=CHAT)
    fake_upstream.script(answer, endpoint=MODELS)
    client = openai.OpenAI(base_url=f"{proxy.origin}/v1", api_key="sk-client-x", max_retries=1)
    calls = [
        lambda: client.chat.completions.create(**_CHAT),  # type: ignore[call-overload]
        lambda: client.chat.completions.create(**_CHAT, stream=True),  # type: ignore[call-overload]
        lambda: client.with_options(max_retries=0).models.list(),
    ]
    for call in calls:
        began = time.monotonic()
        with pytest.raises(openai.InternalServerError) as raised:
            call()
        err = raised.value
        assert err.status_code == status and err.code == str(status), err.body
        assert err.message.startswith(f"Error code: {status} - the provider 'openai' at http")
        assert err.message.endswith(f"answered {status} with no JSON error: {said}")
        assert err.response.headers["retry-after-ms"] == "300"
    assert time.monotonic() - began < 5
    assert len(fake_upstream.requests) == 5  # each chat retried once, after its Retry-After
    said_by_proxy = [
        r.getMessage() for r in records.records if f"answered {status}" in r.getMessage()
    ]
    assert len(said_by_proxy) == 5, said_by_proxy  # one line for each of the provider's answers
