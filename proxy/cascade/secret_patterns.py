"""The built-in secret patterns that :mod:`proxy.cascade.redaction` applies.

Each starts with a literal or a short keyword and bounds every quantifier, so the scanner
can find where a match may begin and no input backtracks catastrophically. The generic
assignment pattern (``password=…``) keeps the key and redacts the value, and leaves values
that are plainly not secrets; the sibling pattern reads the same keys and values where a
list of name/value pairs holds them (``{"name": "DB_PASSWORD", "value": "…"}``), and the
other way round (the value first). A value is also a YAML block scalar's lines, a form body's
``%``-escaped value (to the next pair's ``&``), or a whole string holding JSON.
"""

from __future__ import annotations

from proxy.cascade import secret_shell as shell
from proxy.cascade.secret_blocks import (
    BLANK,
    BLOCK,
    FLOW_WORDS,
    GAP,
    INDICATOR,
    KEY_COLUMN,
    KEYED_BLOCK,
    NL,
    NOT_BETWEEN_STRINGS,
    OWN_QUOTE,
    SHORT_BLOCK,
    THRICE_ESCAPED,
    TWICE_ESCAPED,
    WHOLE_STRING,
)
from proxy.cascade.secret_code import (
    AFTER_COLON,
    ANNOTATION,
    BUILTIN_TYPE,
    CODE_TYPE,
    GENERIC,
    HTML_TAG,
    IDENTIFIER,
    NODE_PROPERTIES,
    RUST_REFERENCE,
    TYPE_END,
)
from proxy.cascade.secret_tokens import ENCODED_VALUE, IN_SYNTAX, NOT_REDACTED, SHAPED

__all__ = ["REDACTED", "DEFAULT_PATTERNS"]

REDACTED = "[REDACTED]"

# ``token`` but not ``tokenizer``, ``tokenization``: what splits text holds no token. A word
# before a keyword makes a key's name (``#password:``, ``mypassword``, ``DB_PASSWORD``); an
# English word it begins names none (``secretary``, ``secretly``, ``passwordless``).
_KEYWORD = (
    r"(?:passw(?:or)?d(?!less)|pwd|secret(?!ar[iy]|ly|ion|ive)|token(?!i[sz])"
    r"|api(?:[_-]|%5f)?key|access(?:[_-]|%5f)?key"
    r"|private(?:[_-]|%5f)?key|auth(?:[_-]|%5f)?key|credentials?)"
)
# Unquoted values that are plainly not secrets: numbers (``"max_tokens": 100``), booleans
# (YAML 1.1's ``yes``/``no``/``on``/``off`` too: ``all-pass: yes``), nulls, and values
# already redacted; and source code that names a token or password, which a coding agent
# reads and edits from: a call or subscript (``token = cast(x)``,
# ``tokens: Sequence[T]``), a builtin type in an annotation (``password: str``, TypeScript's
# ``password: string;``: ``BUILTIN_TYPE``) or a generic one (``GENERIC``), a comment
# after the separator (``if not tokens:  # …``), a printf placeholder (``"tokens: %s"``),
# asterisks alone (a Markdown label's closing ``**``, a masked ``********``), a variable's
# name (``_csrf_token: csrfToken``, ``password = self.password``): a whole value of letters
# and underscores that is camelCase, snake_case, CONSTANT_CASE or an attribute (dotted).
# A plain word (``Password: theagentcompany``) or any digit still reads as a secret.
# A quote ends a value as a line's end does: a string that ends with it (``"MAX_TOKENS=5"``,
# bare in code, or its JSON text in a call's arguments) holds a number, not a secret.
# In JSON text (a call's arguments) a string's lines and quotes are escapes (``\n``,
# ``\"``): one ends a value as the character it stands for would; doubled backslashes (a
# Windows path's) are the value's, a run of pairs read whole, so it has one reading and a
# value that turns out no call (below) is not tried again at each way of pairing them; a
# run before ``\"`` is none of the value's: it and that quote are a quote escaped twice
# (``\\\"``), or, a level down, the value's own backslash (four) before its string's end
# (``\"``), and any part of the run taken would leave the rest escaping that quote.
_ESCAPE = r"\\[nrt\"]"
# A key's closing quote, bare or escaped as JSON text writes it (``\"api_key\": …``: a JSON
# file an agent writes is one string in its call's arguments), or escaped once more
# (``\\\"api_key\\\": …``: that call's arguments logged, or a JSON tool result inside one),
# or thrice (seven backslashes: that log line in a JSON string).
_QUOTE = r"(?:(?:\\{7}|\\\\\\|\\)?[\"'])"
_END = r"(?:[\s,;}\])\"']|" + _ESCAPE + r"|$)"
# A form body's next pair (``password=…&user=bob``, application/x-www-form-urlencoded): an
# ``&`` before one ends an unquoted value, which the body %-escapes (``&`` is ``%26`` in it).
# Only in a form's pair, whose ``=`` follows its name's last character (``_IN_FORM``): after
# a colon, an arrow or blanks (``password: ab&cd=ef`` in YAML, ``PASSWORD = …``) no form is
# read, and the ``&`` is the value's (``_ANY_VALUE``): cut there, its tail went upstream.
_FORM_KEY = r"[A-Za-z0-9_.%\-\[\]]{1,64}"
_VALUE = (
    r"(?:(?:\\\\){1,250}+(?!\\\")|\\(?![nrt\"\\])|[^\s\"',;{}\[\]()<>\\&]|&(?!" + _FORM_KEY + "=))"
)
_ANY_VALUE = r"(?:(?:\\\\){1,250}+(?!\\\")|\\(?![nrt\"\\])|[^\s\"',;{}\[\]()<>\\])"
# An angle bracket inside an unquoted value (``Abc<x>yz9!``, ``p<a>ss``), never one that
# begins it (a placeholder: ``<your-token>``) nor a tag's: a closing tag (``abc</td>``), an
# HTML element's opening one that its closing tag follows on the line (``abc123<b>bold</b>``),
# or a void element's (``hunter2<br>next``), which a page or a rendered log puts right after
# a value: read as the value's, it took the visible text after it too. Any other is the
# value's own: cut there, the value's tail stayed.
_ANGLE = r"(?:<(?![/!?\s<>]|$|" + HTML_TAG + r")|>)"
_FORM_PAIR = r"[A-Za-z0-9_.%\-\]]="
_IN_FORM = r"(?<=" + _FORM_PAIR + ")"


def _assigned(blanks: int, quote: str = _QUOTE + "?") -> str:
    """A key's closing quote, if any, and its separator (``=``, ``:``, ``=>``), up to
    ``blanks`` spaces or tabs on each side. An ``=>`` is one separator, whose ``>`` is never
    read as a YAML block's indicator (one pass reading it so, the next as a value)."""
    return quote + BLANK + f"{{0,{blanks}}}(?:=>|=(?!>)|:)" + BLANK + f"{{0,{blanks}}}"


# A quoted key's value, if quoted, is quoted as the key is, escaped as many times (JSON text
# at one depth): a quote escaped otherwise after ``"api_key\": `` is the end of the string
# that ends in a key's text and the next one's start, read as a value it held the text
# between them (and left it JSON no longer). ``_KEY_QUOTE`` reads the key's quote and notes
# its backslashes. A value quoted deeper (more escapes), or with single quotes around no
# double one (JSON never escapes them: ``{'password': \"…\"}`` in a call's arguments), ends
# no string of its key's.
_KEY_QUOTE = r"(?:(?P<keyquote>\\{7}|\\{3}|\\|)\"|(?:\\{7}|\\{3}|\\)?')?+"
_AS_QUOTED = r"(?(keyquote)(?:(?=(?P=keyquote)\\{0,8}\")|(?='[^'\"\n]{1,500}')|(?!\\{0,7}[\"'])))"
_NOT_A_VALUE = (
    r"(?![0-9.]{1,40}" + _END + ")"
    r"(?!(?:true|false|yes|no|on|off|null|none|nil|undefined)" + _END + ")"
    r"(?!(?:" + _VALUE + r"){1,500}[(\[])"
    r"(?!" + BUILTIN_TYPE + r"\??(?:[\s,;}\])=|\"']|" + _ESCAPE + r"|$))"
    r"(?!" + GENERIC + TYPE_END + "|" + CODE_TYPE + ")"
    r"(?!(?<=[ \t])#)"
    r"(?!%[a-z](?![a-z0-9_]))"
    r"(?!\*{1,500}+" + _END + ")"
    r"(?!" + AFTER_COLON + r"\*[A-Za-z0-9_\-]{1,64}+" + _END + ")"
    r"(?!" + RUST_REFERENCE + ")"
    r"(?!" + IDENTIFIER + r"(?!" + _VALUE + r"|&))"
    r"(?!" + INDICATOR + ")"
)

# A key the keyed pass reads a secret by: a keyword and what may follow it in a key's name
# (``DB_PASSWORD``, ``api_key_v2``), unless that names the secret's kind or the secret by its
# name, not the secret (``token_type=bearer`` in an OAuth redirect, ``"tokenType": "Bearer"``,
# a Kubernetes volume's ``secretName: tls-certs``, ``SECRET_NAME=prod/db``), or is AWS's
# service or an ARN's resource type, whose colons are no separators
# (``secretsmanager:GetSecretValue`` in an IAM policy, ``arn:aws:…:secret:prod/db``: a
# ``:secret`` the name's own colon follows, where PowerShell's ``$env:SECRET = …`` is a key).
_SECRET_KEY = (
    _KEYWORD + r"(?:[_.\-]?[a-z0-9]){0,24}+(?<!type|name)(?<!manager)(?!(?<=:secret):[^\s:=])"
)
# The value after a secret's key and its separator: a quoted one whole, to its closing quote
# past the ones it escapes (``"SecretString": "{\"pass\": …}"``, JSON in a string) when
# what follows that quote ends a value (``_CLOSED``), else to its first quote (a Windows
# path's ``"C:\keys\" API_KEY="…"``, whose next string's opening quote is no closing one:
# read past it, the value swallowed the next key); in JSON text, between its escaped quotes,
# past those escaped twice (``\\\"``) the same way (``_CLOSED_ESCAPED``), never the
# backslash alone, which would let the value through and leave the text JSON no longer; an
# unquoted one unless it is plainly no secret (``_NOT_A_VALUE``); never one already redacted.
_CLOSED = r"(?=\"(?:[\s,;}\])\"'>]|$))"
_CLOSED_ESCAPED = r"(?=\\\"(?:[\s,;}\])\"'>]|\\[nrt\"]|$))"
# A numbered view's line number (``secret_blocks``) amid what lies between two entries
# (``_BETWEEN``), its line's end and blanks before it.
_LINE_NUMBER = r"(?:(?<=[\n ])|(?<=\\n))[0-9]{1,9}+(?:\t|\\t|\u2192|\\u2192|:)"


def _secret_value(block: str, single: str = r"[^'\n]") -> str:
    return (
        NODE_PROPERTIES
        + NOT_BETWEEN_STRINGS
        + shell.NOT_A_VARIABLE
        + r"(?!(?:\\{7}|\\\\\\|\\)?[\"']?\[REDACTED\])(?:"
        + block
        + "|"
        + WHOLE_STRING
        + "|"
        + r"\"(?P<secret>(?:[^\"\\\n]|\\[^\n]){1,500}"
        + _CLOSED
        + r"|[^\"\n]{1,500})\""
        + r"|'(?:(?P<secret10>(?:[^'\n\"\\]|\\{1,7}[nrt]){1,500}+)(?="
        + GAP
        + ")"
        + OWN_QUOTE
        + r"|(?!"
        + GAP
        + r")(?P<secret2>"
        + single
        + "{1,500})')|"
        + r"\\\"(?P<secret4>(?:\\\\\\\"|[^\"\\\n]|\\[^\"\n]){1,500}"
        + _CLOSED_ESCAPED
        + r"|(?:[^\"\\\n]|\\[^\"\n]){1,500})\\\"|"
        + TWICE_ESCAPED
        + "|"
        + THRICE_ESCAPED
        + r"|(?!\\\"|\\\\\\\")"
        + _NOT_A_VALUE
        + r"(?:"
        + _IN_FORM
        + r"(?P<secret3>"
        + _VALUE
        + r"(?:"
        + _VALUE
        + "|"
        + _ANGLE
        + r"){0,499})|(?<!"
        + _FORM_PAIR
        + r")(?P<secret5>"
        + _ANY_VALUE
        + r"(?:"
        + _ANY_VALUE
        + "|"
        + _ANGLE
        + r"){0,499}"
        + FLOW_WORDS
        + ")))"
    )


_SECRET_VALUE = _secret_value(BLOCK)
_UNKEYED_VALUE = _secret_value(BLOCK, shell.IN_SINGLE)
_AUTHORIZATION = "authorization"
# A key written in words, as a password manager labels a field (``"label": "API Key"``,
# ``"Secret Key"``): a name's text, never a key's, so the sibling pattern alone reads it.
_WORDS_KEY = "(?:api|access|auth|private|secret) key"
# A line's end or a quote escaped as JSON text writes it, or escaped twice (``\\\"``: JSON
# inside a JSON string inside JSON text) or thrice (seven backslashes), as ``_QUOTE`` reads
# a key's.
_ESCAPES = r"(?:\\{6}|\\\\)?\\[nrt\"]"
# What lies between one entry and the next of an object or a YAML mapping: blanks, lines,
# commas and quotes, bare or escaped as JSON text writes them, once or twice (a file's lines
# as strings of an array too), or a form body's ``&`` (``name=api_key&value=…``). Never a
# brace or a bracket: an entry of the next object is not this one's. A numbered view's line number
# (``_LINE_NUMBER``) after a line's end is one too (``cat -n``, an editor tool's view).
_BETWEEN = r"(?:[\s,\"'&]|" + _ESCAPES + "|" + _LINE_NUMBER + r"){1,128}+"
# A short scalar entry between a name and its value (``"Type": "SecureString"``).
_ENTRY = r"[a-z]{1,32}+" + _assigned(3) + _QUOTE + r"?[a-z0-9_.:/\-]{0,64}+" + _BETWEEN
# A secret's key whose value is an object, or in YAML the lines under it, holding the secret
# as its ``value`` (Terraform's outputs: ``"db_password": {"sensitive": true, "value": …}``):
# its separator then a brace or a line's end, never a scalar, so a key's own value
# (``"password": "", "value": …``) names nothing after it.
_OPENS = _QUOTE + "?" + BLANK + r"{0,3}:" + BLANK + r"{0,3}(?:\{|(?=[\r\n]|\\[rn]))"
# A secret keyed by its sibling entry, as lists of name/value pairs hold them: a Kubernetes
# ``env`` (``- name: DB_PASSWORD`` above ``value: …`` as kubectl prints it), HAR headers
# (``{"name": "Authorization", "value": "Basic …"}``), AWS tags and CloudFormation
# parameters (``Key``/``Value``, ``ParameterKey``/``ParameterValue``, the CLI's
# ``Key=…,Value=…``), GitHub Actions and Terraform variables, a password manager's fields
# (``"label": "password", "value": …``). An entry's text ends in a key of the keyed pass
# (``_SECRET_KEY``, the ``Authorization`` header, or one in words: ``_WORDS_KEY``), or is
# that key opening an object (``_OPENS``), and the entry after it, or at most two short
# entries on, is a ``value``: read as the keyed pass reads a value (``_SECRET_VALUE``). It
# begins at the secret's key, so it is tried only where the keyed pass is (or a key in
# words), not at every ``name`` or ``key`` of a JSON text. Every part is bounded, so each
# try reads a bounded distance on, and each run whose next part never begins with one of
# its characters (the key's suffix, ``_BETWEEN``, an entry's key and scalar) is possessive
# (``+``): a try that fails does not step back through it a character at a time.
_SIBLING = (
    r"(?i)(?:"
    + _SECRET_KEY
    + "|"
    + _AUTHORIZATION
    + "|"
    + _WORDS_KEY
    + ")"
    + f"(?:{_OPENS})?"
    + _BETWEEN
    + f"(?:{_ENTRY}){{0,2}}"
    + r"(?:parameter)?value"
    + _assigned(3)
    + _SECRET_VALUE
)
# The same pair the other way round, its value first (``{"value": "…", "name": "DB_PASSWORD"}``,
# ``value=…&name=api_key``): a ``value`` entry, then, past a comma, a line's end or a form's
# ``&`` (never blanks alone: ``Value=prod Key=api_token`` is two pairs of the CLI's list, the
# next one's name after this one's value), at most two short entries, and a name, key, label
# or id entry whose whole text ends in a key of the keyed pass (``"label": "Master Password"``).
_NAME_AFTER = (
    r"(?:[ \t\"']|(?:\\{6}|\\\\)?\\[t\"]){0,64}+(?:,|&|"
    + NL
    + r")(?:[\s,\"']|"
    + _ESCAPES
    + "|"
    + _LINE_NUMBER
    + r"){0,128}+"
    + f"(?:{_ENTRY}){{0,2}}"
    + r"(?:parameter)?(?:name|key|label|id)"
    + _assigned(3)
    + _QUOTE
    + r"?[a-z0-9_./%\- ]{0,64}(?:"
    + _SECRET_KEY
    + "|"
    + _AUTHORIZATION
    + "|"
    + _WORDS_KEY
    + r")(?=(?:\\{6}|\\\\)?\\?[\"']|[\s,;&}\]]|\\[nrt]|$)"
)
# Its one start literal is ``value`` (``ParameterValue`` by a lookbehind): a second one
# (``parametervalue``) beside it slows the literal scan of every text several times over.
_SIBLING_AFTER = (
    r"(?i)(?:(?<![a-z0-9_])|(?<=parameter))value"
    + _assigned(3)
    + _secret_value(SHORT_BLOCK)
    + _NAME_AFTER
)

# A key and its value in the comment after a block's indicator (``password: |  # old
# password: hunter2``): the block's match takes its indicator's comment whole, so no key in
# it is tried at that pass; this one, before the keyed pass, redacts the comment's value. Its
# key begins a word (``DB_PASSWORD`` at ``PASSWORD``), so a run of keys (``pwdpwd…``) reads
# the comment once, not from each.
_IN_COMMENT = (
    r"(?i)(?<![a-z0-9])"
    + _SECRET_KEY
    + _assigned(3)
    + r"[|>][+-]?[1-9]?[+-]?"
    + BLANK
    + r"{1,8}#(?:[^\r\n\\]|\\[^nr]){0,256}?"
    + _SECRET_KEY
    + _assigned(3)
    + _SECRET_VALUE
)

DEFAULT_PATTERNS: tuple[str, ...] = (
    # Secrets known by their shape, no key naming them (``secret_tokens``).
    *SHAPED,
    # AWS secret access key assignments (40 base64 chars) keeping the key name, or its value
    # after a blank (``aws configure set aws_secret_access_key …``, ``… Key [None]: …``). It
    # begins at the keyed pass's literal ``secret``, ``aws`` read behind: its ``[ _-_]`` (a
    # range) stops the scanner spelling out more literals, each one more for it to look for.
    r"(?i)(?:(?<=aws)|(?<=aws[_ ]))secret[ _-_]?access[ _-_]?key(?: \[[^\]\n]{0,64}+\])?(?:"
    + _assigned(5)
    + "|"
    + BLANK
    + "{1,5})"
    + _QUOTE
    + "?"
    r"(?P<secret>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
    # An Authorization header's Basic or token credential: keep the scheme word.
    r"(?i)"
    + _AUTHORIZATION
    + _QUOTE
    + r"?[ \t]{0,3}[:=][ \t]{0,3}"
    + _QUOTE
    + r"?(?:basic|token)[ \t]{1,5}"
    + NOT_REDACTED
    + r"(?P<secret>[A-Za-z0-9+/=._\-]{8,4096})",
    # The same secrets keyed by a sibling entry: ``{"name": "DB_PASSWORD", "value": "…"}``
    # (``_SIBLING``).
    _SIBLING,
    _SIBLING_AFTER,
    _IN_COMMENT,
    # password/secret/token/api_key assignments: ``password=…``, ``"password": "…"``, ``token%3D…``,
    # ``PASSWORD: …``, ``DB_PASSWORD=…``, ``apiKey: '…'``. Keeps the key, redacts the value.
    # In JSON text (a call's arguments) a quoted value's quotes are escaped (``\"…\"``):
    # the value between them is redacted, never the backslash alone, which would let the
    # value through and leave the text JSON no longer.
    # ``KEY_COLUMN`` is looked for only where a keyword's first letter is: a scan of every
    # position (a text dense with keys) tries it nowhere else.
    r"(?i)(?=[acpst])"
    + KEY_COLUMN
    + _SECRET_KEY
    + ANNOTATION
    + "(?:"
    + ENCODED_VALUE
    + "|"
    + _assigned(3, _KEY_QUOTE)
    + _AS_QUOTED
    + _secret_value(KEYED_BLOCK)
    + "|"
    + shell.FLAG_VALUE
    + ")",
    # Credentials in a command's, a file's or a header's syntax (``secret_tokens``), and
    # a password keyed by a bare ``pass`` after another word (``DB_PASS=…``, never
    # ``bypass``, ``pass:``, ``PASSED``), from the separator before it. Last, so their
    # literals go to the scanner's second automaton and the first keeps its set.
    *IN_SYNTAX,
    r"(?i)(?<=[a-z0-9])[_.\-]"
    + KEY_COLUMN  # never a column here: only its groups, which the block's lines name
    + r"pass(?![a-z0-9])"
    + _assigned(3, _KEY_QUOTE)
    + _AS_QUOTED
    + _secret_value(KEYED_BLOCK),
    # A bare ``PASS=…`` (a shell's, an ``.env`` file's, a form's ``&pass=…``: never ``--pass=``
    # nor ``pass:``), and a storage account's key as its SDKs and YAML spell it
    # (``accountKey: …``, ``account_key=…``, ``storageAccountKey``; a connection string's is
    # ``ACCOUNT_KEY``'s), or az's option (``--account-key …``: base64 only, no variable). A
    # line's start in JSON text is an escape's end (``\nPASS=…``). ``PASS = …`` is spaced as
    # an .env or .ini file may space it; a test runner's verdict is no value (``PASS=FAIL``).
    # Their keys have no quote telling a value's depth in JSON text (``shell.IN_SINGLE``).
    r"(?i)(?:(?<![a-z0-9_.$\-])|(?<=\\[nrt]))pass(?:=|[ \t][ \t]{0,7}+=(?![=~])[ \t]{0,3})"
    + shell.NOT_A_VERDICT
    + _UNKEYED_VALUE,
    r"(?i)(?:(?<![a-z0-9])|(?<=[a-z0-9])(?=(?-i:A)))account[_\-]?key(?:"
    + _assigned(3, _KEY_QUOTE)
    + _AS_QUOTED
    + _UNKEYED_VALUE
    + r"|(?<=--account-key)[ \t]{1,3}(?:\\{0,3}[\"'])?"
    + NOT_REDACTED
    + r"(?P<secret12>[A-Za-z0-9+/]{8,1000}+={0,2})(?![^\s\"'\\]))",
    # csh's ``setenv PASS …`` (``secret_shell``).
    shell.SETENV_NAME + _UNKEYED_VALUE,
)
"""Built-in secret patterns, applied before any configured ones (order matters: specific
shapes first, the generic assignment last)."""
