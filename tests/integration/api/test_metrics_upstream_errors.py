"""Provider calls that failed are counted by provider and how: a stream that broke off is a
200 in ``cascade_requests_total`` (its answer had begun), and a provider's 429 relayed is the
client's status there, not the provider's, so an alert on provider failures had no series to
read; ``cascade_upstream_errors_total{provider,error_type}`` is it, ``error_type`` as the
call's span has it."""

from __future__ import annotations

from tests.fakes.replies import rate_limited, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.test_metrics import CHAT_ROUTE, post_chat, scrape


def test_failed_provider_calls_are_counted_by_how_they_failed(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(
        rate_limited(1),
        reply("a b c d e f", chunks=6, reset_after=3),
        reply("fine"),
    )
    assert post_chat(proxy.origin, CHAT_ROUTE, "e1").status_code == 429
    broken = post_chat(proxy.origin, CHAT_ROUTE, "e2", stream=True)
    assert broken.status_code == 200 and "broke off" in broken.text
    assert post_chat(proxy.origin, CHAT_ROUTE, "e3").status_code == 200
    m = scrape(proxy.origin)
    assert m.types["cascade_upstream_errors"] == "counter"
    errors = {
        s.labels["error_type"]: s.value
        for s in m.samples
        if s.name == "cascade_upstream_errors_total"
    }
    assert errors == {"429": 1, "ReadError": 1}
    assert m.value("cascade_upstream_errors_total", provider="openai") == 2
