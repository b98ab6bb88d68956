"""Quoted values that :mod:`proxy.cascade.secret_patterns` reads past a secret's key beyond a
plain string's: a whole string holding JSON or longer than a quoted value's bound
(:data:`WHOLE_STRING`), and a value between quotes escaped twice or thrice, as JSON inside
JSON strings writes them (:data:`TWICE_ESCAPED`, :data:`THRICE_ESCAPED`)."""

from __future__ import annotations

__all__ = ["THRICE_ESCAPED", "TWICE_ESCAPED", "WHOLE_STRING"]

# A string holding JSON (AWS Secrets Manager's ``"SecretString": "{\"password\": …}"``), or
# any string longer than a quoted value's bound (``SecretBinary``'s base64, a long token): all
# of it, to its closing quote, however long (a Kubernetes Secret's data reaches 1 MiB: a bound
# on the run would leave the tail past it visible), bare or in JSON text, when that quote
# closes it or the text ends there (output cut short), not a line's end (an opening quote in
# prose), unless its run passes ``_LONGEST``: no prose runs that long. Its run is possessive
# and stops at the first quote it does not escape or a line's end, so it never backtracks
# and runs read no text twice.
_LONGEST = 1 << 20
_CHAR = r"(?:[^\"\\\n]|\\[^\n])"
_CHAR_ESCAPED = r"(?:\\\\\\\"|[^\"\\\n]|\\[^\"\n])"


def _whole(quote: str, char: str) -> str:
    """The run after a string's opening ``quote`` as ``WHOLE_STRING`` reads it, in one
    read: to ``_LONGEST``, and past it, whatever ends it, only if it got that far."""
    return f"{char}{{1,{_LONGEST}}}+(?:(?={quote}|$)|(?={char}){char}*+)"


WHOLE_STRING = (
    r"\"(?=\{\\\"|" + _CHAR + r"{501})(?P<secret6>" + _whole(r"\"", _CHAR) + ")"
    r"|\\\"(?=\{\\\\\\\"|"
    + _CHAR_ESCAPED
    + r"{501})(?P<secret7>"
    + _whole(r"\\\"", _CHAR_ESCAPED)
    + ")"
)

# A value between quotes escaped twice (``\\\"…\\\"``), to the first such quote: one its
# own text escapes is escaped thrice (seven backslashes), read as one of its characters. A
# run of backslashes is read eight at a time (the value's own backslash, escaped), then up to
# seven before a character (an escape: ``\\\\n``) or seven before a quote: each place has one
# reading, so a value ending in a backslash (eleven before its quote) ends at its quote, where
# pairs read from its start took the last seven for an escaped quote and ran on.
TWICE_ESCAPED = r'\\\\\\"(?P<secret8>(?:(?:\\){8}|(?:\\){7}"|\\{0,7}[^"\\\n]){1,500}?)\\\\\\"'
# The same a level down, between quotes escaped thrice (seven backslashes): the value's own
# quote is fifteen, its own backslash sixteen.
THRICE_ESCAPED = r'\\{7}"(?P<secret9>(?:\\{16}|\\{15}"|\\{0,15}[^"\\\n]){1,500}?)\\{7}"'
