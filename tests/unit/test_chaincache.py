from __future__ import annotations

from hypothesis import given, settings, strategies as st

from proxy.history import chain
from proxy.services.chaincache import ChainCache

texts = st.text(min_size=0, max_size=5)
messages = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "tool"]), "content": texts}), max_size=8
)


@settings(max_examples=100, deadline=None)
@given(st.lists(messages, min_size=1, max_size=5))
def test_cached_chain_equals_a_fresh_chain_for_any_sequence_of_requests(
    requests: list[list[dict]],
) -> None:
    cache = ChainCache()
    for msgs in requests:
        assert cache.chain(("t", "s"), msgs) == chain(msgs)


def test_an_edit_in_the_middle_is_not_hidden_by_the_cache() -> None:
    cache = ChainCache()
    first = [{"role": "user", "content": str(i)} for i in range(10)]
    cache.chain(("t", "s"), first)
    edited = [*first[:4], {"role": "user", "content": "edited"}, *first[5:]]
    assert cache.chain(("t", "s"), edited) == chain(edited)
    assert cache.chain(("t", "s"), edited)[3] == chain(first)[3]


def test_cache_stays_within_its_message_budget() -> None:
    cache = ChainCache(max_messages=25)
    for n in range(10):
        cache.chain(("t", f"s{n}"), [{"role": "user", "content": "x"}] * 10)
    assert cache._size <= 25
    assert len(cache._entries) == 2


def test_heads_are_remembered_forgotten_and_bounded() -> None:
    cache = ChainCache(max_heads=2)
    assert cache.head(("t", "a")) is None
    cache.set_head(("t", "a"), (3, "h3"))
    cache.set_head(("t", "b"), (1, None))
    assert cache.head(("t", "a")) == (3, "h3")
    cache.set_head(("t", "a"), (5, "h5"))  # moved to the newest end
    cache.set_head(("t", "c"), (2, "h2"))  # evicts the oldest: b
    assert cache.head(("t", "b")) is None
    assert (cache.head(("t", "a")), cache.head(("t", "c"))) == ((5, "h5"), (2, "h2"))
    cache.set_head(("t", "a"), None)
    assert cache.head(("t", "a")) is None


def test_cache_stays_within_its_character_budget() -> None:
    cache = ChainCache(max_chars=3 * (100 + 4 + 1000) * 4)  # overhead, role and content
    big = [{"role": "tool", "content": "y" * 1000}] * 4
    for n in range(5):
        cache.chain(("t", f"s{n}"), big)
    assert cache._chars <= 3 * 1104 * 4 and len(cache._entries) == 3
    cache.chain(("t", "s4"), [*big, {"role": "user", "content": "z"}])  # grows past the cap
    assert cache._chars == 1104 * 4 + (1104 * 4 + 105)
    assert list(cache._entries) == [("t", "s3"), ("t", "s4")]  # the oldest made room
    cache.chain(("t", "huge"), [{"role": "tool", "content": "y" * 20_000}])  # never kept
    assert list(cache._entries) == [("t", "s3"), ("t", "s4")]


def test_a_message_of_tiny_items_weighs_what_it_holds_parsed() -> None:
    """Only content's characters were weighed: a message holding a client's field of a
    hundred thousand empty arrays weighed 100, so the budget let thousands of such
    sessions be held, each tens of megabytes parsed."""
    tiny = [{"role": "user", "content": "hi", "x": [[] for _ in range(100_000)]}]
    cache = ChainCache(max_chars=3_000_000)
    for n in range(3):
        cache.chain(("t", f"s{n}"), tiny)
    assert len(cache._entries) == 0  # each alone is past the budget
    parts = [{"role": "user", "content": [{"type": "text", "text": "y" * 1000}]}]
    cache.chain(("t", "parts"), parts)
    assert 1000 < cache._chars < 1400  # content parts weigh about their text
