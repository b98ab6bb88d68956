"""The shell's token counts: a text the proxy builds anew on every request (the first user
message the summary is folded into) is tokenised once per process, not once per request."""

from __future__ import annotations

from proxy.cascade.summary import fold_summary
from proxy.cascade.tokens import MemoCounter
from proxy.tokenizers import TextCounts, counters_for


class _Bpe:
    """A per-text token function that records the texts it was asked to tokenise."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def __call__(self, text: str) -> int:
        self.texts.append(text)
        return len(text) // 4


def _history(n: int) -> list[dict[str, str]]:
    out = [{"role": "system", "content": "You are an agent."}]
    for i in range(n):
        out.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"step {i} " * 30})
    return out


def _request(cost: object, history: list[dict[str, str]], summary: str) -> None:
    """What one request does with its counter: a fresh MemoCounter seeded with the stored
    rows' counts, then the folded window counted (the summary's message is built anew)."""
    count = MemoCounter(cost)  # type: ignore[arg-type]
    for m in history:
        count.seed(m, 7)
    count(fold_summary(history[:1] + history[-40:], summary=summary, system_count=1))


def _tokenised_by_a_later_request(n: int) -> list[str]:
    bpe = _Bpe()
    _, cost = counters_for(bpe)
    history = _history(n)
    summary = "what happened so far. " * (50 + n // 4)  # it grows with the session
    _request(cost, history, summary)
    bpe.texts.clear()
    _request(cost, history, summary)
    return bpe.texts


def test_a_later_request_tokenises_nothing_the_earlier_one_did_whatever_the_history() -> None:
    assert _tokenised_by_a_later_request(200) == []
    assert _tokenised_by_a_later_request(8000) == []


def test_short_texts_are_not_remembered_and_the_cache_holds_its_bound() -> None:
    bpe = _Bpe()
    counts = TextCounts(bpe, min_chars=10, max_chars=25)
    assert counts("short") == counts("short") == 1
    assert bpe.texts == ["short", "short"]
    bpe.texts.clear()
    for text in ("a" * 12, "b" * 12, "a" * 12, "c" * 12, "b" * 12):
        counts(text)
    # "a" used again before "c" came, so "b" was the least recent and went; then "b" again
    assert bpe.texts == ["a" * 12, "b" * 12, "c" * 12, "b" * 12]
    assert counts("d" * 30) == 7 and counts("d" * 30) == 7  # longer than the bound: not kept
    assert bpe.texts[-2:] == ["d" * 30, "d" * 30]
