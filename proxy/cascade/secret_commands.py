"""The built-in patterns for credentials written in a command's, a config file's or a
header's own syntax, no ``password=`` naming them, as :mod:`proxy.cascade.secret_patterns`
applies them (:data:`IN_SYNTAX`): ``curl``'s basic auth, an ``.npmrc``'s ``_auth``, a
cookie header's value and an Azure connection string's account key. Each begins at its
option's or its key's literal, so text without one costs no regex call."""

from __future__ import annotations

from proxy.cascade.secret_tokens import NOT_REDACTED

__all__ = ["ENCODED_VALUE", "IN_SYNTAX"]

# ``curl``'s basic auth (``-u user:pass``, ``--user user:pass``, ``--user=user:pass``, the
# pair quoted or not): the user stays, the password goes. A password of digits alone is a
# group (``docker run -u 1000:1000``), one that begins with ``$`` a variable's name, and a
# user without a colon after it (``git push -u origin``, ``sudo -u postgres``) no pair.
CURL_USER = (
    r"(?<![\w-])(?:-u[ \t'\"]|--user[ \t=])[ \t]{0,3}['\"]?[^\s:'\"@$]{0,128}:"
    + NOT_REDACTED
    + r"(?![0-9]{1,10}(?![^\s'\"]))(?!\$)(?P<secret>[^\s'\"]{1,256})"
)

# An ``.npmrc``'s base64 ``user:password`` (``_auth=…``, a registry's ``//host/:_auth=…``);
# its ``_authToken`` is the keyed pass's ``token``.
NPM_AUTH = (
    r"(?<![A-Za-z0-9_])_auth[ \t]{0,8}=[ \t]{0,3}"
    + NOT_REDACTED
    + r"(?P<secret>[^\s\"'\\]{1,1000})"
)

# A ``Cookie`` or ``Set-Cookie`` header's value (a session's cookies), in a request's or a
# response's dump or as a JSON entry (``"Cookie": "sid=…"``): to the line's end or its
# string's closing quote, when it begins with a cookie's ``name=`` (``the cookie: a small
# cake`` is prose, ``cookie: Cookie`` a type).
COOKIE = (
    r"(?i)(?:(?<![a-z0-9_\-])|(?<=set-))cookie(?:\\{0,3}[\"'])?[ \t]{0,3}:[ \t]{0,3}"
    r"(?:\\{0,3}[\"'])?" + NOT_REDACTED + r"(?P<secret>[^\s;=\"'\\]{1,256}=[^\r\n\"'\\]{0,4096})"
)

# An Azure storage connection string's ``AccountKey=…;`` (its ``SharedAccessKey`` is the
# keyed pass's ``accesskey``).
ACCOUNT_KEY = r"(?i)(?<![a-z0-9])accountkey=" + NOT_REDACTED + r"(?P<secret>[^;\s\"'\\]{1,1000})"

# A keyed pair %-encoded once or twice (``token%3D…``, ``%253D``: a URL that is a query's
# parameter), after its key: the value to the next encoded ``&`` (the keyed pass's
# separator, so it costs no try of its own).
ENCODED_VALUE = (
    r"%(?:25)?3d(?!%(?:25)?5bredacted)"
    r"(?P<secret11>(?:[a-z0-9_.~+\-]|%(?!(?:25)?26)[0-9a-f]{2}){1,500})"
)

IN_SYNTAX: tuple[str, ...] = (CURL_USER, NPM_AUTH, COOKIE, ACCOUNT_KEY)
"""Built-in patterns for credentials in a command's, a file's or a header's syntax."""
