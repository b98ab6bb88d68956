"""A migration's SQL as PostgreSQL runs it when the migration is applied: comments dropped,
the bodies of the functions it creates blanked (they run later, per call), a ``DO`` block's
body and the literal statements it ``EXECUTE``s read as statements of their own; another
dollar-quoted string (a value, ``SELECT $$...$$``) is no statement and is blanked.

The runner reads the floor a migration sets (:func:`floor_of`: the releases it still serves)
from this text, so a ``--`` comment that quotes the floor's ``COMMENT``, or a ``COMMENT``
commented out, sets none;
``tests/unit/test_migration_floor.py`` looks in it for what breaks older code. Dynamic SQL
that cannot be read this way (``EXECUTE format(...)``, a string built with ``||``, a ``DO``
block quoted with ``'...'``) keeps its ``EXECUTE`` or ``DO`` in the text, for that test to
flag unless the migration says it keeps older code working (:data:`KEEPS_OLDER`).
"""

from __future__ import annotations

import re

__all__ = [
    "FLOOR",
    "KEEPS_OLDER",
    "floor_in",
    "floor_of",
    "keeps_older",
    "reads_strings_otherwise",
    "statements",
]

_TOKEN = re.compile(
    r"--[^\n]*|/\*.*?\*/|(?<![\w$])[Ee]'(?:[^'\\]|\\.|'')*'|'(?:[^']|'')*'"
    r"|(?<![\w$])(\$(?:[A-Za-z_]\w*)?\$)(.*?)\1|;",
    re.S,
)
"""A comment, a string (``E'...'`` ones read backslash escapes), a dollar-quoted string (its
tag, its body) or a statement's end."""
_E_ESCAPE = re.compile(r"\\(.)|''", re.S)
_DO = re.compile(r"\s*DO\s+(?:LANGUAGE\s+\w+\s+)?$", re.I)
"""A statement up to a ``DO`` block's body, which runs now (``DO $$ ... $$``)."""
_DEFERRED = re.compile(r"\s*CREATE\s+(?:OR\s+REPLACE\s+)?(?:FUNCTION|PROCEDURE)\b", re.I)
_EXECUTE = re.compile(r"\bEXECUTE\s*$", re.I)
_RUNS_ALONE = re.compile(r"\s*(?:;|USING\b|INTO\b|$)", re.I)
"""What follows a string that ``EXECUTE`` runs as it is written: nothing added to it."""

_SETS_FLOOR = re.compile(
    r"\bCOMMENT\s+ON\s+TABLE\s+(?:\"?public\"?\.)?\"?schema_migrations\"?\s+IS\s+"
    r"(?-i:'cascade: serves from (\d{4})')",  # the comment's text as FLOOR reads it, exactly
    re.I,
)

_CONTROL = re.compile(
    r"\b(?:IF\b(?!\s+(?:NOT\s+)?EXISTS\b)|ELSIF|ELSEIF|CASE|LOOP|WHILE|FOR|FOREACH|EXIT"
    r"|CONTINUE|RETURN|EXCEPTION)\b",
    re.I,
)
"""PL/pgSQL's control flow in a ``DO`` block: a branch, a loop, a ``RETURN`` or a handler
(which rolls back what its block did) may skip a statement, as the data says at run time."""

KEEPS_OLDER = re.compile(r"--[ \t]*cascade:[ \t]*keeps older code working:[ \t]*\S")
"""The marker comment (``-- cascade: keeps older code working: <why>``) by which a migration
says that what a reading of its SQL cannot judge keeps every older release working: dynamic
SQL it cannot read, a ``SET NOT NULL``, a function replaced under its own name. It never
excuses a drop, a rename or a column's new type, which need a floor."""


def statements(text: str, *, surely: bool = False) -> str:
    """``text`` as it runs now (module docstring): a string that ``EXECUTE`` runs as written
    (``'...'`` or dollar-quoted) is unquoted and read in place of the ``EXECUTE``.
    ``surely``: only what surely runs, a ``DO`` block with control flow (:data:`_CONTROL`)
    left out, since no reading evaluates it."""
    out: list[str] = []
    statement = 0  # where in ``out`` the statement being read begins
    pos = 0
    for token in _TOKEN.finditer(text):
        out.append(text[pos : token.start()])
        pos = token.end()
        executed = bool(_EXECUTE.search(out[-1])) and bool(_RUNS_ALONE.match(text, pos))
        if token[0] == ";":
            out.append(";")
            statement = len(out)
        elif token[0].startswith(("--", "/*")):
            out.append(" ")
        elif _DEFERRED.match("".join(out[statement:])):
            out.append("''")
        elif executed:
            out[-1] = _EXECUTE.sub(" ", out[-1])
            out.append(statements(_unquoted(token), surely=surely))
        elif token[1] is not None:  # a DO block's body runs now; another string does not
            ran = bool(_DO.match("".join(out[statement:])))
            ran = ran and not (surely and _CONTROL.search(_code(token[2])))
            out.append(statements(token[2], surely=surely) if ran else "''")
        else:
            out.append(token[0])
    out.append(text[pos:])
    return "".join(out)


def _code(text: str) -> str:
    """``text`` without its comments and strings: its words."""
    return _TOKEN.sub(lambda t: t[0] if t[0] == ";" else " ", text)


def _unquoted(token: re.Match[str]) -> str:
    """The text of a string token: a dollar-quoted one's body, a quoted one's unescaped."""
    if token[1] is not None:
        return token[2]
    if token[0][0] in "Ee":
        return _E_ESCAPE.sub(lambda m: "'" if m[1] is None else m[1], token[0][2:-1])
    return token[0][1:-1].replace("''", "'")


def floor_in(text: str) -> int | None:
    """The floor a migration's ``COMMENT ON TABLE schema_migrations`` surely sets as it runs
    (the highest, if it sets more than one), or None. One in a ``DO`` block's control flow
    may not run: the runner reads it from the ledger once the migration ran, and it is no
    floor for a drop (``test_migration_floor.py``)."""
    found = [int(m[1]) for m in _SETS_FLOOR.finditer(statements(text, surely=True))]
    return max(found) if found else None


def keeps_older(text: str) -> bool:
    """Whether the migration carries the :data:`KEEPS_OLDER` marker: a ``--`` comment of its
    own, not one quoted in a string or in a body it runs or creates."""
    return any(KEEPS_OLDER.match(t[0]) for t in _TOKEN.finditer(text) if t[0].startswith("--"))


_STRING_READING = re.compile(r"standard_conforming_strings|\bRESET\s+ALL\b", re.I)
"""The setting by its name, or ``RESET ALL``, which sets it back to what the database or the
role sets, as it does the runner's ``lock_timeout``."""


def reads_strings_otherwise(text: str) -> bool:
    """Whether the migration names ``standard_conforming_strings`` or resets every setting,
    outside its own comments (a ``SET``, a ``set_config``, a ``RESET ALL``, a string or a
    body it runs): this reading takes a backslash in ``'...'`` for itself, as the runner has
    the server do for the migration's transaction; with the setting off, ``'\\''`` would hide
    from the reading SQL that the server runs."""
    uncommented = _TOKEN.sub(lambda t: " " if t[0].startswith(("--", "/*")) else t[0], text)
    return bool(_STRING_READING.search(uncommented))


FLOOR = re.compile(r"cascade: serves from (\d{4})")
"""The ledger's comment a migration sets when releases before NNNN (their newest migration)
cannot serve the schema it leaves (``COMMENT ON TABLE schema_migrations IS 'cascade: serves
from 0040'``: a function dropped, a column an old write would leave wrong). Migrations are
expand-only otherwise, so an older release beside a newer schema keeps working, and only the
floor refuses it."""


_BROKE_OLDER = frozenset({6, 15, 16, 18, 19, 20})
"""Migrations that drop a function or a table the release before them calls (README:
Upgrading), each a floor at its own number; a later one that breaks older code sets the floor
(:data:`FLOOR`) in its text."""


def floor_of(version: int, text: str) -> int | None:
    """The oldest release (by its last migration) that still serves once this one ran: the
    floor its SQL sets as it runs (a ``COMMENT`` quoted in a comment sets none)."""
    if version in _BROKE_OLDER:
        return version
    return floor_in(text)
