"""What code writes after a secret's name that is no value, as
:mod:`proxy.cascade.secret_patterns` reads it: a variable's name (:data:`IDENTIFIER`), a
builtin, generic or other type (:data:`BUILTIN_TYPE`, :data:`GENERIC`, :data:`CODE_TYPE`),
an annotation between a key and its ``=`` (:data:`ANNOTATION`), a YAML node's anchor or tag
before a value (:data:`NODE_PROPERTIES`; Rust's references, :data:`RUST_REFERENCE`, are
none), and an HTML tag that a page puts right after a value (:data:`HTML_TAG`). A coding
agent reads and writes models, interfaces and signatures that name tokens and passwords:
redacted, the type's name broke the file. A type is read only where code ends it, so a
password that merely begins with a type's shape is still a secret.
"""

from __future__ import annotations

from proxy.cascade.secret_blocks import BLANK

__all__ = [
    "AFTER_COLON",
    "ANNOTATION",
    "BUILTIN_TYPE",
    "CODE_TYPE",
    "GENERIC",
    "HTML_TAG",
    "IDENTIFIER",
    "NODE_PROPERTIES",
    "RUST_REFERENCE",
    "TYPE_END",
]

# A value's place after a colon and up to three blanks (``token: AuthToken``), never an
# ``=``: what only YAML or a type annotation writes there is read only there.
AFTER_COLON = r"(?:(?<=:)|(?<=:[ \t])|(?<=:[ \t]{2})|(?<=:[ \t]{3}))"
# A variable's name: camelCase, snake_case, CONSTANT_CASE or dotted (``self.password``).
IDENTIFIER = (
    r"(?-i:(?:[A-Za-z_]{1,64}\.){1,8}[A-Za-z_]{1,64}"
    r"|_{0,2}[a-z]{1,64}(?:[A-Z][a-z]{1,64}){1,16}"
    r"|_{0,2}[a-z]{1,64}(?:_[a-z]{1,64}){1,16}"
    r"|[A-Z]{1,64}(?:_[A-Z]{1,64}){1,16})"
)
# A builtin type in an annotation: Python's, TypeScript's (``password: string;``), Kotlin's
# and C#'s (``String?``, optional), Rust's numbers, Pydantic's secrets (``api_key: SecretStr``);
# none is a password anyone sets. Rust's and Pydantic's are read in their own case only
# (``U8``, ``Secretstr`` are words).
BUILTIN_TYPE = (
    r"(?:str|int|bool|bytes|float|string|number|boolean|bigint|symbol|object|unknown|any|void"
    r"|(?-i:[iu](?:8|16|32|64|128|size)|f32|f64|char|SecretStr|SecretBytes))"
)
# A Rust reference's ``&mut``, ``&dyn`` or ``&impl`` and what it takes: a type, capitalised,
# its name ending where a type's does (``&mut Passw0rd!`` is a YAML anchor and a password), a
# path (``std::io::Read``), a builtin, a slice, a tuple, another reference, ``self`` (a
# lifetime comes before them: ``&'a mut T``).
RUST_REFERENCE = (
    r"&(?:mut|dyn|impl) (?-i:[A-Z][A-Za-z0-9_]{0,63}+(?=[\s,;:)\]}>=<{|'\"\\+]|$)|[\[(&_]"
    r"|(?:mut|dyn|impl) |[a-z_][a-z0-9_]{0,63}::"
    r"|(?:str|bool|char|[iuf](?:8|16|32|64|128|size)|self)(?![A-Za-z0-9_]))"
)
# A generic type (``Observable<string>``, Rust's ``Option<String>``, ``Record<K, V>``): a
# capitalised name of letters, ``<``, and type arguments to its ``>``; no password has that
# shape (``Hunter2<br>`` has a digit, ``abc<def>`` no capital).
_ARGUMENTS = r"<[A-Za-z_][A-Za-z0-9_.,<>\[\] |?&'():\-]{0,256}>"
GENERIC = r"(?-i:[A-Z][A-Za-z_.]{0,63}" + _ARGUMENTS + ")"
# What follows a type in code: a blank, code's punctuation, an optional's ``?``, an array's
# ``[]``, a line's or a string's end. A type's shape with more after it (``Abc<x>yz9!``,
# ``&Xk93pq7``) is a secret's start, not a type.
TYPE_END = r"(?=\??(?:[\s,;)>|=\]{}\"']|\[\]|\\[nrt\"]|$))"
# A comma that ends no YAML flow mapping's entry (``{password: SuperSecret, user: app}``):
# the next bracket on its line is no ``}``. A parameter list's closes with ``)``; a type
# literal's entries end with ``;`` (as formatters write them), or with ``,`` on lines of
# their own. A type literal on one line with commas reads as a mapping, unless an entry after
# the comma has a builtin type (``{token: AuthToken, retries: number}``): no mapping's does.
_NOT_IN_FLOW = (
    r"(?:(?![^(){}\[\]\\\n]{0,256}+\})|(?=(?:[^(){}\[\]\\\n]{0,256}?[,;])??[ \t]{0,8}[A-Za-z_$]"
    + r"[A-Za-z0-9_$]{0,63}\??:[ \t]{0,3}"
    + BUILTIN_TYPE
    + r"(?:\[\])?[ \t]{0,8}[,;}]))"
)
# Other types code writes after a name: TypeScript's operators before the type each takes
# (``readonly string[]``, ``readonly [A, B]``, ``keyof T``, ``typeof X``, ``unique symbol``;
# ``unique horse`` is a passphrase), Rust's references (``&str``, ``&'a str``, ``&mut [u8]``),
# and a name of two capitalised words or more before what ends a type in code
# (``token: AuthToken;``, ``JwtPayload | null``, ``Token[]``; a comma but in a flow mapping,
# ``_NOT_IN_FLOW``), after a colon: after ``=``
# no type annotates a name (``export DB_PASSWORD=SuperSecret; …`` in a shell). One at a
# line's end is a secret: ``SuperSecret`` in a .env cannot be told from a Python
# annotation's type there.
CODE_TYPE = (
    r"(?-i:readonly (?:\[|[A-Za-z_$][A-Za-z0-9_$.]{0,63}(?:"
    + _ARGUMENTS
    + r")?\[\])"
    + r"|(?:(?:keyof|typeof) (?:typeof )?[A-Za-z_$][A-Za-z0-9_$.]{0,63}|unique symbol)"
    + TYPE_END
    + r"|&(?:'[a-z_]{1,16} |mut ){0,2}(?:\[[A-Za-z0-9_;&' ]{1,64}\]|str|[A-Z][A-Za-z_]{0,63}(?:"
    + _ARGUMENTS
    + ")?)"
    + TYPE_END
    + "|"
    + AFTER_COLON
    + r"(?:[A-Z][a-z]{1,64}){2,16}(?:\[\]|\??(?:[;)>]|,"
    + _NOT_IN_FLOW
    + r"| \|)))"
)
# An annotation between a key and its ``=`` (``password: str = "…"``, TypeScript's
# ``apiToken?: string = "…"``, Kotlin's ``String?``): the value is the literal after it.
ANNOTATION = (
    r"(?:\??"
    + BLANK
    + "{0,3}:"
    + BLANK
    + "{0,3}"
    + f"(?:{BUILTIN_TYPE}|{GENERIC}|(?-i:(?:[A-Z][a-z]{{1,64}}){{2,16}}))"
    + r"\??(?="
    + BLANK
    + r"{0,3}=(?![=>])))?+"
)

# An HTML element's opening tag, as a page or a rendered log puts one right after a value: a
# void element's (``<br>``), or one whose closing tag is the next tag on its line
# (``<b>bold</b>``: the look for it stops at the next ``<``, so a value of many ``<`` is read
# once). A short word then a blank, ``/`` or ``>`` is looked for first: most ``<`` fail there.
_VOID_TAGS = ("br", "hr", "wbr", "img", "input")
_TAGS = (
    *("a", "b", "i", "u", "s", "p", "q", "em", "tt", "td", "th", "tr", "li", "dd", "dt"),
    *("h1", "h2", "h3", "h4", "h5", "h6", "div", "span", "code", "pre", "strong", "small"),
    *("sub", "sup", "kbd", "font", "label", "button", "option", "mark", "del", "ins", "abbr"),
)
HTML_TAG = (
    r"(?=[a-z1-6]{1,8}[\s/>])(?:"
    + "|".join(f"{t}(?=[\\s/>])" for t in _VOID_TAGS)
    + "|"
    + "|".join(f"{t}(?=[\\s>][^<\\n]{{0,512}}+</{t}>)" for t in _TAGS)
    + ")"
)

# A YAML node's anchor or tag before a value (``password: &pw hunter2``, ``!!str``,
# ``!<tag:…>``), after a colon, read past: the value after it is the secret. Before a line's
# end, a comment or an entry's end (``password: !Passw0rd  # prod``, a blank left at a line's
# end) it is the value; and after an ``=`` (``PASSWORD=!Xk9 cmd`` in a shell) there is none.
# Rust's ``&mut``, ``&dyn`` and ``&impl`` are a reference's before a type (``&dyn Read``,
# ``&mut [u8]``, ``&impl io::Write``, ``&mut self``: ``RUST_REFERENCE``), not an anchor's; before
# anything else (``&dyn hunter2``) they are an anchor's, named so, and the value follows.
NODE_PROPERTIES = (
    r"(?:(?=[&!])"
    + AFTER_COLON
    + r"(?:(?:(?!"
    + RUST_REFERENCE
    + r")&[A-Za-z0-9_\-]{1,64}+|!<[^\s<>]{1,256}+>"
    r"|!{1,2}[A-Za-z0-9_\-./:%]{0,64}+)[ \t]{1,8}+){1,2}+(?![#,}\]\r\n]|\\[nr]|$))?+"
)
