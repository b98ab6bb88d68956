"""A resent history's messages are checked once: a body that extends one whose check passed
checks only its new messages, however long the history (``ResentBodies.checked``)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.api import chat_body
from proxy.errors import ClientRequestError
from proxy.services.resent import ResentBodies

KEY = ("tenant", "session")


def _history(n: int) -> list[dict[str, Any]]:
    return [{"role": "user" if i % 2 else "assistant", "content": f"m{i} " * 20} for i in range(n)]


def _checks(monkeypatch: pytest.MonkeyPatch, n: int) -> int:
    """Messages examined by the second of two requests, the second extending the first by
    two messages, over a history of ``n``."""
    examined = [0]
    real = chat_body._ID_TYPES

    class Counting(tuple[type, ...]):
        def __contains__(self, item: object) -> bool:
            examined[0] += 1
            return item in real

    monkeypatch.setattr(chat_body, "_ID_TYPES", Counting(real))
    cache = ResentBodies(min_bytes=0)
    history = _history(n)
    for extra in ([], [{"role": "user", "content": "more"}, {"role": "assistant", "content": "x"}]):
        examined[0] = 0
        body = cache.parse(KEY, orjson.dumps({"model": "m", "messages": history + extra}))
        chat_body.check_body(body, cache.checked(KEY, body))
        cache.mark_checked(KEY, body)
    return examined[0]


def test_an_extended_history_checks_only_its_new_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _checks(monkeypatch, 10) == _checks(monkeypatch, 2000) == 2


def test_a_body_whose_check_failed_is_checked_in_full_next_time() -> None:
    cache = ResentBodies(min_bytes=0)
    bad = [*_history(10), {"role": 3, "content": "x"}]
    body = cache.parse(KEY, orjson.dumps({"model": "m", "messages": bad}))
    with pytest.raises(ClientRequestError):
        chat_body.check_body(body, cache.checked(KEY, body))
    again = cache.parse(KEY, orjson.dumps({"model": "m", "messages": [*bad, *_history(2)]}))
    assert again["messages"][0] is body["messages"][0]  # the fast path, yet nothing vouched
    assert cache.checked(KEY, again) == 0
    with pytest.raises(ClientRequestError, match=r"messages\[10\]"):
        chat_body.check_body(again, cache.checked(KEY, again))


def test_only_the_body_last_parsed_under_the_key_is_vouched_for() -> None:
    cache = ResentBodies(min_bytes=0)
    raw = orjson.dumps({"model": "m", "messages": _history(10)})
    first = cache.parse(KEY, raw)
    second = cache.parse(KEY, raw)
    cache.mark_checked(KEY, first)  # no longer the cached body: ignored
    assert cache.checked(KEY, second) == 0
    cache.mark_checked(KEY, second)
    assert cache.checked(KEY, second) == 10
    assert cache.checked(None, second) == 0
