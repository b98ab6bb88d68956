"""A database URL's password masked wherever it is written: the banner, a refusal, a log line.

The text around a URL is kept: an exception's message names the URL among other words, an
e-mail address or another URL among them, so each URL loses its own password and nothing
else. Pure: no I/O.
"""

from __future__ import annotations

import re

__all__ = ["redact_dsn"]

# A URL's password, after "scheme://user:", ends at the authority's "@". Within the URL's
# first run of non-blank characters that is the last "@" before the host's "/", "?" or "#"
# (a password with an unencoded "@" or "/" is a common mistake, and what follows its first
# "@" is not the host). A password with a blank in it, which asyncpg connects with, has no
# "@" in that first run: it runs on to the next "@" on the line, unless a "/", "?" or "#"
# comes first (a path: "host:5432/db", so no password) or the run is a port ("host:5432").
_URL_PASSWORD = re.compile(r"(://[^:/@?#\s]*:)(?:[^@\s]*@(?:[^@\s/?#]*@)*|(?!\d+\b)[^@/?#\n]*@)")
# "password=" and "sslpassword=" (the client key's passphrase): a query parameter, or a word
# of libpq's "key=value" DSN, quoted or not.
_PARAM_PASSWORD = re.compile(r"((?:^|[?&\s])(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|[^&#\s]*)")


def redact_dsn(text: str) -> str:
    """``text`` with each URL's password (in the authority, or as ``password=``) and its
    client key's passphrase (``sslpassword=``) replaced by ***."""
    return _PARAM_PASSWORD.sub(r"\1***", _URL_PASSWORD.sub(r"\1***@", text))
