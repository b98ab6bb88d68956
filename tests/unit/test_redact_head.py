"""``redact_head``: the first characters of a text, redacted as the whole text would be.

A secret redacted before the cut shortens the text, which brings text from further on
into the head: from as far as the end of what was read, where a secret the reading cut
short is a part no pattern reads (an ``sk-…`` key's first characters).
"""

from __future__ import annotations

import re._parser as parser

from proxy.cascade.redaction import (
    DEFAULT_PATTERNS,
    LONG_STARTS,
    REDACT_LONG_PAST,
    REDACT_PAST,
    compile_patterns,
    head_reach,
    redact,
    redact_head,
)

KEY = "sk-proj-" + "Q7wZp3Lk9Xv2Rt5Yb8Nc4Md6Hf1Gj0Sa"
PATTERNS = compile_patterns(())


def _pem(chars: int) -> str:
    """A PEM private key block of ``chars`` characters."""
    begin, end = "-----BEGIN PRIVATE KEY-----\n", "\n-----END PRIVATE KEY-----"
    body = ("MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" * 2 + "\n") * chars
    return begin + body[: chars - len(begin) - len(end)] + end


def _key_at_the_reads_end(chars: int) -> str:
    """A text whose PEM block, redacted, takes away more than ``REDACT_PAST`` characters,
    and whose key begins 22 characters before the end of what ``redact_head`` reads: 19 of
    the key's characters past ``sk-``, one fewer than its pattern reads."""
    lead = "key: " + _pem(REDACT_PAST + 200) + " "
    filler = "x" * (chars + REDACT_PAST - 23 - len(lead)) + " "
    return lead + filler + KEY + " was used."


def test_a_secret_the_reading_cuts_short_is_not_brought_into_the_head() -> None:
    text = _key_at_the_reads_end(300)
    head = redact_head(text, 300, PATTERNS)
    assert KEY[:12] not in head
    assert redact(text, PATTERNS)[0].startswith(head), "a head of the whole text's redaction"


def test_the_head_is_the_cut_of_the_whole_texts_redaction_when_nothing_is_near_the_end() -> None:
    text = "key: " + _pem(2000) + " then " + "y" * 30_000 + KEY
    assert redact_head(text, 300, PATTERNS) == redact(text, PATTERNS)[0][:300]


def test_a_text_read_whole_keeps_its_head_however_much_redaction_took() -> None:
    text = "key: " + _pem(REDACT_PAST + 200) + " tail"
    assert redact_head(text, 300, PATTERNS) == "key: [REDACTED] tail"


def test_no_offset_of_a_key_past_shortening_secrets_leaves_a_part_of_it() -> None:
    """Past several secrets, each a reading's worth shorter redacted, the key at any offset
    around the end of the first or the second reading: none of it is in the head, which is
    a head of the whole text's redaction."""
    lead = ("key: " + _pem(REDACT_PAST + 200) + " ") * 3
    for offset in range(0, 3 * REDACT_PAST, 61):
        text = lead + "x" * offset + " " + KEY + " was used."
        head = redact_head(text, 300, PATTERNS)
        assert KEY[:12] not in head, offset
        assert redact(text, PATTERNS)[0].startswith(head), offset


JWT = "eyJhbGciOiJSUzI1NiJ9.eyJ" + "c3ViIjoiMTIzIn0" * 400 + "." + "c2lnbmF0dXJl" * 20
# a PEM block longer than REDACT_PAST, its lines joined by escaped escapes (a file written
# with ``\n`` in a string, in a call's JSON arguments), which the pattern for a block cut
# short does not read: the block is redacted by its END line or not at all
PEM_ESCAPED = (
    "-----BEGIN RSA PRIVATE KEY-----\\\\n"
    + "MIIJKQIBAAKCAgEA1234567890abcdefABCDEF+/12345678901234567890abcd\\\\n" * 80
    + "-----END RSA PRIVATE KEY-----"
)


def test_a_secret_that_begins_before_the_cut_and_ends_past_redact_past_is_read_whole() -> None:
    for secret in (JWT, PEM_ESCAPED):
        assert len(secret) > REDACT_PAST + 300
        text = "write(" + "x" * 200 + ' "' + secret + '") then more ' * 3
        head = redact_head(text, 300, PATTERNS)
        assert head == redact(text, PATTERNS)[0][:300]
        assert secret[:40] not in head and secret[-200:-150] not in head


def test_each_pattern_that_reads_past_redact_past_begins_with_a_long_start() -> None:
    """``redact_head`` reads ``REDACT_LONG_PAST`` past the cut only where one of
    ``LONG_STARTS`` begins before it: a pattern whose match may be longer than
    ``REDACT_PAST`` (none unbounded but those read through the text's end) begins with
    one, and no match of it is longer than that."""
    for source in DEFAULT_PATTERNS:
        longest = parser.parse(source).getwidth()[1]
        if longest >= parser.MAXREPEAT - 1 or longest <= REDACT_PAST:
            continue
        assert longest <= REDACT_LONG_PAST, source
        assert source.startswith(LONG_STARTS), source


def test_a_text_cut_one_past_its_reach_gives_the_head_the_whole_text_gives() -> None:
    """Secrets that redaction takes more than ``REDACT_LONG_PAST`` characters away send
    ``redact_head`` to read a second time, further; a caller that cuts the text first (a
    retrieval hit) keeps ``head_reach`` and one more, which that reading takes for no end."""
    pem = "-----BEGIN PRIVATE KEY-----\n" + "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n" * 600
    lead = "key: " + pem + "-----END PRIVATE KEY-----"
    lead += "".join(f" Bearer {c * 4000}" for c in "ABCDE") + f" Bearer {'F' * 1207} "
    text = lead + "x" * (301 + REDACT_LONG_PAST - 22 - len(lead)) + " " + KEY + " was used."
    head = redact_head(text[: head_reach(301) + 1], 301, PATTERNS)
    assert "[REDACTED] xxx" in head and KEY[:12] not in head
    assert head == redact_head(text, 301, PATTERNS)
