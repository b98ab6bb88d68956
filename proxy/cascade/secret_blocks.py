"""Values past a secret's key that run beyond one token, as
:mod:`proxy.cascade.secret_patterns` reads them: a YAML flow mapping's value of several words
(:data:`FLOW_WORDS`); a YAML block scalar (``password: |`` then its
indented lines: :data:`BLOCK`, its indicator and its lines, in bare text or JSON text, a level
down too, plain, in a numbered file view or in a unified diff); a whole string holding JSON or
longer than a quoted value's bound (:data:`WHOLE_STRING`); and a value between quotes escaped
twice or thrice, as JSON inside JSON strings writes them (:data:`TWICE_ESCAPED`,
:data:`THRICE_ESCAPED`); and a single-quoted value's quote that is its own, no string's
end (:data:`OWN_QUOTE`).
"""

from __future__ import annotations

__all__ = [
    "BLANK",
    "BLOCK",
    "FLOW_WORDS",
    "GAP",
    "INDICATOR",
    "KEYED_BLOCK",
    "KEY_COLUMN",
    "NL",
    "NOT_BETWEEN_STRINGS",
    "OWN_QUOTE",
    "SHORT_BLOCK",
    "THRICE_ESCAPED",
    "TWICE_ESCAPED",
    "WHOLE_STRING",
]

# A space or tab around a key's separator; a tab is an escape in JSON text (``token:\tvalue``).
BLANK = r"(?:[ \t]|\\t)"
# A line's end, bare or escaped as JSON text writes it.
NL = r"(?:\r?\n|(?:\\r)?\\n)"
# A YAML block scalar's indicator (``password: |``, ``password: >-``) at its line's end, or a
# comment's (``password: |  # PEM``): the block's lines, on the next, are the value.
INDICATOR = (
    r"[|>][+-]?[1-9]?[+-]?(?:"
    + BLANK
    + r"{1,8}#(?:[^\r\n\\]|\\[^nr]){0,256}+|"
    + BLANK
    + r"{0,8})(?=[\r\n]|\\{1,2}[rn]|$)"
)
# A first line that is no block's when the key's indentation is not known: a mapping's key,
# a list's item or a comment (a blank after its mark: ``#a8f…`` is a password), which after
# an empty block (``password: |`` then ``user: bob``) are its siblings; a numbered line, whose
# every line is indented alike (``_block``). Read as a block, each took every line after it
# at that indentation. Where it is known (``KEY_COLUMN``), a first line indented past the
# key's is the block's, whatever it reads as (``_DEEPER``).
_NUMBERED = r"[0-9]{1,9}(?:\t|\\t|\u2192|\\u2192)"
_NOT_BLOCK = (
    r"(?![\"']?[A-Za-z_][\w.\-]{0,63}[\"']?:(?:" + BLANK + "|" + NL + r"|$)"
    r"|[-#](?:" + BLANK + "|" + NL + r"|$)|" + _NUMBERED + ")"
)
# How many blanks begin a key's line before it, as the keyed pass reads it: ``KEY_COLUMN``,
# at the key's start, sets group ``column<n>`` when the key begins its line after ``n``
# blanks (the line's end, bare or escaped, a numbered view's number, a diff's ``+`` or
# ``-``, the text's or a JSON value's start before them: none is a blank, so one ``n``
# fits); a key after other text (``DB_PASSWORD`` at ``PASSWORD``) sets none. ``_DEEPER``,
# after a block's first indentation, holds when that is deeper.
_COLUMNS = 17
_LINE_START = (
    *(r"[\n\t\u2192]", r"\\[nt]", r"\n[+\-]", r"\\n[+\-]", r"^[+\-]", "^"),
    *(r':"', r': "', r':"[+\-]', r': "[+\-]'),  # a JSON string's start: a file as its value
)


def _column(n: int) -> str:
    """Sets ``column<n>`` (or a deeper one) where a line's start and ``n`` blanks (or more)
    are just before: each level is tried only past one more blank, so a key after a word
    costs a look or two."""
    here = "(?:" + "|".join(f"(?<={s}{' ' * n})" for s in _LINE_START) + f")(?P<column{n}>)"
    if n + 1 == _COLUMNS:
        return here
    return f"(?:{here}|(?<={' ' * (n + 1)}){_column(n + 1)})"


# Never after a word's character (``get_token``, ``apiToken``): no start or blank is one.
KEY_COLUMN = r"(?:(?<![^\s\"+\-\u2192nt])" + _column(0) + ")?+"
_DEEPER = "(?:" + "|".join(f"(?(column{n})(?<= {{{n + 1}}})|(?!))" for n in range(_COLUMNS)) + ")"

# The block's lines: each as indented as its first (kept, so the block stays YAML), blank
# lines between them too. In bare text a line ends at its line's end alone (a backslash or a
# quote is the line's); in JSON text (a call's arguments, a tool's JSON output) at an escaped
# one, or at the quote that closes the string holding the file (written with no line's end
# after the block), so the text stays JSON. Each form: its line's end, a line, and what
# follows a line's number: a tab (``cat -n``, editor tools' views), an arrow (Claude Code's
# Read tool) or a colon (SWE-agent's ``open``).
# A line is read to its end however long (a one-line base64 blob), possessively, so it is
# read once: a bound on it left the tail past it visible.
_BARE = (r"\r?\n", r"[^\r\n]++", r"(?:\t|\u2192|:)")
_ESCAPED = (r"(?:\\r)?\\n", r"(?:[^\"\\\r\n]|\\[^nr])++", r"(?:\\t|\u2192|\\u2192|:)")
# JSON text inside a JSON string (a tool's JSON output logged in one, a file written in a
# call's arguments that a result quotes): a line's end is escaped twice (``\\n``), a quote of
# the line three times, its backslash four; the line ends at the string's own ``\"``.
_TWICE = (
    r"(?:\\\\r)?\\\\n",
    r"(?:[^\"\\\r\n]|\\{4}|\\{3}\"|\\\\[^nr\"\\])++",
    r"(?:\\\\t|\u2192|\\\\u2192|:)",
)


def _block(form: tuple[str, str, str], lead: str, name: str, keyed: bool, most: int | None) -> str:
    """A block scalar's lines after its indicator, in ``form``, each led by ``lead``: nothing,
    its number (``numbered``: a file read with its lines numbered, the file's own
    indentation after it telling the block's lines), or a unified diff's mark (``diff``:
    ``+password: |`` then ``+  line``; the first line added or removed, a later one of
    context too, which the plain reading takes for indentation and so never reads past).
    Group ``secret<name>`` holds them, ``indent<name>`` their indentation. When ``keyed``,
    the pattern begins with ``KEY_COLUMN``, and a first line deeper than the key's is the
    block's whatever it reads as. It reads every line as indented as its first, or ``most``
    lines in all at most, possessively: a pattern that fails after the block never gives its
    lines back one at a time."""
    nl, line, tab = form
    first = later = ""
    if lead == "numbered":
        first = later = r"[ \t]{0,8}+[0-9]{1,9}+" + tab
    elif lead == "diff":
        first, later = r"[+\-]", r"[+\- ]"
    blanks = r"(?:" + nl + later + r"[ \t]{0,64}+(?=" + nl + r")){0,8}"
    return (
        blanks
        + nl
        + first
        + f"(?P<indent{name}>[ \\t]{{1,64}}+)"
        + r"(?!\[REDACTED\])"
        + (f"(?:{_DEEPER}(?!{_NUMBERED})|{_NOT_BLOCK})" if keyed else _NOT_BLOCK)
        + f"(?P<secret{name}>"
        + line
        + r"(?:"
        + blanks
        + nl
        + later
        + f"(?P=indent{name})"
        + line
        + ("){0," + str(most - 1) + "}+)" if most is not None else ")*+)")
    )


def _blocks(keyed: bool, most: int | None = None) -> str:
    return (
        INDICATOR
        + "(?:"
        + "|".join(
            _block(form, lead, kind + lead, keyed, most)
            for kind, form in (("bare", _BARE), ("escaped", _ESCAPED), ("twice", _TWICE))
            for lead in ("", "numbered", "diff")
        )
        + ")"
    )


BLOCK = _blocks(keyed=False)
# The block of a value written before its name (``- value: |`` then ``name: DB_PASSWORD``),
# whose pattern fails where no name follows: each such key's block may hold every later
# one's, so each reads 64 lines at most, not a long block's (a PEM key's are about 50).
SHORT_BLOCK = _blocks(keyed=False, most=64)
KEYED_BLOCK = _blocks(keyed=True)
"""The block for a pattern that begins with ``KEY_COLUMN``."""


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

# A YAML flow mapping's value of several words (``{password: Hunter Two, user: app}``): the
# words after the first, when the next bracket on the line closes the mapping and the words
# run to its entry's end, that ``}`` or a comma before the next entry's key. Elsewhere a
# value is one word (``password: wrong for user bob``, prose).
_WORD = r"[^\s\"',;{}\[\]()<>\\:#]{1,500}+"
_WORDS = r"(?:[ \t]{1,4}+" + _WORD + r"){1,16}+"
FLOW_WORDS = (
    r"(?:(?=[^(){}\[\]\\\n]{0,256}+\})(?="
    + _WORDS
    + r"[ \t]{0,4}+(?:\}|,[ \t]{0,4}+[\"']?[A-Za-z_][\w.\-]{0,63}[\"']?:[ \t]))"
    + _WORDS
    + ")?+"
)

# A single-quoted value in JSON text that runs to a string's end is cut there, but a quote
# escaped once or more there is the value's own where the value's closing quote is followed
# by a string's end escaped less (``"password: 'p@ss\", \"x\": 1'"``): no string ends inside
# it, so it is read whole.
OWN_QUOTE = (
    r"(?!(?:\\\"[^'\n]{0,512}+'\"|\\{3}\"[^'\n]{0,512}+'\\?\""
    r"|\\{7}\"[^'\n]{0,512}+'(?:\\|\\{3})?\"))"
)


# What lies between two strings of JSON text, at any depth (``", "``, ``\"}], \"``): a
# closing bracket, a comma or a colon first, then blanks and brackets alone, no quoted
# value's text (one holding JSON opens with its brace: ``"{\"user\": …}"``). After a key's
# text that a string ends with (``"note": "… token: ", "b"``) the quotes around it are that
# string's end and the next one's start: read as a value's, its text the next string's key,
# the text was JSON no longer.
_Q = r"(?:\\{7}|\\{3}|\\)?\""
_BLANKS = r"(?:\s|\\{1,7}[nrt]){0,32}+"
# A single-quoted value in JSON text ends at its string's end: one whose text runs, with no
# quote or backslash but a line's or a tab's escape, to a string's end and the next entry's
# key (``"token: 'x", "b": "y'"``) or the end of an object or array and more after it
# (``"}], …``) is read to that string's closing quote, the next string's text kept, so the
# text stays JSON. Any other is read to its closing quote, as before.
GAP = (
    _Q
    + _BLANKS
    + r"(?:,"
    + _BLANKS
    + _Q
    + r"[^\"\n]{0,64}?"
    + _Q
    + _BLANKS
    + r":|[\]}]"
    + _BLANKS
    + r"(?:[,\]}]|$))"
)
NOT_BETWEEN_STRINGS = (
    r"(?!" + _Q + _BLANKS + r"[,:\]}](?:[\s,:\[\]{}]|\\{1,7}[nrt]){0,64}+" + _Q + ")"
)
