"""The built-in patterns for secrets a URL holds, as :mod:`proxy.cascade.secret_patterns`
applies them: a Telegram bot's token or a Slack or Discord webhook's, which are the URL's path
(:data:`URL_PATH`), and a URL's password (:data:`URL_PASSWORD`). Either may be in JSON text
whose slashes are escaped (``https:\\/\\/…``)."""

from __future__ import annotations

__all__ = ["URL_PASSWORD", "URL_PATH"]

_NOT_REDACTED = r"(?!\[REDACTED\])"
# A URL's port after its host (``:443``), if any.
_PORT = r"(?::[0-9]{1,5})?"
# A URL's ``://`` and a slash of its path, bare or escaped as JSON text may write them
# (``https:\/\/host\/path``: PHP's ``json_encode``, a JavaScript string).
_URL_START = r"(?:://|:\\/\\/)"
_SLASH = r"\\?/"

# Secrets that are a URL's path, no key naming them (gitleaks' telegram-bot-api-token,
# slack-webhook-url; trufflehog's discordwebhook): a Telegram bot's token, a Slack or
# Discord webhook's. Keeps the host and the path's fixed words. Each begins at its
# host's domain, in any case (``Hooks.Slack.com``), where no host's character is before it
# (``evil-slack.com`` is another host), with a scheme or without, and its slashes may be
# escaped as JSON text may write them
# (``https:\/\/api.telegram.org\/bot…``): four literals the scanner finds, so a URL to any
# other host costs no regex call (a log line holds one or more).
URL_PATH = (
    r"(?i)(?<![A-Za-z0-9_\-])(?:telegram\.org"
    + _PORT
    + _SLASH
    + f"(?:file{_SLASH})?bot"
    + r"(?P<secret>[0-9]{5,16}:[A-Za-z0-9_\-]{20,256})"
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
# slashes too may be escaped (``postgresql:\/\/user:pass@host`` in JSON text).
URL_PASSWORD = (
    _URL_START
    + r"[^\s/?#@:\"'<>\[\]]{0,128}:"
    + _NOT_REDACTED
    + r"(?P<secret>[^\s/?#@\"'<>]{1,256})(?=@)"
)
