"""The built-in patterns for secrets known by their shape, no key naming them, as
:mod:`proxy.cascade.secret_patterns` applies them first (:data:`SHAPED`): private keys,
providers' tokens (``sk-…``, ``ghp_…``, ``AKIA…``), JSON Web Tokens, the secrets a URL holds
(a Telegram bot's token or a Slack or Discord webhook's, which are the URL's path:
:data:`URL_PATH`; a URL's password, or a token as its user: :data:`URL_PASSWORD`; each
in JSON text whose slashes are escaped, ``https:\\/\\/…``) and a bearer token; and the
credentials written in a command's, a config file's or a header's own syntax
(:data:`IN_SYNTAX`: ``curl``'s basic auth, an ``.npmrc``'s ``_auth``, a cookie header's
value, an Azure connection string's account key), each from its option's or its key's
literal, so text without one costs no regex call."""

from __future__ import annotations

__all__ = ["ENCODED_VALUE", "IN_SYNTAX", "NOT_REDACTED", "SHAPED", "URL_PASSWORD", "URL_PATH"]

# Where a secret begins that no earlier pass redacted (a second pass leaves the first's
# marks as they are).
NOT_REDACTED = r"(?!\[REDACTED\])"
# A URL's port after its host (``:443``), if any, its colon %-encoded too.
_PORT = r"(?:(?::|%3a)[0-9]{1,5})?"
# A URL's ``://`` and a slash of its path, bare or escaped as JSON text may write them
# (``https:\/\/host\/path``: PHP's ``json_encode``, a JavaScript string), or escaped again
# in a JSON string holding that text (``:\\/\\/``, PHP's ``:\\\/\\\/``, a level further down
# too: two literals, ``:\\/`` and ``:\\\``, for them all, where one, ``:\\``, is in every
# Windows path that JSON text holds, ``C:\\Users``); a path's slash also %-encoded (``%2F``: a
# URL that is a query's parameter, ``?redirect=https%3A%2F%2F…``).
_URL_START = r"(?:://|:\\/\\/|:\\\\(?:/|\\{1,6}/)\\{2,8}/)"
_SLASH = r"(?:\\{0,7}/|%2f)"

# Secrets that are a URL's path, no key naming them (gitleaks' telegram-bot-api-token,
# slack-webhook-url; trufflehog's discordwebhook): a Telegram bot's token, a Slack or
# Discord webhook's. Keeps the host and the path's fixed words. Each begins at its
# host's domain, in any case (``Hooks.Slack.com``), where no host's character is before it
# (``evil-slack.com`` is another host) but an encoded slash's, with a scheme or without,
# and its slashes may be escaped as JSON text may write them
# (``https:\/\/api.telegram.org\/bot…``): four literals the scanner finds, so a URL to any
# other host costs no regex call (a log line holds one or more).
URL_PATH = (
    r"(?i)(?:(?<![A-Za-z0-9_\-])|(?<=%2f))(?:telegram\.org"
    + _PORT
    + _SLASH
    + f"(?:file{_SLASH})?bot"
    + r"(?P<secret>[0-9]{5,16}(?::|%3a)[A-Za-z0-9_\-]{20,256})"
    + r"|slack\.com"
    + _PORT
    + _SLASH
    + f"(?:services|workflows|triggers){_SLASH}"
    + r"(?P<secret2>(?:[A-Za-z0-9+_\-]|"
    + _SLASH
    + r"){24,256})"
    + r"|discord(?:app)?\.com"
    + _PORT
    + _SLASH
    + f"api{_SLASH}(?:v[0-9]{{1,2}}{_SLASH})?webhooks{_SLASH}[0-9]{{5,24}}{_SLASH}"
    + r"(?P<secret3>[A-Za-z0-9_\-]{20,256}))"
)
# A URL's password (``postgresql://user:pass@host``, a .env file, a clone command):
# keeps the scheme, user and host. A URL with a port and no ``@`` is left alone. Its
# slashes too may be escaped (``postgresql:\/\/user:pass@host`` in JSON text). Or a token
# as a URL's user, no password after it (``https://<token>@github.com``): 20 characters or
# more of a token's alphabet, digits and letters both (``git@``, a name's ``first.last@``
# stay); one pattern, so a URL costs one try.
URL_PASSWORD = (
    _URL_START
    + r"(?:[^\s/?#@:\"'<>\[\]]{0,128}:"
    + NOT_REDACTED
    + r"(?P<secret>[^\s/?#@\"'<>]{1,256})(?=@)|"
    + NOT_REDACTED
    + r"(?=[A-Za-z0-9_\-]{20,256}+@)(?=[A-Za-z_\-]{0,255}[0-9])(?=[0-9_\-]{0,255}[A-Za-z])"
    + r"(?P<secret2>[A-Za-z0-9_\-]{20,256})(?=@))"
)

# A line break after a full line of base64 wrapped at 64 or 76 columns (the line's run of
# base64 is that long), bare or escaped in JSON text (``\n``, the line before it then
# following its own ``\n``).
_WRAPPED = (
    r"(?:(?<=[^A-Za-z0-9+/][A-Za-z0-9+/]{64})|(?<=[^A-Za-z0-9+/][A-Za-z0-9+/]{76})"
    r"|(?<=\\n[A-Za-z0-9+/]{64})|(?<=\\n[A-Za-z0-9+/]{76}))(?:\r?\n|\\n)"
)

# ``curl``'s basic auth (``-u user:pass``, ``-u'user:pass'``, ``--user user:pass``,
# ``--user=user:pass``, a proxy's ``-U``/``--proxy-user``, the pair quoted or not, its
# quotes escaped in JSON text):
# the user stays, the password goes. With no URL after it on the line, a password of five
# digits or fewer is a group's id (``docker run -u 1000:1000``, ``--user www-data:33``), as is
# one that repeats the user (``--user www-data:www-data``; ``curl -u admin:admin http://…``
# and ``curl -u bob:1234 http://…`` are logins); a well-known system account's with a
# well-known group is one too (``--user nobody:nogroup``, ``-u root:wheel``), but with a URL
# after it a login's (``curl -u root:root https://…``). One that begins with ``$`` and a
# name is a variable's (``bob:$PASS``, ``"bob:${PASS}"``: no secret in the text; ``$3cr…``
# is a password's), and a user without a colon after it (``git push -u origin``, ``sudo -u
# postgres``) no pair.
_URL_AFTER = r"(?=[^\r\n:]{0,256}+://)"
_SYSTEM = (
    r"(?:root|nobody|nogroup|daemon|bin|sys|adm|wheel|staff|users|sudo|docker|www-data"
    r"|nginx|apache|http|mail|postgres|mysql|redis|node|operator|games|systemd-[a-z]{1,16})"
)
_USER_AND_SECRET = (
    r"(?:(?="
    + _SYSTEM
    + r":)(?P<system>))?+(?P<user>[^\s:'\"@$\\]{0,128}+):"
    + NOT_REDACTED
    + r"(?!(?:(?P=user)|[0-9]{1,5})(?![^\s'\"\\])(?!"
    + _URL_AFTER
    + "))"
    + r"(?(system)(?!"
    + _SYSTEM
    + r"(?![^\s'\"\\])(?!"
    + _URL_AFTER
    + r")))(?!\$[A-Za-z_{(])"
    + r"(?P<secret>[^\s'\"\\]{1,256})"
)
CURL_USER = (
    r"(?<![\w-])(?:-[uU][ \t'\"]|--(?:proxy-)?user[ \t=])[ \t]{0,3}(?:\\{0,3}['\"])?"
    + _USER_AND_SECRET
)
# The pair glued to the option (``curl -ubob:pass``, ``'-ubob:pass'``) or to a bundle of flags
# it ends (``-sSfu bob:pass``, ``-fsSLubob:pass``), read on a ``curl`` command's line (its
# lines joined by ``\`` at their ends; in JSON text an escaped line's end ends it) after a
# blank: a bare ``-u`` literal would be tried at every ``-u`` of every text (``-update``,
# ``sort -u``) and slow the scan of each. The line is read to the next ``curl`` word, so
# each character of a line of many is read from one ``curl`` only, and at most 3,400
# characters on, so that a match, the pair after them, stays within ``REDACT_PAST``.
_LINE_CHAR = r"(?:[^\r\n\\]|\\(?![nr])|\r(?<=\\\r)|\n(?:(?<=\\\n)|(?<=\\\r\n)))"
_CURL_LINE = (
    r"(?<![\w-])curl(?=[ \t])(?:(?!(?<![\w-])curl[ \t])" + _LINE_CHAR + r"){1,3400}?(?<=[ \t\n])"
)
CURL_USER_GLUED = (
    _CURL_LINE
    + r"(?:\\{0,3}['\"])?-(?:[A-Za-z]{1,8}?[uU](?:[ \t]{1,3}(?:\\{0,3}['\"])?)?|[uU])"
    + r"(?=[^\s'\"\\\-])"
    + _USER_AND_SECRET
)

# An ``.npmrc``'s base64 ``user:password`` (``_auth=…``, a registry's ``//host/:_auth=…``),
# quoted or not; its ``_authToken`` is the keyed pass's ``token``. Only base64 to the value's
# end, and never a program's name (``this._auth = null``, ``const _auth = require(…)``).
NPM_AUTH = (
    r"(?<![A-Za-z0-9_.$])(?<!let )(?<!var )(?<!const )_auth[ \t]{0,8}=[ \t]{0,3}"
    r"(?:\\{0,3}[\"'])?" + NOT_REDACTED + r"(?P<secret>[A-Za-z0-9+/]{8,1000}+={0,2})(?![^\s\"'\\])"
)

# A ``Cookie`` or ``Set-Cookie`` header's value (a session's cookies), in a request's or a
# response's dump or as a JSON entry (``"Cookie": "sid=…"``): to the line's end or its
# string's closing quote, when it begins with a cookie's ``name=`` (``the cookie: a small
# cake`` is prose, ``cookie: Cookie`` a type); a first value in double quotes
# (``sid="…"``, as a cookie may be written) is read through them. Each part reads at most
# 2,048 characters, so a match stays within ``REDACT_PAST`` (a head cut short of the text
# reads that far past its cut: ``redaction.redact_head``).
COOKIE = (
    r"(?i)(?:(?<![a-z0-9_\-])|(?<=set-))cookie(?:\\{0,3}[\"'])?[ \t]{0,3}:[ \t]{0,3}"
    r"(?:\\{0,3}[\"'])?" + NOT_REDACTED + r"(?P<secret>[^\s;=\"'\\]{1,256}="
    r"(?:\"[^\r\n\"\\]{0,2048}\"(?=[;\s]|\Z))?[^\r\n\"'\\]{0,2048})"
)

# An Azure storage connection string's ``AccountKey=…;`` (its ``SharedAccessKey`` is the
# keyed pass's ``accesskey``), spaced or quoted, or a JSON entry's (``"AccountKey": "…"``).
ACCOUNT_KEY = (
    r"(?i)(?<![a-z0-9])accountkey(?:[ \t]{0,8}=[ \t]{0,3}(?:\\{0,3}[\"'])?"
    r"|\\{0,3}[\"'][ \t]{0,3}:[ \t]{0,3}\\{0,3}[\"'])"
    + NOT_REDACTED
    + r"(?P<secret>[^;\s\"'\\]{1,1000})"
)

# A keyed pair %-encoded once or twice (``token%3D…``, ``%253D``: a URL that is a query's
# parameter), after its key: the value to the next encoded ``&`` (the keyed pass's
# separator, so it costs no try of its own).
ENCODED_VALUE = (
    r"%(?:25)?3d(?!%(?:25)?5bredacted)"
    r"(?P<secret11>(?:[a-z0-9_.~+\-]|%(?!(?:25)?26)[0-9a-f]{2}){1,500})"
)

# ``curl``'s cookies on its command line (``-b 'sid=…; theme=dark'``, ``--cookie sid=…``):
# a quoted value to its closing quote, a bare one to the next blank. ``-b`` quoted anywhere;
# a file's name (``--cookie cookies.txt``, ``git checkout -b feature``) has no ``=`` and
# stays.
CURL_COOKIE = (
    r"(?<![\w-])(?:-b[ \t][\\'\"](?:(?<=\\)\\{0,2}['\"])?"
    r"|--cookie[ \t=][ \t]{0,3}(?:\\{0,3}['\"])?)"
    r"(?:(?<=['\"])"
    + NOT_REDACTED
    + r"(?P<secret>[^\s;=\"'\\]{1,256}=[^\r\n\"'\\]{0,4096})|(?<!['\"])"
    + NOT_REDACTED
    + r"(?P<secret2>[^\s;=\"'\\]{1,256}=[^\s\"'\\]{0,4096}))"
)
# ... and a bare ``-b sid=…``, read on a ``curl`` command's line as the glued pair is: a bare
# ``-b name=value`` is a flag's elsewhere (``git checkout -b feat=x``, ``make -b V=1``), and
# one whose name or value begins with ``-`` is a flag's on it too (``CFLAGS=-O2``). Its
# value reads at most 768 characters, so that a match, its line before it, stays within
# ``REDACT_PAST``.
CURL_COOKIE_BARE = (
    _CURL_LINE
    + r"-b[ \t]{1,3}"
    + NOT_REDACTED
    + r"(?P<secret>[^\s;=\"'\\\-][^\s;=\"'\\]{0,255}=(?!-)[^\s\"'\\]{1,768})"
)

IN_SYNTAX: tuple[str, ...] = (
    CURL_USER,
    CURL_USER_GLUED,
    NPM_AUTH,
    COOKIE,
    ACCOUNT_KEY,
    CURL_COOKIE,
    CURL_COOKIE_BARE,
)
"""Built-in patterns for credentials in a command's, a file's or a header's syntax."""

SHAPED: tuple[str, ...] = (
    # PEM private key blocks, whole, across lines. The body holds no run of five dashes,
    # so the search for the END line stops at the next one (another BEGIN line) rather than
    # reading its 20,000 characters from each of many BEGIN lines; a dash just before the
    # END line is the body's (a diff that removes the key puts one before each line).
    r"-----BEGIN (?:[A-Z0-9]{1,20} ){0,3}PRIVATE KEY-----"
    r"(?:[^-]|-(?!----)|-(?=-----END )){0,20000}?"
    r"-----END (?:[A-Z0-9]{1,20} ){0,3}PRIVATE KEY-----",
    # ... and one whose END line is missing (output cut short); in JSON text (a call's
    # arguments) its lines are joined by escapes (``\n``), read as the lines they stand for.
    r"-----BEGIN (?:[A-Z0-9]{1,20} ){0,3}PRIVATE KEY-----"
    r"(?:[\sA-Za-z0-9+/=:,\-]|\\[nrt/]){0,20000}",
    # Anthropic (before OpenAI: both start with ``sk-``).
    r"sk-ant-(?<![\w-]sk-ant-)[A-Za-z0-9_\-]{20,300}",
    # OpenAI: legacy sk-…, project sk-proj-…, service-account, admin keys.
    r"sk-(?<![\w-]sk-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,300}",
    # Stripe secret and restricted keys.
    r"(?<![\w-])[sr]k_(?:live|test)_[A-Za-z0-9]{10,200}",
    # AWS access key ids (long-term and temporary).
    r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])",
    # GitHub personal/OAuth/user/server/refresh tokens and fine-grained PATs.
    r"gh(?<![\w-]gh)[pousr]_[A-Za-z0-9]{30,255}",
    r"github_pat_(?<![\w-]github_pat_)[A-Za-z0-9_]{30,255}",
    # Hugging Face, GitLab and npm access tokens.
    r"hf_(?<![\w-]hf_)[A-Za-z0-9]{30,60}(?![A-Za-z0-9_])",
    r"glpat-(?<![\w-]glpat-)[A-Za-z0-9_\-]{20,64}",
    r"npm_(?<![\w-]npm_)[A-Za-z0-9]{36}(?![A-Za-z0-9_])",
    # Slack tokens.
    r"xox(?<![\w-]xox)[baprs]-[A-Za-z0-9\-]{10,250}",
    # Google API keys.
    r"AIza(?<![\w-]AIza)[0-9A-Za-z_\-]{35}",
    # A private key's PEM block in base64, as a Kubernetes Secret's data holds it
    # (``tls.key: LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0t…``, ``-----BEGIN PRIVATE KEY-----``),
    # to its end however long, across the lines ``base64`` (76 columns) or ``openssl base64``
    # (64) wraps it in; a certificate's (``…BDRVJUSUZJQ0FURS0tLS0t``) is kept. It
    # begins past its first two characters (``LS`` read behind, kept, after no base64 but
    # JSON text's ``\n``), its kinds read ahead:
    # one literal that begins with a digit, which the scanner finds at no cost on prose,
    # where one beginning ``LS0`` (a letter) slowed every text's scan.
    r"0tLS1CRUdJTiB(?:(?<=(?<![A-Za-z0-9+/])LS0tLS1CRUdJTiB)|(?<=\\nLS0tLS1CRUdJTiB))"
    r"(?=QUklWQVRF|SU0EgUFJJVkFURS"
    r"|FQyBQUklWQVRF|PUEVOU1NIIFBSSVZBVEU|EU0EgUFJJVkFURS|FTkNSWVBURUQgUFJJVkFURS"
    r"|QR1AgUFJJVkFURS)[A-Za-z0-9+/]*+(?:" + _WRAPPED + r"[A-Za-z0-9+/]++)*+={0,2}",
    # A registry's credentials, a Docker config in base64 (``{"auths":``), as a Kubernetes
    # Secret's ``.dockerconfigjson`` holds it: its ``auth`` entries are ``user:password``.
    # It begins at the JSON Web Token's literal, the rest read ahead.
    r"eyJ(?<![A-Za-z0-9+/]eyJ)(?=hdXRocyI6)[A-Za-z0-9+/]*+={0,2}",
    # JSON Web Tokens (header.payload.signature, base64url).
    r"eyJ(?<![\w-]eyJ)[A-Za-z0-9_\-]{5,4096}\.eyJ[A-Za-z0-9_\-]{5,8192}\.[A-Za-z0-9_\-]{0,4096}",
    # Secrets that are a URL's path, and a URL's password.
    URL_PATH,
    URL_PASSWORD,
    # A bearer token, an Authorization header's or any other: keep the scheme word, redact
    # the credential.
    r"(?i)bearer[ \t]{1,5}" + NOT_REDACTED + r"(?P<secret>[A-Za-z0-9\-._~+/]{8,4096}=*)",
)
"""Built-in patterns for secrets known by their shape, applied before the keyed ones, in
order: a PEM block before any token its text may hold, Anthropic's ``sk-ant-`` before
OpenAI's ``sk-``."""
