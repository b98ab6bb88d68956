"""A YAML block scalar under a secret's key (``password: |`` then its indented lines), as
:mod:`proxy.cascade.secret_patterns` reads it for a value: :data:`BLOCK`, its indicator and
its lines, in bare text or JSON text, plain, in a numbered file view or in a unified diff.
"""

from __future__ import annotations

__all__ = ["BLANK", "BLOCK", "INDICATOR", "NL"]

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
    + r"{0,8})(?=[\r\n]|\\[rn]|$)"
)
# A first line that is no block's (the key's indentation is not known here): a mapping's key,
# a list's item or a comment (a blank after its mark: ``#a8f…`` is a password), which after
# an empty block (``password: |`` then ``user: bob``) are its siblings; a numbered line, whose
# every line is indented alike (``_block``). Read as a block, each took every line after it
# at that indentation.
_NOT_BLOCK = (
    r"(?![\"']?[A-Za-z_][\w.\-]{0,63}[\"']?:(?:" + BLANK + "|" + NL + r"|$)"
    r"|[-#](?:" + BLANK + "|" + NL + r"|$)|[0-9]{1,9}(?:\t|\\t|\u2192|\\u2192))"
)

# The block's lines: each as indented as its first (kept, so the block stays YAML), blank
# lines between them too. In bare text a line ends at its line's end alone (a backslash or a
# quote is the line's); in JSON text (a call's arguments, a tool's JSON output) at an escaped
# one, or at the quote that closes the string holding the file (written with no line's end
# after the block), so the text stays JSON. Each form: its line's end, a line, and what
# follows a line's number: a tab (``cat -n``, editor tools' views), an arrow (Claude Code's
# Read tool) or a colon (SWE-agent's ``open``).
_BARE = (r"\r?\n", r"[^\r\n]{1,20000}+", r"(?:\t|\u2192|:)")
_ESCAPED = (r"(?:\\r)?\\n", r"(?:[^\"\\\r\n]|\\[^nr]){1,20000}+", r"(?:\\t|\u2192|\\u2192|:)")


def _block(form: tuple[str, str, str], lead: str, name: str) -> str:
    """A block scalar's lines after its indicator, in ``form``, each led by ``lead``: nothing,
    its number (``numbered``: a file read with its lines numbered, the file's own
    indentation after it telling the block's lines), or a unified diff's mark (``diff``:
    ``+password: |`` then ``+  line``; the first line added or removed, a later one of
    context too, which the plain reading takes for indentation and so never reads past).
    Group ``secret<name>`` holds them, ``indent<name>`` their indentation."""
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
        + _NOT_BLOCK
        + f"(?P<secret{name}>"
        + line
        + r"(?:"
        + blanks
        + nl
        + later
        + f"(?P=indent{name})"
        + line
        + r"){0,2000})"
    )


BLOCK = (
    INDICATOR
    + "(?:"
    + "|".join(
        _block(form, lead, kind + lead)
        for kind, form in (("bare", _BARE), ("escaped", _ESCAPED))
        for lead in ("", "numbered", "diff")
    )
    + ")"
)
