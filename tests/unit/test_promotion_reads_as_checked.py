"""The extraction and the fact check read a text alike, for every kind of character the
check reads through: a secret ``sanitize_fact`` refuses a fact for is never shown to the
fast model, which could restate its value in words no check reads. Each kind is walked:
format characters, controls, lone surrogates, joiners, the other default-ignorables, the
whitespace controls and Unicode's separators (a fact is one line, its whitespace spaces),
and the compatibility forms."""

from __future__ import annotations

import random
import sys
import unicodedata

import pytest

from proxy.cascade.invisible import JOINERS, MARKS
from proxy.cascade.memory import sanitize_fact
from proxy.cascade.redaction import compile_patterns
from proxy.services.promotion import _shown

SECRET = "hunter2abc"
PATTERNS = compile_patterns(())
TEMPLATES = (
    'db pass{c}word: "{s}"',
    "db password{c}={c}{s}",
    "db password{c}= {s}",
    "db api{c}_key = {s}",
)


def _kind(ch: str) -> str | None:
    category = unicodedata.category(ch)
    if MARKS.match(ch):
        return "default-ignorable"
    if ch in JOINERS:
        return "joiner"
    if category in ("Cf", "Cs"):
        return category
    if category == "Cc":
        return "whitespace control" if ch.isspace() else "control"
    if ch.isspace():
        return "separator"
    if unicodedata.normalize("NFKC", ch) != ch and unicodedata.normalize("NFKC", ch).isascii():
        return "compatibility form"
    return None


def _kinds() -> dict[str, list[str]]:
    kinds: dict[str, list[str]] = {}
    for code in range(sys.maxunicode + 1):
        kind = _kind(chr(code))
        if kind:
            kinds.setdefault(kind, []).append(chr(code))
    return kinds


KINDS = _kinds()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_secret_the_fact_check_refuses_is_never_shown(kind: str) -> None:
    chars = KINDS[kind]
    rng = random.Random(kind)
    for ch in {chars[0], chars[-1], *rng.sample(chars, min(len(chars), 40))}:
        for template in TEMPLATES:
            text = "the config holds " + template.format(c=ch, s=SECRET)
            if sanitize_fact(text, patterns=PATTERNS).ok:
                continue  # no secret the check sees: nothing to keep from the model
            assert SECRET not in _shown(text, PATTERNS), (kind, hex(ord(ch)), template)


def test_every_kind_is_walked() -> None:
    assert set(KINDS) == {
        "Cf",
        "Cs",
        "compatibility form",
        "control",
        "default-ignorable",
        "joiner",
        "separator",
        "whitespace control",
    }


@pytest.mark.parametrize(
    "gap",
    ["\n\n    ", "\n\n\t\t", "\r\n\r\n  ", "\n \n\u00a0 ", "\u2028\u2028   ", "\n\n\u3000"],
    ids=["spaces", "tabs", "crlf", "nbsp", "line-separator", "ideographic-space"],
)
@pytest.mark.parametrize(
    "template", ["password{g}={g}{s}", '"password":{g}"{s}"', "token{g}:{g}{s}"]
)
def test_a_key_and_value_apart_by_a_blank_line_and_indentation_are_redacted(
    gap: str, template: str
) -> None:
    """A span's message as a config file or a pretty-printed object puts it: the key, a blank
    line, then its value indented. The fact check reads it on one line, so the extraction
    must not show the value."""
    text = template.format(g=gap, s=SECRET)
    assert not sanitize_fact(text, patterns=PATTERNS).ok  # the check refuses it as a fact
    assert SECRET not in _shown(text, PATTERNS)


def test_a_message_is_read_in_its_read_form_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one-line form is the read form's words: a multi-line message of non-ASCII text
    (the read form's scan, not the redaction, is most of what reading it costs) is put in its
    read form once, not again for its one-line form."""
    from proxy.services import promotion

    calls: list[str] = []
    real = promotion.read_form
    monkeypatch.setattr(promotion, "read_form", lambda t: calls.append(t) or real(t))
    text = "Über die Straße, café:\n\n    the résumé says ok\n" * 20
    assert _shown(text, PATTERNS) == text
    assert len(calls) == 1
    hidden = "pass\u200bword\n=\n" + SECRET  # its read form shows the secret: read again
    assert SECRET not in _shown(hidden, PATTERNS)
