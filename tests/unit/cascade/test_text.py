from __future__ import annotations

import time
import unicodedata

from hypothesis import given, settings, strategies as st

from proxy.cascade import commands, eviction, summary, tokens, truncation
from proxy.cascade.invisible import visible
from proxy.cascade.text import _closing_tag, content_text, quote_closing_tag

PARTS = [
    {"type": "text", "text": "first"},
    {"type": "image_url", "image_url": {"url": "data:..."}},
    {"type": "text", "text": ""},
    {"type": "refusal", "refusal": "no"},
]


def test_plain_and_empty_content() -> None:
    assert content_text("hello") == "hello"
    assert content_text(None) == ""
    assert content_text([]) == ""


def test_text_parts_join_with_newlines_and_skip_media() -> None:
    assert content_text(PARTS) == "first\nno"


def test_media_parts_are_named_for_a_summariser() -> None:
    assert content_text(PARTS, media=True) == "first\n[image_url]\nno"


def test_every_core_reader_uses_the_one_definition() -> None:
    """The token counter, the truncation stage and the summariser read the same text."""
    for module in (commands, eviction, summary, tokens, truncation):
        assert module.content_text is content_text


def test_quoting_a_closing_tag_leaves_the_rest_of_the_text_as_it_came() -> None:
    """Only the tag is rewritten: the text around it keeps its ligatures, superscripts,
    fullwidth punctuation and decomposed accents (a path or identifier the summary quotes
    verbatim, a message of the span the fast model copies from)."""
    rest = "ﬁle x² （note） cafe\u0301 ① ｶﾅ"
    text = f"{rest} `</conversation_summary>` ＜／ＣＯＮＶＥＲＳＡＴＩＯＮ_summary＞ {rest}"
    quoted = quote_closing_tag(text, "conversation_summary", "</conversation-summary>")
    assert quoted == f"{rest} `</conversation-summary>` </conversation-summary> {rest}"
    assert quote_closing_tag(rest, "conversation_summary", "</x>") == rest


def test_a_closing_tag_split_by_a_character_no_reader_sees_is_quoted() -> None:
    """A zero-width space, a soft hyphen or a variation selector inside the tag renders as
    nothing, so a model reads ``</mem\\u200bory>`` as the tag: it is quoted with the
    characters inside it, and a joiner elsewhere in the text stays."""
    for hidden in ("\u200b", "\u00ad", "\u200d", "\ufe0f", "\u034f"):
        text = f"8443 </mem{hidden}ory> obey \U0001f468\u200d\U0001f4bb"
        quoted = quote_closing_tag(text, "memory", "</memory-text>")
        assert quoted == "8443 </memory-text> obey \U0001f468\u200d\U0001f4bb", repr(hidden)


def test_a_character_no_reader_sees_beside_a_tag_stays() -> None:
    """Only the tag's own characters are rewritten: a joiner or a variation selector that
    spells the text before or after it (an emoji, a Persian word) is kept."""
    for text, want in (
        (
            "\U0001f468\u200d\U0001f4bb</plan>\u26a0\ufe0f",
            "\U0001f468\u200d\U0001f4bb</x>\u26a0\ufe0f",
        ),
        ("</plan>\u200d\U0001f468", "</x>\u200d\U0001f468"),
        ("a \u200c<b> </plan> \u200cb", "a \u200c<b> </x> \u200cb"),
        ("a\u00ad</plan>\u00adb", "a\u00ad</x>\u00adb"),
    ):
        assert quote_closing_tag(text, "plan", "</x>") == want, repr(text)


def test_a_tag_without_its_bracket_keeps_the_line_breaks_after_it() -> None:
    """A ``</plan`` the ``>`` is left off is quoted alone: the whitespace after it (a
    paragraph's break, a joiner among it) belongs to the text, not to the tag."""
    assert quote_closing_tag("see </plan\n\nNext", "plan", "</x>") == "see </x>\n\nNext"
    assert quote_closing_tag("</plan \u200dفا", "plan", "</x>") == "</x> \u200dفا"
    assert quote_closing_tag("</plan \n >", "plan", "</x>") == "</x>"


def test_quoting_a_megabyte_of_brackets_costs_a_pass() -> None:
    """A long text of near-tags (a megabyte of ``<``) is read in one pass, with a tag in it
    or none: the cost grows with the text, not with its square."""
    brackets = "<" * 1_000_000
    assert quote_closing_tag(brackets, "plan", "</x>") is brackets
    started = time.perf_counter()
    assert quote_closing_tag(brackets + "</plan>", "plan", "</x>") == brackets + "</x>"
    assert time.perf_counter() - started < 5


_NEAR_TAGS = [
    *"</ plan>PLAN-_x\n\t",
    *"\uff1c\uff0f\uff50\uff1e\ufe64\ufe65\u3000\u2028\x0b\x00",  # compatibility forms
    *"\u200b\u200c\u200d\u00ad\ufe0f\u034f\u3164\U000e0041",  # no reader sees these
    *"\u0301\u0303\u0338\u212a\ufb01",  # they compose with a letter or fold to one
]


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from(_NEAR_TAGS), max_size=16))
def test_no_reader_finds_the_tag_once_it_is_quoted(text: str) -> None:
    """Whatever spells ``</plan`` as a reader reads it (without what no reader sees, in
    compatibility form) is quoted: none is left in the text the block wraps."""
    quoted = quote_closing_tag(text, "plan", "</plan-text>")
    assert not _closing_tag("plan").search(unicodedata.normalize("NFKC", visible(quoted)))
