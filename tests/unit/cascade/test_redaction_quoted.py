"""A secret's quoted value, read to the quote that closes it past the ones it escapes."""

from __future__ import annotations

from proxy.cascade.redaction import REDACTED, compile_patterns, redact

PATTERNS = compile_patterns(())


def test_a_value_ending_in_a_backslash_leaves_the_next_key_its_value() -> None:
    """A Windows path ends in a backslash before its quote (``"C:\\keys\\"``): read past
    that quote as an escaped one, the value ran on to the next string's opening quote and
    swallowed the next key, whose own value then went upstream unredacted."""
    text = 'SECRET_DIR="C:\\keys\\" API_KEY="abc123def"\n'
    assert redact(text, PATTERNS) == (f'SECRET_DIR="{REDACTED}" API_KEY="{REDACTED}"\n', 2)
    text = 'token_value="C:\\keys\\" token="t0k3nvalue"'
    assert redact(text, PATTERNS) == (f'token_value="{REDACTED}" token="{REDACTED}"', 2)
