"""``sanitize_fact``: the one gate every long-term memory fact passes before it is stored.

A stored fact is injected into the system prompt of every later session of its scope, so a
fact is text the proxy vouches for. Whether it comes from a person (the memory API, the CLI)
or from the fast model (memory promotion), it goes through the same checks, in this order,
and a rejection carries a reason a person can act on:

1. the characters no reader sees are stripped (format characters, controls, lone
   surrogates; a line break, a tab or any other whitespace becomes a space and runs of it
   collapse), so a fact is one line of plain text, stored in composed form (NFC);
2. an empty fact, or one longer than :data:`MAX_FACT_CHARS`, is rejected;
3. a fact holding a secret (any redaction pattern matches) is rejected, never stored
   redacted: ``[REDACTED]`` is not a fact worth remembering, so a fact holding that mark
   (the fast model reads a span redacted, and may quote it) is rejected too;
4. a fact that reads as an instruction to the model is rejected (:data:`INSTRUCTION_PATTERNS`);
5. a duplicate of a stored fact of the scope, compared case- and space-insensitively and
   without closing full stops (:func:`fact_key`), is rejected.

Checks 3 to 5 read the fact's compatibility form (NFKC) too: a model reads fullwidth
``ｉｇｎｏｒｅ`` or ``＜/memory＞`` as the plain letters, so they must not slip past a
pattern written with those, and two spellings of one fact are one fact. The instruction
check also reads the fact with Cyrillic and Greek letters that look like Latin ones folded
to those (:data:`LOOKALIKES`): ``іgnore`` with a Cyrillic ``і`` reads as "ignore".

A stored fact keeps the zero-width joiner and non-joiner (Persian, the Indic scripts and
emoji sequences spell with them) and variation selectors; the checks read it without them,
as without all else no reader sees (``cascade.invisible``, the one rule of every caller).

The instruction check is a small heuristic, not a classifier: it catches the phrases prompt
injections are made of ("ignore previous instructions", "you must", "system prompt", a
``<system>`` tag, "from now on") and lets through statements of fact ("the build uses uv").
A fact it wrongly refuses can be rephrased as a statement.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.cascade.briefing import without_thinking
from proxy.cascade.invisible import visible
from proxy.cascade.redaction import REDACTED, redact
from proxy.cascade.text import content_text

__all__ = [
    "MAX_FACT_CHARS",
    "MAX_FACTS_PER_SPAN",
    "INSTRUCTION_PATTERNS",
    "LOOKALIKES",
    "FactVerdict",
    "FactsAnswerError",
    "fact_key",
    "read_form",
    "sanitize_fact",
    "sanitize_facts",
    "span_facts",
    "SPAN_TEXT_CHARS",
    "MEMORY_FACTS_FORMAT",
    "extraction_prompt",
    "parse_facts",
    "span_text",
    "fit_span_text",
]

MAX_FACT_CHARS = 500
"""The longest fact kept, in characters after cleaning: a fact is a sentence, not a document."""

MAX_FACTS_PER_SPAN = 20
"""The most facts one folded span adds or suggests, the first that pass ``sanitize_fact``:
a runaway extraction must not fill a scope (``auto``) or a person's review (``suggest``)."""

INSTRUCTION_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        r"\b(?:ignore|disregard|forget|override)\b.{0,40}\b(?:previous|prior|above|earlier|all|"
        r"any|your)\b.{0,40}\b(?:instructions?|rules?|prompts?|directions?|guidelines?)\b",
        r"\bsystem\s+(?:prompt|message|instructions?)\b",
        r"\byou\s+(?:must|should|shall|will|need\s+to|have\s+to|are\s+(?:now|required\s+to))\b",
        r"\b(?:from\s+now\s+on|new\s+instructions?)\b",
        r"\b(?:act|behave|respond|pretend)\s+as\b",
        # a block tag however spaced: any closing one, an opening one with or without
        # attributes; "<memory_limit>" or "queue < system limit" is no tag of these
        r"<\s*/\s*(?:system|memory|instructions?|assistant)(?![\w-])",
        r"<\s*(?:system|memory|instructions?|assistant)\s*(?:/?>|\s[\w-]+\s*=)",
        r"\bdo\s+not\s+(?:tell|reveal|mention)\s+the\s+user\b",
    )
)
"""Phrases of an instruction aimed at the model rather than a fact about the work."""

_SPACE = re.compile(r"\s+")

_REDACTED_MARK = REDACTED.casefold()
"""The mark a redacted secret leaves (in any case): the fast model reads a folded span
redacted, and may quote the mark in a fact."""

LOOKALIKES = str.maketrans(
    "\u0430\u0432\u0435\u0455\u0456\u0458\u043e\u0440\u0441\u0443\u0445\u04bb\u04cf\u0501\u051b\u051d"
    "\u0410\u0412\u0415\u041a\u041c\u041d\u041e\u0420\u0421\u0422\u0425\u0405\u0406\u0408"
    "\u03b1\u03b9\u03ba\u03bd\u03bf\u03c1\u03c5"
    "\u0391\u0392\u0395\u0396\u0397\u0399\u039a\u039c\u039d\u039f\u03a1\u03a4\u03a5\u03a7",
    "aBesijopcyxhldqwABEKMHOPCTXSIJaikvopuABEZHIKMNOPTYX",
)
"""Cyrillic and Greek letters drawn like a Latin one, mapped to it: the instruction check
reads a fact through this table, so a mixed-script phrase cannot pass for another."""


@dataclass(frozen=True, slots=True)
class FactVerdict:
    """``text`` is the cleaned fact when it may be stored; otherwise ``reason`` says why not."""

    text: str | None
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.text is not None


def _clean(text: str) -> str:
    kept = visible(text, joiners=True, marks=True)
    return unicodedata.normalize("NFC", _SPACE.sub(" ", kept).strip())


def _compat(fact: str, *, marks: bool = False) -> str:
    """``fact`` as a reader sees it: :func:`visible` (``marks`` kept for a key), NFKC
    (fullwidth letters plain), whitespace collapsed again (NFKC makes spaces of some)."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", visible(fact, marks=marks))).strip()


def read_form(text: str) -> str:
    """``text`` as :func:`sanitize_fact` reads a fact, its lines kept: :func:`visible`, and
    compatibility forms (fullwidth letters, ligatures) as their plain characters. The
    extraction redacts a span's messages in this form too (and on one line, as a fact is), so
    it is never shown a secret the fact check would see through (``ｐａｓｓｗｏｒｄ: "…"``) to
    restate in words no check reads."""
    return unicodedata.normalize("NFKC", visible(text))


_FINAL_STOPS = " .\u3002"
"""A sentence's closing full stops (``.``, ``。``, NFKC's form of ``．`` and ``｡`` and of
``…``) and the spaces between them (a key's only whitespace is a space): "X" and "X."
are one fact."""


def fact_key(text: str) -> str:
    """The form two facts are compared in: cleaned, in compatibility form, without joiners
    (:data:`~proxy.cascade.invisible.MARKS` kept: the stored keys were made with them),
    case-folded, whitespace collapsed, closing full stops dropped (:data:`_FINAL_STOPS`;
    a fact of stops alone keeps them, so no key is empty). Migration 0033 has the stored
    keys made again with this form."""
    return _cleaned_key(_clean(text))


def _cleaned_key(fact: str) -> str:
    """:func:`fact_key` of a fact already cleaned."""
    key = _compat(fact, marks=True).casefold()
    return key.rstrip(_FINAL_STOPS) or key


def sanitize_fact(
    text: str,
    *,
    existing: Iterable[str] = (),
    patterns: Sequence[re.Pattern[str]] = (),
    max_chars: int = MAX_FACT_CHARS,
) -> FactVerdict:
    """Clean ``text`` and decide whether it may be stored beside ``existing`` (the scope's
    stored facts); ``patterns`` are the compiled redaction patterns of the config."""
    return _verdict(text, {fact_key(other) for other in existing}, patterns, max_chars)


def _verdict(
    text: str, keys: Container[str], patterns: Sequence[re.Pattern[str]], max_chars: int
) -> FactVerdict:
    """:func:`sanitize_fact` beside the stored facts' :func:`fact_key` forms ``keys``."""
    fact = _clean(text)
    seen = visible(fact)  # what the checks read: joiners and marks alone spell nothing
    if not seen.strip():
        return FactVerdict(None, "the fact is empty once invisible characters are removed")
    if len(fact) > max_chars:
        return FactVerdict(
            None,
            f"the fact is {len(fact)} characters long; the limit is "
            f"{max_chars}: state it in a sentence",
        )
    forms = (seen, _compat(fact))
    if _REDACTED_MARK in forms[1].casefold():
        return FactVerdict(
            None,
            f"the fact holds a secret the proxy redacted ({REDACTED}): a fact about a "
            "secret it does not hold is worth nothing; state it without",
        )
    if patterns and any(redact(form, patterns)[1] for form in forms):
        return FactVerdict(
            None,
            "the fact contains what looks like a secret (it matches a "
            "redaction pattern); secrets are never stored in memory",
        )
    read = (*forms, forms[1].translate(LOOKALIKES))
    for pattern in INSTRUCTION_PATTERNS:
        hit = next((h for h in map(pattern.search, read) if h), None)
        if hit:
            return FactVerdict(
                None,
                f"the fact reads as an instruction to the model "
                f"({hit.group(0)!r}); state it as a fact instead",
            )
    if _cleaned_key(fact) in keys:
        return FactVerdict(None, "the same fact is already stored in this scope")
    return FactVerdict(fact)


def sanitize_facts(
    texts: Iterable[str],
    *,
    existing: Iterable[str] = (),
    stored_keys: Iterable[str] = (),
    patterns: Sequence[re.Pattern[str]] = (),
    max_chars: int = MAX_FACT_CHARS,
    keep: int | None = None,
) -> list[FactVerdict]:
    """One verdict per text, in order; a text that repeats an earlier accepted one of the
    same batch is a duplicate too. The stored facts are ``existing`` (texts) or
    ``stored_keys`` (their :func:`fact_key` forms, as the store's index holds them). Each
    stored fact's key is made once, so a batch costs one check per fact whatever the scope
    holds. With ``keep``, the texts after the ``keep``-th accepted one are not read (nor
    given a verdict)."""
    keys = {fact_key(other) for other in existing} | set(stored_keys)
    verdicts: list[FactVerdict] = []
    accepted = 0
    if keep is not None and keep < 1:
        return verdicts
    for text in texts:
        verdict = _verdict(text, keys, patterns, max_chars)
        verdicts.append(verdict)
        if verdict.text is not None:
            keys.add(fact_key(verdict.text))
            accepted += 1
            if accepted == keep:
                break
    return verdicts


def span_facts(verdicts: Iterable[FactVerdict]) -> list[str]:
    """The facts one folded span adds or suggests: the first :data:`MAX_FACTS_PER_SPAN` that
    passed, in the model's order."""
    return [v.text for v in verdicts if v.text is not None][:MAX_FACTS_PER_SPAN]


MEMORY_FACTS_FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "memory_facts",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"facts": {"type": "array", "items": {"type": "string"}}},
            "required": ["facts"],
            "additionalProperties": False,
        },
    },
}
"""The ``response_format`` of the extraction request: the answer is ``{"facts": [...]}``."""

_EXTRACT = f"""\
Below is part of a conversation between a user and an AI agent. List the durable facts in it \
that would still help in a later session: decisions, conventions, preferences, names of \
files, services, ports and commands that stay true: at most {MAX_FACTS_PER_SPAN}, one short \
sentence each, stated as a fact, not as an instruction. Leave out anything temporary, anything \
about this one task's progress, and every secret (keys, tokens, passwords). Answer with one \
JSON object, {{"facts": ["…"]}}, and {{"facts": []}} when there is none."""


def extraction_prompt(span_text: str) -> list[dict[str, str]]:
    """The fast model's messages for extracting facts from a folded span's original text."""
    return [{"role": "system", "content": _EXTRACT}, {"role": "user", "content": span_text}]


class FactsAnswerError(ValueError):
    """The fast model's answer is not ``{"facts": [...]}``; the message says which way it
    is not, and never quotes the answer (it may hold the conversation's text)."""


_DECODER = json.JSONDecoder()
_MAX_STARTS = 32
"""The most ``{`` of an answer an embedded object is looked for at: a bound on the work a
long answer of prose can cost."""


def _embedded_object(answer: str) -> Any:
    """The JSON object in a reply that is not JSON as a whole: fenced (```json … ```),
    after a sentence, or after a thought that may hold braces of its own. The first object
    with ``facts`` wins, else the first object; None when there is none."""
    first = None
    start = answer.find("{")
    for _ in range(_MAX_STARTS):
        if start < 0:
            break
        try:
            data = _DECODER.raw_decode(answer, start)[0]
        except (ValueError, RecursionError):
            data = None
        if isinstance(data, dict) and "facts" in data:
            return data
        if first is None and isinstance(data, dict):
            first = data
        start = answer.find("{", start + 1)
    return first


def parse_facts(answer: str) -> list[str]:
    """The ``facts`` of the model's JSON answer, read through a code fence or words around
    the object (servers that take ``response_format`` loosely add them, as the briefing's
    reader expects), after the thinking a model without a reasoning parser writes ahead of
    it (``without_thinking``: a draft of the object there is not the answer);
    :class:`FactsAnswerError` when it is not that shape."""
    answer = without_thinking(answer)
    if not answer.strip():
        raise FactsAnswerError("the answer is empty")
    try:
        data = json.loads(answer)
    except (ValueError, RecursionError):  # words around it, or nested past the limit
        data = _embedded_object(answer)
        if data is None:
            raise FactsAnswerError("the answer is not JSON") from None
    if not isinstance(data, dict):
        raise FactsAnswerError("the answer is JSON but not an object")
    if not isinstance(data.get("facts"), list):
        raise FactsAnswerError("the answer has no 'facts' list")
    return [f for f in data["facts"] if isinstance(f, str)]


def fit_span_text(text: str, max_tokens: int, tokens: Callable[[str], int]) -> str:
    """The newest part of ``text`` whose prompt ``tokens`` counts at most ``max_tokens`` (""
    when none does): the extraction's request fits the fast model's window, which may be
    smaller than the span a compaction of the main model's window folds; cut from the start,
    as :func:`span_text` cuts, since the newest text matters most."""
    size = tokens(text)
    while text and size > max_tokens:
        keep = min(len(text) - 1, int(len(text) * max_tokens / size * 0.95))
        text = text[-keep:] if keep > 0 else ""
        size = tokens(text)
    return text


SPAN_TEXT_CHARS = 60_000
"""The characters of a folded span the extraction reads at most (its newest)."""


def span_text(messages: Sequence[Mapping[str, Any]], *, cap: int = SPAN_TEXT_CHARS) -> str:
    """A folded span as the extraction reads it: one ``[role]`` block per message, cut to
    ``cap`` characters from the end (the newest text matters most)."""
    blocks = []
    for m in messages:
        body = content_text(m.get("content"), media=True)
        if body:
            blocks.append(f"[{m.get('role') or 'unknown'}]\n{body}")
    text = "\n\n".join(blocks)
    return text[-cap:]
