"""Parts of the built-in secret patterns for a shell's and a command line's spellings.

A command line's option whose value follows a blank (``mysql --password X``, ``gh auth
login --token X``), a csh ``setenv``'s name and value, and what a value after a secret's key
is not: a variable's reference (``PASSWORD=$PW``, ``"${PW}"``: the text holds no secret, as
``curl -u bob:$PASS`` holds none) and a test runner's verdict after a bare ``PASS``
(``PASS=FAIL``, ``PASS=PASSED``; its counts are numbers, never values).
"""

from __future__ import annotations

from proxy.cascade.secret_code import BUILTIN_TYPE
from proxy.cascade.secret_tokens import NOT_REDACTED

__all__ = ["FLAG_VALUE", "IN_SINGLE", "NOT_A_VARIABLE", "NOT_A_VERDICT", "SETENV_NAME"]

_END = r"(?:[\s,;}\])\"']|\\[nrt\"]|$)"
# A shell variable's reference, bare or braced, quoted or not, and nothing after it in the
# value: ``$PW``, ``${DB_PASSWORD}``, ``"$PW"``, ``\"${PW}\"`` in JSON text. Its name is in
# one case, as a variable's is: ``$Secr3t`` (mixed) is a password's. A default
# (``${PW:-hunter2}``) or text around it (``$PW-suffix``) is read as before.
_NAME = r"(?-i:[A-Z_][A-Z0-9_]{0,64}+|[a-z_][a-z0-9_]{0,64}+)(?![A-Za-z0-9_])"
_VARIABLE = r"\$(?:\{" + _NAME + r"\}|" + _NAME + ")"
NOT_A_VARIABLE = r"(?!(?:\\{0,7}[\"'])?" + _VARIABLE + r"(?:\\{0,7}[\"'])?" + _END + ")"

# A single-quoted value's character after a key read with no quote of its own (a bare
# ``PASS=``, ``accountKey:``), whose depth in JSON text no key's quote tells: a double quote
# only where it ends no JSON string (no backslash before it, no ``,``, ``:``, bracket or
# text's end after it), so a value whose closing ``'`` lies in a later string
# (``PASS='a", "b": "c'``, escaped or not) is not read across.
IN_SINGLE = r"(?:[^'\n\"\\]|\\(?![\"\n])|\"(?![ \t]{0,8}(?:[,:}\]]|$)))"

# A test runner's verdict as a bare ``PASS``'s value (``PASS=FAIL``, ``PASS=PASSED``).
NOT_A_VERDICT = (
    r"(?!(?:pass(?:ed)?|fail(?:ed|ure|s)?|skip(?:ped)?|ok|error|xfail|xpass|todo)" + _END + ")"
)

# An option that takes a secret as its next word, its name whole (``--password-stdin``,
# ``--token-file`` and ``--with-token`` take none): read at the keyed pass's key, which
# ends where the option's name does. Each is a lookbehind of its own (fixed widths).
_FLAGS = (
    "password",
    "passwd",
    "token",
    "api-key",
    "api_key",
    "apikey",
    "api-token",
    "auth-token",
    "access-token",
    "client-secret",
    "secret",
    "secret-key",
    "access-key",
)
_FLAG = "(?:" + "|".join(f"(?<=[\\s\"'=]--{f})|(?<=^--{f})" for f in _FLAGS) + ")"
# A word that names a value rather than being one: a help text's placeholder or type
# (``--token string``, ``--password value``) and prose's (``--api-key or …``, ``--token to
# the command``). Any other word of letters is a password people set (``hunter``).
_PLACEHOLDER = (
    r"(?:string|str|text|value|val|token|password|passwd|pass|pw|pwd|key|apikey|secret|word"
    r"|arg|argument|name|none|null|empty|x+|or|and|to|for|is|are|was|be|the|a|an|in|on|of"
    r"|with|without|from|as|at|by|if|when|then|not|no|only|also|instead|option|flag|must"
    r"|may|can|will|should|which|that|this|it|its|here|first|given|takes|set|etc)"
)
_WORD_END = r"(?![^\s;|&)])"
# The blanks between an option and its value, a shell's ``\`` continuation among them, as
# JSON text escapes it too (``--password \\\n  X``).
_GAP = r"(?:[ \t]{1,3}+|[ \t]{1,3}+\\(?:\r?\n|\\\\n)[ \t]{0,8}+)"
# Its value: quoted (to the same quote, blanks and all, escaped as JSON text escapes it) or
# a bare word, never another option (``-u``), a variable (``$TOKEN``; ``$Secr3t``, mixed, is
# a password's), a command's output (``$(cat f)``), a placeholder (``<key>``, ``[TOKEN]``,
# ``***``; a quoted one holding a mask, ``'Bearer ***'``), no JSON string's end (its
# quote before ``,``, ``:``, a bracket: ``"--token ", "b"``), a help text's metavar in
# capitals (``--password PASSWORD``) or a type or word that names a value (``--token
# string``).
FLAG_VALUE = (
    _FLAG
    + _GAP
    + NOT_REDACTED
    + NOT_A_VARIABLE
    + r"(?![\-<\[{*]|\$[({])(?!(?-i:[A-Z][A-Z0-9_]{0,63}+)"
    + _WORD_END
    + ")(?!"
    + BUILTIN_TYPE
    + _WORD_END
    + ")(?!"
    + _PLACEHOLDER
    + _WORD_END
    + r")(?:(?P<flagquote>\\{0,3}[\"'])(?![ \t]{0,8}+[,:}\]])"
    + NOT_REDACTED
    + r"(?![\-*]|\$[({]|[^\"'\\\r\n]{0,256}?\*\*\*)"
    + r"(?P<secret14>[^\"'\\\r\n]{1,256}+)(?=(?P=flagquote))"
    + r"|(?![\"'\\])(?P<secret15>[^\s\"'\\`;|&<>(){}]{1,256}+)"
    + _WORD_END
    + ")"
)

# csh's ``setenv NAME value`` whose name holds a keyword of the keyed pass or ends in a bare
# ``PASS`` (``setenv DB_PASSWORD …``, ``setenv PASS …``; never ``setenv PATH …``): the
# name, read ahead, and the blanks before its value.
SETENV_NAME = (
    r"(?i)(?<![\w-])setenv[ \t]{1,8}+(?=[a-z0-9_]{0,40}?(?:passw(?:or)?d|pwd|secret|token"
    r"|api_?key|access_?key|pass(?![a-z]))[a-z0-9_]{0,40}+[ \t])[a-z_][a-z0-9_]{0,80}+[ \t]{1,8}+"
)
