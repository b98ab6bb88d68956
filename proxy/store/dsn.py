"""A database URL's password masked wherever it is written: the banner, a refusal, a log line.

The text around a URL is kept: an exception's message names the URL among other words, an
e-mail address or another URL among them, so each URL loses its own password and nothing
else. Pure: no I/O.
"""

from __future__ import annotations

import re

__all__ = ["redact_dsn"]

# A URL's password, after "scheme://user:", ends at the authority's "@". Within the URL's
# first run of non-blank characters it is masked up to the run's last "@" (a password with
# an unencoded "@", "/", "?" or "#" is a common mistake, and what follows its first "@" is
# not the host; a later "@" in a path or query then hides a little more than the password,
# never less): _URL_PASSWORD, looked for only in a run's text up to its last "@"
# (_TO_LAST_AT), where each try finds its "@". A password with a blank in it, which asyncpg
# connects with, has no "@" in that first run: it runs on to the next "@" on the line,
# unless a "/", "?" or "#" comes first (a path: "host:5432/db", so no password) or the run
# is a port ("host:5432"): _SPACED_PASSWORD, looked for afterwards in the whole text, where
# it stops at the next URL's "/". Neither reads on past the next URL when it finds no "@",
# so text with many "://" is read a bounded number of times, not once from each of them.
_URL_PASSWORD = re.compile(r"(://[^:/@?#\s]*:)[^@\s]*@(?:[^@\s]*@)*")
_SPACED_PASSWORD = re.compile(r"(://[^:/@?#\s]*:)(?!\d+\b)[^@/?#\n]*@")
# "password=" and "sslpassword=" (the client key's passphrase): a query parameter, or a word
# of libpq's "key=value" DSN, quoted or not. It runs over a "#" (asyncpg's URL ends there;
# the rest is still the password written) and is masked before the URL's: an "@" in it
# would be taken for the authority's, and the mask of one stop there.
_PARAM_PASSWORD = re.compile(r"((?:^|[?&\s])(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|[^&\s]*)")
# What looks like "user:password@" without a "://" before it: a URL written wrong
# ("postgresql:/u:pw@h", "u:pw@host/db"), which asyncpg then quotes whole in its error. The
# password runs to the last "@" of the run, as in a URL; one that starts with "/" is a
# URL's "//" (its own user is matched after it), and a blank ends the run. The user starts
# where the run or a "/", ":", "@" does. It is looked for only in a run's text up to its
# last "@" (_TO_LAST_AT, which starts only where a run does), where each try finds its "@":
# a long run is read a bounded number of times, not once from each of its characters.
_BARE_USERINFO = re.compile(r"((?<![^:/@?#\s])[^:/@?#\s]+:)(?!/)[^@\s]*@(?:[^@\s]*@)*")
_TO_LAST_AT = re.compile(r"(?<!\S)\S*@")


def _url_masked(run: re.Match[str]) -> str:
    return _URL_PASSWORD.sub(r"\1***@", run.group())


def _bare_masked(run: re.Match[str]) -> str:
    return _BARE_USERINFO.sub(r"\1***@", run.group())


_PIECE = re.compile(r"[^@/?#:&=\s']+")
"""A run of a password between the characters a URL reader splits at."""


def redact_dsn(text: str, dsn: str | None = None) -> str:
    """``text`` with each URL's password (in the authority, or as ``password=``) and its
    client key's passphrase (``sslpassword=``) replaced by ***, and so the password of what
    looks like ``user:password@`` in a malformed URL. ``dsn``: the URL ``text`` is a
    reader's complaint about. A password with an unencoded ``@``, ``/``, ``?`` or ``#`` is
    read as something else, and asyncpg quotes what it read (``bad query field:
    'RET@h/db'``, ``invalid literal for int(): 'word@h:5432'``) with no ``user:`` before it
    to know it by: each run of ``dsn``'s passwords is masked wherever it stands, or, one
    under three characters (which any word may hold), where it is quoted whole."""
    masked = _PARAM_PASSWORD.sub(r"\1***", text)  # first: an "@" in it is no authority's
    masked = _SPACED_PASSWORD.sub(r"\1***@", _TO_LAST_AT.sub(_url_masked, masked))
    masked = _TO_LAST_AT.sub(_bare_masked, masked)
    for piece in sorted(_pieces(dsn) if dsn else (), key=len, reverse=True):
        short = len(piece) < 3
        masked = masked.replace(f"'{piece}'" if short else piece, "'***'" if short else "***")
    return masked


def _pieces(dsn: str) -> set[str]:
    """The runs (``_PIECE``) of each password ``redact_dsn`` masks in ``dsn``: the value of
    each of its patterns' matches, after the group before it."""
    found: set[str] = set()
    params = list(_PARAM_PASSWORD.finditer(dsn))
    dsn = _PARAM_PASSWORD.sub(r"\1***", dsn)
    runs = [run.group() for run in _TO_LAST_AT.finditer(dsn)]
    for match in [
        *params,
        *(m for run in runs for m in _URL_PASSWORD.finditer(run)),
        *_SPACED_PASSWORD.finditer(dsn),
        *(m for run in runs for m in _BARE_USERINFO.finditer(run)),
    ]:
        found.update(_PIECE.findall(match.group()[len(match.group(1)) :]))
    return found - {"***"}
