"""Secret redaction: replace credentials in text before it is stored, spilled or forwarded.

Every pattern is built to run in linear time on multi-megabyte tool output: each starts with a
literal or a short keyword, and every quantifier is bounded, so no input can make the engine
backtrack catastrophically. A pattern with a named group whose name starts with ``secret``
(``secret``, ``secret2`` …) keeps the surrounding text (the key name, the ``Bearer`` word) and
replaces only that group; any other match is replaced whole. Replacements are
:data:`REDACTED`, which no pattern matches again, so redaction is idempotent.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence

from proxy.cascade.types import Message

__all__ = ["REDACTED", "DEFAULT_PATTERNS", "compile_patterns", "redact", "redact_message"]

REDACTED = "[REDACTED]"

_NOT_REDACTED = r"(?!\[REDACTED\])"
_KEYWORD = (
    r"(?:passw(?:or)?d|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key"
    r"|auth[_-]?key|credentials?)"
)
# Unquoted values that are plainly not secrets: numbers (``"max_tokens": 100``), booleans,
# nulls, and values already redacted.
_NOT_A_VALUE = (
    r"(?![0-9.]{1,40}(?:[\s,;}\])]|$))"
    r"(?!(?:true|false|null|none|nil|undefined)(?:[\s,;}\])]|$))"
)

DEFAULT_PATTERNS: tuple[str, ...] = (
    # PEM private key blocks, whole, across lines.
    r"-----BEGIN (?:[A-Z0-9]{1,20} ){0,3}PRIVATE KEY-----[\s\S]{0,20000}?"
    r"-----END (?:[A-Z0-9]{1,20} ){0,3}PRIVATE KEY-----",
    # ... and one whose END line is missing (output cut short).
    r"-----BEGIN (?:[A-Z0-9]{1,20} ){0,3}PRIVATE KEY-----[\sA-Za-z0-9+/=:,\-]{0,20000}",
    # Anthropic (before OpenAI: both start with ``sk-``).
    r"sk-ant-(?<![\w-]sk-ant-)[A-Za-z0-9_\-]{20,300}",
    # OpenAI: legacy sk-…, project sk-proj-…, service-account, admin keys.
    r"sk-(?<![\w-]sk-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,300}",
    # Stripe secret and restricted keys.
    r"(?<![\w-])[sr]k_(?:live|test)_[A-Za-z0-9]{10,200}",
    # AWS access key ids (long-term and temporary).
    r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])",
    # AWS secret access key assignments (40 base64 chars), keeping the key name.
    r"(?i)aws_?secret_?access_?key[\"']?[ \t]{0,5}(?:=|:|=>)[ \t]{0,5}[\"']?"
    r"(?P<secret>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
    # GitHub personal/OAuth/user/server/refresh tokens and fine-grained PATs.
    r"gh(?<![\w-]gh)[pousr]_[A-Za-z0-9]{30,255}",
    r"github_pat_(?<![\w-]github_pat_)[A-Za-z0-9_]{30,255}",
    # Slack tokens.
    r"xox(?<![\w-]xox)[baprs]-[A-Za-z0-9\-]{10,250}",
    # Google API keys.
    r"AIza(?<![\w-]AIza)[0-9A-Za-z_\-]{35}",
    # JSON Web Tokens (header.payload.signature, base64url).
    r"eyJ(?<![\w-]eyJ)[A-Za-z0-9_\-]{5,4096}\.eyJ[A-Za-z0-9_\-]{5,8192}\.[A-Za-z0-9_\-]{0,4096}",
    # Authorization headers: keep the scheme word, redact the credential.
    r"(?i)bearer[ \t]{1,5}" + _NOT_REDACTED + r"(?P<secret>[A-Za-z0-9\-._~+/]{8,4096}=*)",
    r"(?i)authorization[\"']?[ \t]{0,3}[:=][ \t]{0,3}[\"']?(?:basic|token)[ \t]{1,5}"
    + _NOT_REDACTED
    + r"(?P<secret>[A-Za-z0-9+/=._\-]{8,4096})",
    # password/secret/token/api_key assignments: ``password=…``, ``"password": "…"``,
    # ``PASSWORD: …``, ``DB_PASSWORD=…``, ``apiKey: '…'``. Keeps the key, redacts the value.
    r"(?i)"
    + _KEYWORD
    + r"(?:[_.\-]?[a-z0-9]){0,24}[\"']?[ \t]{0,3}(?:=|:|=>)[ \t]{0,3}"
    + r"(?![\"']?\[REDACTED\])"
    + r"(?:\"(?P<secret>[^\"\n]{1,500})\"|'(?P<secret2>[^'\n]{1,500})'|"
    + _NOT_A_VALUE
    + r"(?P<secret3>[^\s\"',;{}\[\]()<>]{1,500}))",
)
"""Built-in secret patterns, applied before any configured ones (order matters: specific
shapes first, the generic assignment last)."""


@functools.lru_cache(maxsize=64)
def _compile(patterns: tuple[str, ...], use_defaults: bool) -> tuple[re.Pattern[str], ...]:
    compiled: list[re.Pattern[str]] = []
    sources = (DEFAULT_PATTERNS if use_defaults else ()) + patterns
    for source in sources:
        try:
            compiled.append(re.compile(source))
        except re.error as exc:
            raise ValueError(f"invalid redaction pattern {source!r}: {exc}") from exc
    return tuple(compiled)


def compile_patterns(
    patterns: Sequence[str], *, use_defaults: bool = True
) -> tuple[re.Pattern[str], ...]:
    """Compile configured patterns (after :data:`DEFAULT_PATTERNS` unless ``use_defaults`` is off).

    Cached per distinct pattern tuple, so calling it on every request costs a dict lookup.
    An invalid regex raises ``ValueError`` naming the pattern and the reason.
    """
    return _compile(tuple(patterns), use_defaults)


def _secret_groups(pattern: re.Pattern[str]) -> tuple[str, ...]:
    return tuple(name for name in pattern.groupindex if name.startswith("secret"))


def _replace(match: re.Match[str], groups: tuple[str, ...]) -> str:
    whole = match.group(0)
    for name in groups:
        if match.group(name) is not None:
            start, end = match.start(name) - match.start(), match.end(name) - match.start()
            return whole[:start] + REDACTED + whole[end:]
    return REDACTED


def redact(text: str, patterns: Sequence[re.Pattern[str]]) -> tuple[str, int]:
    """Replace every match of every pattern with :data:`REDACTED`; return (text, count).

    Patterns run in order over the output of the previous one. Text without any match is
    returned as the same object (callers can skip rewriting a message that did not change).
    """
    total = 0
    for pattern in patterns:
        groups = _secret_groups(pattern)
        text, n = pattern.subn(lambda m, g=groups: _replace(m, g), text)
        total += n
    return text, total


def redact_message(msg: Message, patterns: Sequence[re.Pattern[str]]) -> tuple[Message, int]:
    """Redact a message's content (a string or the text of its content parts).

    Returns the *same* message object when nothing matched, so an unchanged message keeps its
    identity (and the prompt cache keeps its prefix). Otherwise a new dict with only
    ``content`` replaced.
    """
    content = msg.get("content")
    if isinstance(content, str):
        text, n = redact(content, patterns)
        return (msg, 0) if n == 0 else ({**msg, "content": text}, n)
    if not isinstance(content, Sequence):
        return msg, 0
    total = 0
    parts: list[object] = []
    for part in content:
        if isinstance(part, Mapping) and isinstance(part.get("text"), str):
            text, n = redact(part["text"], patterns)
            if n:
                total += n
                part = {**part, "text": text}
        parts.append(part)
    return (msg, 0) if total == 0 else ({**msg, "content": parts}, total)
